// The CPU sort-reduce engine (ops/sort_reduce_cpu.h): the streaming pass against the sort-based plan it
// replaced (reference_sort_reduce), bit for bit, for every combine in use, hot keys around each tree level's
// boundary, several column counts, skipped contributions, dense and sparse key spaces, and 1 or 2 threads.
#include "ops/contract.h"
#include "ops/last_writer_op.h"
#include "ops/sort_reduce_cpu.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace {

// Keys keys[i] * scale (or kSkipKey), contributions values[i * D + c]; finalize records the total and counts
// its calls per (key, column).
template <typename acc_t, typename C>
struct TableOp {
  using Combine = C;
  const int64_t* keys;
  const acc_t* values;
  acc_t* out;
  int64_t* calls;
  int64_t D;
  int64_t scale;

  int64_t key(int64_t i) const { return keys[i] == detops::kSkipKey ? keys[i] : keys[i] * scale; }
  acc_t contribution(int64_t i, int64_t c) const { return values[i * D + c]; }
  void finalize(int64_t k, int64_t c, acc_t total) const {
    const int64_t slot = (k / scale) * D + c;
    out[slot] = total;
    ++calls[slot];
  }
};

// The Last combine over source positions: each key's last contributing position.
template <typename acc_t>
struct PositionOp {
  using Combine = detops::Last;
  using value_type = acc_t;
  const int64_t* keys;
  acc_t* out;
  int64_t* calls;
  int64_t D;
  int64_t scale;

  int64_t key(int64_t i) const { return keys[i] == detops::kSkipKey ? keys[i] : keys[i] * scale; }
  acc_t contribution(int64_t i, int64_t c) const { return i * 7 + c; }
  void finalize(int64_t k, int64_t c, acc_t total) const {
    const int64_t slot = (k / scale) * D + c;
    out[slot] = total;
    ++calls[slot];
  }
  // The last writer's copy: the element of position i, and its store at key k.
  acc_t read(int64_t i, int64_t c) const { return contribution(i, c); }
  void write(int64_t k, int64_t c, acc_t v) const { finalize(k, c, v); }
};

struct Keys {
  std::vector<int64_t> keys;
  int64_t num_keys;  // of the unscaled keys
};

// Hot keys 0..6 with 31, 32, 33, 1023, 1024, 1025 and 32^3 + 1 contributions, the rest spread over
// `spread` keys, a share skipped; positions shuffled.
Keys make_keys(std::mt19937& rng, int64_t spread, bool skips) {
  const int64_t hot[] = {31, 32, 33, 1023, 1024, 1025, 32 * 32 * 32 + 1};
  Keys k;
  k.num_keys = 7 + spread;
  for (int64_t h = 0; h < 7; ++h) k.keys.insert(k.keys.end(), hot[h], h);
  for (int64_t i = 0; i < 40000; ++i) k.keys.push_back(7 + static_cast<int64_t>(rng() % spread));
  if (skips) {
    for (int64_t i = 0; i < 3000; ++i) k.keys.push_back(detops::kSkipKey);
  }
  std::shuffle(k.keys.begin(), k.keys.end(), rng);
  return k;
}

template <typename acc_t>
std::vector<acc_t> make_values(std::mt19937& rng, int64_t count, int kind) {
  std::vector<acc_t> v(count);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int64_t j = 0; j < count; ++j) {
    if constexpr (std::is_integral_v<acc_t>) {
      v[j] = static_cast<acc_t>((static_cast<uint64_t>(rng()) << 32) | rng());
    } else if (kind == 1) {  // products: near 1
      v[j] = static_cast<acc_t>(1.0 + u(rng) * 1e-3);
    } else if (kind == 2) {  // selections: ties, signed zeros and NaNs
      const uint32_t r = rng() % 100;
      v[j] = r == 0 ? std::numeric_limits<acc_t>::quiet_NaN()
                    : r < 10 ? acc_t(0) * (r % 2 ? acc_t(1) : acc_t(-1)) : static_cast<acc_t>(std::round(u(rng) * 8));
    } else {
      v[j] = static_cast<acc_t>(u(rng)) * static_cast<acc_t>(std::ldexp(1.0, static_cast<int>(rng() % 20) - 10));
    }
  }
  return v;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <typename acc_t, typename Make>
void compare(const Make& make_op, int64_t n, int64_t num_keys, int64_t scale, int64_t D, const std::string& what) {
  std::vector<acc_t> want(num_keys * D, acc_t(77)), got(num_keys * D, acc_t(77));
  std::vector<int64_t> want_calls(num_keys * D, 0), got_calls(num_keys * D, 0);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  detops::cpu::reference_sort_reduce<acc_t>(make_op(want.data(), want_calls.data()), n, num_keys * scale, D);
  for (int t : {1, 2}) {
    at::set_num_threads(t);
    std::fill(got.begin(), got.end(), acc_t(77));
    std::fill(got_calls.begin(), got_calls.end(), 0);
    detops::cpu::sort_reduce<acc_t>(make_op(got.data(), got_calls.data()), n, num_keys * scale, D);
    EXPECT_TRUE(same_bits(want, got)) << what << ", " << t << " thread(s)";
    EXPECT_EQ(want_calls, got_calls) << what << ", " << t << " thread(s)";
  }
  at::set_num_threads(threads);
  for (int64_t c : want_calls) ASSERT_LE(c, 1) << what;
}

template <typename acc_t, typename C>
void compare_combine(int kind, const char* name) {
  std::mt19937 rng(11);
  for (const int64_t D : {1, 3, 64}) {
    for (const bool skips : {false, true}) {
      // Dense: few keys (long segments) and about one key per contribution; sparse: keys spread over 2^40.
      for (const int64_t spread : {int64_t{50}, int64_t{40000}}) {
        const Keys k = make_keys(rng, spread, skips);
        const int64_t n = static_cast<int64_t>(k.keys.size());
        const std::vector<acc_t> values = make_values<acc_t>(rng, n * D, kind);
        for (const int64_t scale : {int64_t{1}, int64_t{1} << 20}) {
          const std::string what = std::string(name) + ", D " + std::to_string(D) + (skips ? ", skips" : "") +
                                   ", spread " + std::to_string(spread) + ", scale " + std::to_string(scale);
          compare<acc_t>(
              [&](acc_t* out, int64_t* calls) {
                return TableOp<acc_t, C>{k.keys.data(), values.data(), out, calls, D, scale};
              },
              n, k.num_keys, scale, D, what);
        }
      }
    }
  }
}

TEST(CpuEngine, SumsMatchTheSortedPlan) {
  compare_combine<float, detops::AddRn>(0, "AddRn float");
  compare_combine<double, detops::AddRn>(0, "AddRn double");
}

TEST(CpuEngine, ProductsMatchTheSortedPlan) {
  compare_combine<float, detops::MulRn>(1, "MulRn float");
  compare_combine<double, detops::MulRn>(1, "MulRn double");
}

TEST(CpuEngine, SelectionsMatchTheSortedPlan) {
  compare_combine<float, detops::MaxNan>(2, "MaxNan float");
  compare_combine<float, detops::MinNan>(2, "MinNan float");
  compare_combine<double, detops::MaxNan>(2, "MaxNan double");
  compare_combine<int64_t, detops::MinNan>(0, "MinNan int64");
}

// A combine with no identity (the engine's one-column pass then starts each block from its first item, with
// no branch): the first item of the sequence.
struct FirstOf {
  template <typename T>
  T operator()(T a, T) const {
    return a;
  }
};

TEST(CpuEngine, ACombineWithoutAnIdentityMatchesTheSortedPlan) {
  static_assert(!detops::cpu::detail::combine_identity<FirstOf, float>::exists);
  compare_combine<float, FirstOf>(0, "FirstOf float");
}

TEST(CpuEngine, WrappingIntegersMatchTheSortedPlan) {
  compare_combine<int64_t, detops::WrapAdd>(0, "WrapAdd");
  compare_combine<int64_t, detops::WrapMul>(0, "WrapMul");
}

// The CUDA engine's last writer by a winner table (ops/last_writer_op.h): winners raised in a shuffled order of
// the contributions, then each copy (over the keys, over the contributions; 32- and 64-bit pair indices) over
// its calls of kLastWriterPairs pairs in a shuffled order (with 3 columns, calls cross rows), against the sorted
// plan, bit for bit, with one write per written slot. Scaled by 4, the 40,007 spread keys outnumber the
// contributions (the engine copies over the contributions there).
template <typename index_t>
void compare_winner_table_copies(std::mt19937& rng) {
  for (const int64_t D : {int64_t{1}, int64_t{3}}) {
    for (const int64_t spread : {int64_t{50}, int64_t{40000}}) {
      const Keys k = make_keys(rng, spread, true);
      const int64_t n = static_cast<int64_t>(k.keys.size());
      for (const int64_t scale : {int64_t{1}, int64_t{4}}) {
        const int64_t num_keys = k.num_keys * scale;
        std::vector<int64_t> want(k.num_keys * D, 77), want_calls(k.num_keys * D, 0);
        detops::cpu::reference_sort_reduce<int64_t>(
            PositionOp<int64_t>{k.keys.data(), want.data(), want_calls.data(), D, scale}, n, num_keys, D);
        std::vector<int64_t> got(k.num_keys * D, 77), got_calls(k.num_keys * D, 0);
        const PositionOp<int64_t> op{k.keys.data(), got.data(), got_calls.data(), D, scale};
        std::vector<int32_t> winner(num_keys, -1);
        std::vector<int64_t> order(n);
        std::iota(order.begin(), order.end(), int64_t{0});
        std::shuffle(order.begin(), order.end(), rng);
        for (const int64_t i : order) {
          const int64_t key = detops::engine::last_writer_key(op.key(i), num_keys);
          if (key != detops::kSkipKey) winner[key] = std::max(winner[key], static_cast<int32_t>(i));
        }
        const detops::Divider<index_t> by_columns(static_cast<index_t>(D));
        for (const bool over_keys : {true, false}) {
          std::fill(got.begin(), got.end(), 77);
          std::fill(got_calls.begin(), got_calls.end(), 0);
          // The copy's calls (kLastWriterPairs pairs each, the last one partial) in a shuffled order.
          const int64_t pairs = (over_keys ? num_keys : n) * D;
          std::vector<int64_t> calls((pairs + detops::plan::kLastWriterPairs - 1) / detops::plan::kLastWriterPairs);
          std::iota(calls.begin(), calls.end(), int64_t{0});
          std::shuffle(calls.begin(), calls.end(), rng);
          const auto d = static_cast<index_t>(D);
          const auto total = static_cast<index_t>(pairs);
          if (over_keys) {
            const detops::engine::LastWriterGatherOp<PositionOp<int64_t>, index_t> copy{op, winner.data(), by_columns,
                                                                                       d, total};
            for (const int64_t w : calls) copy(w);
          } else {
            const detops::engine::LastWriterScatterOp<PositionOp<int64_t>, index_t> copy{op, winner.data(), num_keys,
                                                                                        by_columns, d, total};
            for (const int64_t w : calls) copy(w);
          }
          const std::string what = "D " + std::to_string(D) + ", spread " + std::to_string(spread) + ", scale " +
                                   std::to_string(scale) + (over_keys ? ", over keys" : ", over contributions") +
                                   ", " + std::to_string(sizeof(index_t) * 8) + "-bit pairs";
          EXPECT_TRUE(same_bits(want, got)) << what;
          EXPECT_EQ(want_calls, got_calls) << what;
        }
      }
    }
  }
}

TEST(CpuEngine, LastWriterWinnerTableMatchesTheSortedPlan) {
  std::mt19937 rng(13);
  compare_winner_table_copies<int32_t>(rng);
  compare_winner_table_copies<int64_t>(rng);
}

// The CPU's last writer (cpu::last_writer_pass): one column, rows by the winner table (copies over keys and
// over contributions), rows past it by the pass over columns; at 1 and 2 threads.
TEST(CpuEngine, LastWriterPassMatchesTheSortedPlan) {
  std::mt19937 rng(14);
  const int threads = at::get_num_threads();
  for (const int64_t D : {int64_t{1}, int64_t{3}, int64_t{64}}) {
    for (const int64_t spread : {int64_t{50}, int64_t{40000}}) {
      const Keys k = make_keys(rng, spread, true);
      const int64_t n = static_cast<int64_t>(k.keys.size());
      // Scaled by 16, the 40,007 keys outnumber the contributions more than 4 times: the table only for rows (4
      // keys per element written), its copy over the contributions.
      for (const int64_t scale : {int64_t{1}, int64_t{16}, int64_t{1} << 20}) {
        const int64_t num_keys = k.num_keys * scale;
        ASSERT_EQ(detops::plan::last_writer_table(n, num_keys, D),
                  scale == 1 || (scale == 16 && (spread == 50 || D > 1)));
        ASSERT_EQ(detops::plan::last_writer_over_keys(n, num_keys), scale == 1 || (scale == 16 && spread == 50));
        std::vector<int64_t> want(k.num_keys * D, 77), want_calls(k.num_keys * D, 0);
        at::set_num_threads(1);
        detops::cpu::reference_sort_reduce<int64_t>(
            PositionOp<int64_t>{k.keys.data(), want.data(), want_calls.data(), D, scale}, n, num_keys, D);
        for (int t : {1, 2}) {
          at::set_num_threads(t);
          std::vector<int64_t> got(k.num_keys * D, 77), got_calls(k.num_keys * D, 0);
          detops::cpu::last_writer_pass(PositionOp<int64_t>{k.keys.data(), got.data(), got_calls.data(), D, scale},
                                        n, num_keys, D);
          const std::string what = "D " + std::to_string(D) + ", spread " + std::to_string(spread) + ", scale " +
                                   std::to_string(scale) + ", " + std::to_string(t) + " thread(s)";
          EXPECT_TRUE(same_bits(want, got)) << what;
        }
      }
    }
  }
  at::set_num_threads(threads);
}

TEST(CpuEngine, LastWriterMatchesTheSortedPlan) {
  std::mt19937 rng(12);
  for (const int64_t D : {1, 3, 64}) {
    for (const int64_t spread : {int64_t{50}, int64_t{40000}}) {
      const Keys k = make_keys(rng, spread, true);
      const int64_t n = static_cast<int64_t>(k.keys.size());
      for (const int64_t scale : {int64_t{1}, int64_t{1} << 20}) {
        compare<int64_t>(
            [&](int64_t* out, int64_t* calls) { return PositionOp<int64_t>{k.keys.data(), out, calls, D, scale}; },
            n, k.num_keys, scale, D, "Last, D " + std::to_string(D) + ", spread " + std::to_string(spread));
      }
    }
  }
}

// One column starts its blocks from the combine's identity (ops/sort_reduce_cpu.h, combine_identity): -0 + v
// is v for every v but a signalling NaN, which comes out quiet. Through a finalize that adds a NaN total to a
// value, as every adding op's does, the bits are the sorted plan's even for a signalling NaN (one NaN pattern
// per run: with two NaNs of different bits, which one an x86 addition keeps depends on the operand order the
// compiler picks), signed zeros, infinities and subnormals.
template <typename acc_t>
struct AddingFinalizeOp {
  const int64_t* keys;
  const acc_t* values;
  acc_t* out;
  int64_t* calls;

  int64_t key(int64_t i) const { return keys[i]; }
  acc_t contribution(int64_t i, int64_t) const { return values[i]; }
  // A NaN through an addition (as every adding op's finalize takes it), any other total raw (so that a
  // wrong identity shows: +0 would turn a key of -0 alone into +0).
  void finalize(int64_t k, int64_t, acc_t total) const {
    out[k] = total != total ? detops::add_rn(acc_t(0.25), total) : total;
    ++calls[k];
  }
};

template <typename acc_t, typename bits_t>
void compare_special_values(const char* name) {
  std::mt19937 rng(17);
  acc_t payload_nan;  // signalling, negative, with a payload
  bits_t b;
  const acc_t snan = std::numeric_limits<acc_t>::signaling_NaN();
  const acc_t inf = std::numeric_limits<acc_t>::infinity(), tiny = std::numeric_limits<acc_t>::denorm_min();
  std::memcpy(&b, &snan, sizeof b);
  b |= (bits_t{1} << (sizeof(bits_t) * 8 - 1)) | 5;
  std::memcpy(&payload_nan, &b, sizeof b);
  // A signalling NaN, or infinities of both signs (whose sum is x86's one default NaN), never both.
  const std::vector<std::vector<acc_t>> sets = {{snan, acc_t(0), -acc_t(0), tiny, -tiny},
                                                {payload_nan, acc_t(0), -acc_t(0), tiny, -tiny},
                                                {inf, -inf, acc_t(0), -acc_t(0), tiny, -tiny}};
  for (size_t set = 0; set < sets.size(); ++set) {
    const std::vector<acc_t>& specials = sets[set];
    for (const int64_t spread : {int64_t{3}, int64_t{200}, int64_t{5000}}) {
      const int64_t n = 6000;
      std::vector<int64_t> keys(n);
      std::vector<acc_t> values(n);
      for (int64_t i = 0; i < n; ++i) {
        keys[i] = static_cast<int64_t>(rng() % spread);
        values[i] = rng() % 3 == 0 ? specials[rng() % specials.size()]
                                   : static_cast<acc_t>(static_cast<int64_t>(rng() % 9) - 4);
      }
      compare<acc_t>(
          [&](acc_t* out, int64_t* calls) { return AddingFinalizeOp<acc_t>{keys.data(), values.data(), out, calls}; },
          n, spread, 1, 1,
          std::string(name) + ", set " + std::to_string(set) + ", spread " + std::to_string(spread));
    }
  }
}

TEST(CpuEngine, SpecialValuesGiveTheSortedPlansBitsThroughAnAddingFinalize) {
  compare_special_values<float, uint32_t>("float");
  compare_special_values<double, uint64_t>("double");
}

TEST(CpuEngine, KeysInRunsMatchTheSortedPlan) {
  // Sorted keys (runs of 1 to 100 contributions: the pass that keeps a run's level 0 in registers), and the
  // same keys with every 7th contribution moved to another key (runs broken at random places).
  std::mt19937 rng(19);
  std::vector<int64_t> keys;
  for (int64_t k = 0; keys.size() < 20000; ++k) keys.insert(keys.end(), 1 + rng() % 100, k);
  const int64_t n = static_cast<int64_t>(keys.size()), num_keys = keys.back() + 1;
  std::vector<int64_t> broken = keys;
  for (int64_t i = 0; i < n; i += 7) broken[i] = static_cast<int64_t>(rng() % num_keys);
  for (const auto* k : {&keys, &broken}) {
    const std::vector<float> values = make_values<float>(rng, n, 0);
    compare<float>(
        [&](float* out, int64_t* calls) {
          return TableOp<float, detops::AddRn>{k->data(), values.data(), out, calls, 1, 1};
        },
        n, num_keys, 1, 1, k == &keys ? "sorted keys, AddRn" : "broken runs, AddRn");
    const std::vector<float> picks = make_values<float>(rng, n, 2);
    compare<float>(
        [&](float* out, int64_t* calls) {
          return TableOp<float, detops::MaxNan>{k->data(), picks.data(), out, calls, 1, 1};
        },
        n, num_keys, 1, 1, k == &keys ? "sorted keys, MaxNan" : "broken runs, MaxNan");
  }
}

TEST(CpuEngine, ASingleKeyOfEveryLengthMatchesTheSortedPlan) {
  // Every count from 1 to 3 * 32^2 + 5 on one key: each partial block at each level.
  std::mt19937 rng(13);
  std::vector<float> values = make_values<float>(rng, 3 * 1024 + 5, 0);
  for (int64_t n = 1; n <= 3 * 1024 + 5; n += (n < 1100 ? 1 : 37)) {
    std::vector<int64_t> keys(n, 0);
    compare<float>(
        [&](float* out, int64_t* calls) {
          return TableOp<float, detops::AddRn>{keys.data(), values.data(), out, calls, 1, 1};
        },
        n, 1, 1, 1, "one key, n " + std::to_string(n));
  }
}

}  // namespace

namespace {

TEST(CpuEngine, KeysOfAtMostOneBlockMatchTheSortedPlan) {
  // About one contribution per key, none with more than kBlock (the one-column finish then finalizes every
  // key from its level 0 alone), key counts that leave partial chunks and partial vectors in the listing.
  std::mt19937 rng(23);
  for (const int64_t num_keys : {int64_t{1}, int64_t{15}, int64_t{1000}, int64_t{1041}, int64_t{33333}}) {
    const int64_t n = num_keys + 17;
    std::vector<int64_t> keys(n);
    for (int64_t i = 0; i < n; ++i) {
      keys[i] = rng() % 10 == 0 ? detops::kSkipKey : static_cast<int64_t>(rng() % num_keys);
    }
    const std::string what = "keys " + std::to_string(num_keys);
    const std::vector<float> f = make_values<float>(rng, n, 0);
    compare<float>(
        [&](float* out, int64_t* calls) {
          return TableOp<float, detops::AddRn>{keys.data(), f.data(), out, calls, 1, 1};
        },
        n, num_keys, 1, 1, "AddRn float, " + what);
    const std::vector<double> d = make_values<double>(rng, n, 2);
    compare<double>(
        [&](double* out, int64_t* calls) {
          return TableOp<double, detops::MaxNan>{keys.data(), d.data(), out, calls, 1, 1};
        },
        n, num_keys, 1, 1, "MaxNan double, " + what);
  }
}

// A one-column op whose destinations are dense (has_dense_out, ops/sort_reduce_cpu.h) where `dense`: finalize
// adds the total into out[k] in T, as the scatter family's does. finalized() counts its calls: the dense
// finish makes one per key, the listing one per key that received a contribution.
template <typename T>
struct DenseAddOp {
  using acc_t = detops::acc_type<T>;
  const int64_t* keys;
  const acc_t* values;
  T* out;
  bool dense;
  std::atomic<int64_t>* finalized_calls;

  int64_t key(int64_t i) const { return keys[i]; }
  acc_t contribution(int64_t i, int64_t) const { return values[i]; }
  void finalize(int64_t k, int64_t, acc_t total) const { out[k] = finalized(out[k], total, k); }
  T finalized(T old, acc_t total, int64_t) const {
    finalized_calls->fetch_add(1, std::memory_order_relaxed);
    return detops::round_to<T>(detops::add_rn(detops::to_acc(old), total));
  }
  T* dense_out() const { return dense ? out : nullptr; }
};

// Destinations before the call: small values, with a share of special bits (NaNs of several payloads,
// signalling ones among them, both zeros, subnormals) that a key without contributions must keep.
template <typename T, typename bits_t>
std::vector<T> destinations_with_special_bits(std::mt19937& rng, int64_t count) {
  const bits_t exp_mask = static_cast<bits_t>(sizeof(T) == 8 ? 0x7ff0000000000000ull
                                              : sizeof(T) == 4 ? 0x7f800000u
                                              : std::is_same_v<T, c10::BFloat16> ? 0x7f80u : 0x7c00u);
  const bits_t sign = static_cast<bits_t>(bits_t{1} << (sizeof(T) * 8 - 1));
  std::vector<T> v(count);
  for (int64_t j = 0; j < count; ++j) {
    bits_t b;
    const uint32_t r = rng() % 8;
    if (r == 0) {
      b = exp_mask | static_cast<bits_t>(1 + rng() % 3) | (rng() % 2 ? sign : bits_t{0});  // a signalling NaN
    } else if (r == 1) {
      b = rng() % 2 ? sign : bits_t{0};  // a zero
    } else if (r == 2) {
      b = static_cast<bits_t>(1 + rng() % 5);  // a subnormal
    } else {
      const T x = static_cast<T>(static_cast<float>(static_cast<int>(rng() % 200) - 100) / 8);
      std::memcpy(&b, &x, sizeof b);
    }
    std::memcpy(&v[j], &b, sizeof b);
  }
  return v;
}

// The dense finish against the listing, bit for bit: keys of at most kBlock contributions (the dense finish
// runs), and a hot key of 40 (higher levels: the listing runs for both), on 1 thread and on 2 (the part's
// ListedOp forwards the dense destinations).
template <typename T, typename bits_t>
void compare_dense_finish(const char* name) {
  using acc_t = detops::acc_type<T>;
  std::mt19937 rng(41);
  for (const int64_t num_keys : {int64_t{1}, int64_t{1000}, int64_t{1041}, int64_t{40000}}) {
    for (const bool hot : {false, true}) {
      for (const int threads : {1, 2}) {
        // At least the hot key's 40 contributions.
        const int64_t n = threads == 2 ? 3 * detops::cpu::detail::kParallelGrain : num_keys + 57;
        std::vector<int64_t> keys(n);
        for (int64_t i = 0; i < n; ++i) {
          keys[i] = rng() % 10 == 0 ? detops::kSkipKey : static_cast<int64_t>(rng() % num_keys);
        }
        if (hot) std::fill(keys.begin(), keys.begin() + 40, num_keys - 1);
        if (!hot) {
          // At most kBlock contributions per key.
          std::vector<int64_t> seen(num_keys, 0);
          for (int64_t& k : keys) {
            if (k != detops::kSkipKey && ++seen[k] > detops::kBlock) k = detops::kSkipKey;
          }
        }
        std::vector<acc_t> values(n);
        for (acc_t& x : values) x = static_cast<acc_t>(static_cast<int>(rng() % 2001) - 1000) / acc_t(64);
        const std::vector<T> before = destinations_with_special_bits<T, bits_t>(rng, num_keys);
        std::vector<T> listed = before, dense = before;
        std::atomic<int64_t> listed_calls{0}, dense_calls{0};
        const int saved = at::get_num_threads();
        at::set_num_threads(threads);
        detops::cpu::sort_reduce<acc_t>(DenseAddOp<T>{keys.data(), values.data(), listed.data(), false, &listed_calls},
                                        n, num_keys, 1);
        detops::cpu::sort_reduce<acc_t>(DenseAddOp<T>{keys.data(), values.data(), dense.data(), true, &dense_calls}, n,
                                        num_keys, 1);
        at::set_num_threads(saved);
        const std::string what = std::string(name) + ", keys " + std::to_string(num_keys) + (hot ? ", hot" : "") +
                                 ", " + std::to_string(threads) + " thread(s)";
        EXPECT_EQ(std::memcmp(listed.data(), dense.data(), num_keys * sizeof(T)), 0) << what;
        EXPECT_NE(std::memcmp(listed.data(), before.data(), num_keys * sizeof(T)), 0) << what;
        EXPECT_LE(listed_calls.load(), num_keys) << what;
        if (!hot) {
          EXPECT_EQ(dense_calls.load(), num_keys) << what;  // every key through the dense finish
        } else if (threads == 1) {
          EXPECT_EQ(dense_calls.load(), listed_calls.load()) << what;  // higher levels: the listing
        }
      }
    }
  }
}

TEST(CpuEngine, DenseFinishGivesTheListingsBits) {
  compare_dense_finish<float, uint32_t>("float");
  compare_dense_finish<double, uint64_t>("double");
  compare_dense_finish<c10::Half, uint16_t>("half");
  compare_dense_finish<c10::BFloat16, uint16_t>("bfloat16");
}

TEST(CpuEngine, ListingNonzeroCountsAgreesAtEveryVectorWidth) {
  // 8-byte records whose upper 4 bytes are zero about half the time (the lower 4 bytes never decide), every
  // length up to 70 and two long ones, through each implementation this CPU has.
  std::mt19937 rng(29);
  std::vector<uint32_t> words(2 * 1100);
  for (size_t j = 0; j < words.size(); j += 2) {
    words[j] = static_cast<uint32_t>(rng());
    words[j + 1] = rng() % 2 == 0 ? 0u : (rng() % 3 == 0 ? 0x80000000u : 1u + rng() % 40);
  }
  int variants_run = 0;
  for (int variant = 0; variant <= 2; ++variant) {
    std::vector<int32_t> probe(detops::cpu::kListSlack);
    if (detops::cpu::list_nonzero_counts_variant(variant, words.data(), 0, probe.data()) < 0) continue;
    ++variants_run;
    std::vector<int64_t> lengths(71);
    std::iota(lengths.begin(), lengths.end(), int64_t{0});
    lengths.insert(lengths.end(), {1024, 1100});
    for (const int64_t len : lengths) {
      std::vector<int32_t> want;
      for (int64_t q = 0; q < len; ++q) {
        if (words[2 * q + 1] != 0) want.push_back(static_cast<int32_t>(q));
      }
      std::vector<int32_t> got(len + detops::cpu::kListSlack, -1);
      const int64_t m = detops::cpu::list_nonzero_counts_variant(variant, words.data(), len, got.data());
      ASSERT_EQ(m, static_cast<int64_t>(want.size())) << "variant " << variant << ", length " << len;
      got.resize(m);
      EXPECT_EQ(got, want) << "variant " << variant << ", length " << len;
    }
  }
  EXPECT_GE(variants_run, 1);
}

}  // namespace

namespace {

TEST(CpuEngine, CleanRecordsAreReusedOnlyWhenPutBackClean) {
  using detops::cpu::CleanRecords;
  const float minus_zero = -0.0f, one = 1.0f;
  const size_t bytes = 4096 * sizeof(float);
  {
    CleanRecords a(bytes, &minus_zero, sizeof minus_zero);
    if (!a.clean()) std::fill(a.as<float>(), a.as<float>() + 4096, minus_zero);
    a.mark_clean();
  }
  {
    CleanRecords b(bytes, &minus_zero, sizeof minus_zero);
    ASSERT_TRUE(b.clean());
    for (int j = 0; j < 4096; ++j) ASSERT_EQ(std::signbit(b.as<float>()[j]), true) << j;
    b.as<float>()[7] = 3.0f;  // changed and not put back: not marked clean
  }
  {
    CleanRecords c(bytes, &minus_zero, sizeof minus_zero);
    EXPECT_FALSE(c.clean());
    std::fill(c.as<float>(), c.as<float>() + 4096, minus_zero);
    c.mark_clean();
  }
  {
    CleanRecords d(bytes, &one, sizeof one);  // another empty record: to be filled
    EXPECT_FALSE(d.clean());
  }
  {
    CleanRecords e(2 * bytes, &minus_zero, sizeof minus_zero);  // clean for fewer bytes than asked
    EXPECT_FALSE(e.clean());
  }
}

// A one-column reducer dropped after its pass, before finish() (its level 0 left dirty), and calls of one key
// count and combine after it: each against the sorted plan.
TEST(CpuEngine, ACallAfterAnUnfinishedOneStartsFromEmptyLevels) {
  std::mt19937 rng(31);
  const int64_t num_keys = 5000, n = 6000;
  std::vector<int64_t> keys(n);
  for (int64_t& k : keys) k = static_cast<int64_t>(rng() % num_keys);
  const std::vector<float> values = make_values<float>(rng, n, 0);
  std::vector<float> sink(num_keys);
  std::vector<int64_t> sink_calls(num_keys);
  using Op = TableOp<float, detops::AddRn>;
  const Op op{keys.data(), values.data(), sink.data(), sink_calls.data(), 1, 1};
  for (int round = 0; round < 3; ++round) {
    {
      detops::cpu::detail::ColumnReducer<float, Op> dropped(op, 0, num_keys, n);
      dropped.run(n, [&](int64_t i) { return keys[i]; });
    }
    compare<float>(
        [&](float* out, int64_t* calls) { return Op{keys.data(), values.data(), out, calls, 1, 1}; }, n, num_keys, 1,
        1, "after an unfinished call, round " + std::to_string(round));
  }
}

// count_keys on several threads (a histogram per part, added at the end) against one serial count, over keys of
// every kind: in range, kSkipKey, negative and past the end; the counts add to what counts held before.
TEST(CpuEngine, CountKeysOnThreadsMatchesOneCount) {
  struct Keys {
    const int64_t* keys;
    int64_t key(int64_t i) const { return keys[i]; }
  };
  std::mt19937 rng(37);
  const int threads = at::get_num_threads();
  for (const int64_t num_keys : {int64_t{1}, int64_t{1000}, detops::cpu::Engine::kCountPartKeys + 1}) {
    for (const int64_t n : {int64_t{100}, int64_t{20000}, int64_t{100003}}) {
      std::vector<int64_t> keys(static_cast<size_t>(n));
      for (int64_t& k : keys) {
        const uint32_t r = rng() % 16;
        k = r == 0 ? detops::kSkipKey : r == 1 ? -3 : r == 2 ? num_keys : static_cast<int64_t>(rng() % num_keys);
      }
      std::vector<int64_t> expected(static_cast<size_t>(num_keys), 5);
      for (const int64_t k : keys) {
        if (k >= 0 && k < num_keys) ++expected[static_cast<size_t>(k)];
      }
      for (const int t : {1, 2, 3}) {
        at::set_num_threads(t);
        std::vector<int64_t> counts(static_cast<size_t>(num_keys), 5);
        detops::cpu::Engine::count_keys(Keys{keys.data()}, n, num_keys, counts.data());
        EXPECT_EQ(counts, expected) << "num_keys " << num_keys << ", n " << n << ", threads " << t;
      }
    }
  }
  at::set_num_threads(threads);
}

}  // namespace
