// The sort-reduce engine, CPU path. The contract's fixed tree (docs/order_contract.md) for every destination
// key and column, built in one pass over the contributions in source order: level 0 of each key lives in
// dense arrays (its open block's running fold and the key's contribution count), and the rare keys with more
// than kBlock contributions keep their higher levels in a side table, exactly as StreamingTree does
// (ops/contract.h). No sort and no permutation: O(n * D + num_keys) memory traffic. With several threads,
// each takes a range of keys (or of columns, for wide rows whose keys' rows fit a core's cache) and builds it
// alone in source order, so the bits do not depend on the number of threads. The sort-based plan of the CUDA
// engine (stable sort of (key, position), segments, tree per segment) stays here as reference_sort_reduce for tests.
#pragma once

#include "ops/contract.h"
#include "ops/plan.h"
#include "ops/plan_record.h"

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <type_traits>
#include <utility>
#include <vector>

namespace detops::cpu {

// Positions 0..n-1 stably sorted by keys[i]: source order kept within equal keys.
std::vector<int64_t> stable_sort_by_key(const std::vector<int64_t>& keys, int64_t num_keys);

// Start offsets of runs of equal keys in `sorted` (plus a final n).
std::vector<int64_t> segment_starts(const std::vector<int64_t>& keys, const std::vector<int64_t>& perm);

// Lists, in increasing order, the q in [0, len) whose 8-byte record records[q] holds a nonzero uint32 at byte
// offset 4, and returns how many. `listed` has room for len + kListSlack values: where the CPU has wide
// vectors, whole vectors are stored past the last one listed.
constexpr int64_t kListSlack = 16;
int64_t list_nonzero_counts(const void* records, int64_t len, int32_t* listed);
// The same through one implementation, for tests: 0 scalar, 1 AVX2, 2 AVX-512VL; -1 where this CPU or build
// has none.
int64_t list_nonzero_counts_variant(int variant, const void* records, int64_t len, int32_t* listed);

// A buffer from a pool that each thread keeps of the buffers it released (no allocation and no page faults
// for repeated calls of one shape).
class PooledBuffer {
 public:
  PooledBuffer(const PooledBuffer&) = delete;
  PooledBuffer& operator=(const PooledBuffer&) = delete;
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(data_);
  }

 protected:
  PooledBuffer() = default;
  char* data_ = nullptr;
  size_t size_ = 0;
};

// A scratch buffer of at least `bytes` bytes, uninitialised.
class Scratch : public PooledBuffer {
 public:
  explicit Scratch(size_t bytes);
  ~Scratch();
};

// A buffer of records that its user finds, and leaves, all equal to one empty record, so that a call of the
// same shape on the same thread skips filling it. `tag` names the empty record (its fields' bytes); clean()
// says whether the first `bytes` bytes already hold it (else the user fills them). The user that puts back
// every record it changed calls mark_clean(); a buffer destroyed without it goes back as uninitialised.
class CleanRecords : public PooledBuffer {
 public:
  static constexpr size_t kMaxTag = 24;
  CleanRecords(size_t bytes, const void* tag, size_t tag_bytes);
  ~CleanRecords();
  bool clean() const {
    return clean_bytes_ >= bytes_;
  }
  void mark_clean() {
    marked_ = true;
  }

 private:
  size_t bytes_;
  size_t clean_bytes_ = 0;  // how many bytes held the empty records when taken
  unsigned char tag_[kMaxTag];
  size_t tag_bytes_;
  bool marked_ = false;
};

// The sort-based plan (the CUDA engine's, and this engine's before the streaming pass): stable sort of the
// positions by key, segments of equal keys, tree_reduce per segment and column. Same bits as sort_reduce;
// kept for tests that compare the two.
template <typename acc_t, typename Op>
void reference_sort_reduce(const Op& op, int64_t n, int64_t num_keys, int64_t D) {
  if (n == 0 || D == 0) return;
  std::vector<int64_t> keys(n);
  bool any_skipped = false;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = op.key(i);
    // A skipped contribution takes key num_keys: sorted after every real key, its segment is never reduced.
    any_skipped = any_skipped || k == kSkipKey;
    keys[i] = k == kSkipKey ? num_keys : k;
  }
  const std::vector<int64_t> perm = stable_sort_by_key(keys, any_skipped ? num_keys + 1 : num_keys);
  const std::vector<int64_t> starts = segment_starts(keys, perm);
  int64_t num_segments = static_cast<int64_t>(starts.size()) - 1;
  if (any_skipped) --num_segments;  // the last segment holds the skipped contributions
  const int64_t grain = std::max<int64_t>(1, 2048 / D);
  at::parallel_for(0, num_segments, grain, [&](int64_t begin, int64_t end) {
    std::vector<acc_t> buf;
    for (int64_t s = begin; s < end; ++s) {
      const int64_t first = starts[s];
      const int64_t count = starts[s + 1] - first;
      const int64_t key = keys[perm[first]];
      buf.resize(static_cast<size_t>((count + kBlock - 1) / kBlock));
      for (int64_t c = 0; c < D; ++c) {
        const acc_t total = tree_reduce<acc_t>(
            count, [&](int64_t j) { return op.contribution(perm[first + j], c); }, buf.data(),
            combine_of_t<Op>());
        op.finalize(key, c, total);
      }
    }
  });
}

namespace detail {

// The contract's tree above level 0 for one key with more than kBlock contributions, all columns at once:
// the open block of each level (its running fold per column), how many items it holds and how many the level
// ever received. Same push()/finish() as StreamingTree (ops/contract.h), with level 0 kept by the caller.
template <typename acc_t, typename Combine>
class UpperLevels {
 public:
  static constexpr int kLevels = 14;  // kBlock^14 > 2^64: any count of contributions

  explicit UpperLevels(int64_t D) : D_(D) {}

  // Pushes one item to `level` >= 1, carrying full blocks upwards: the D values at `v`, or (v null) the
  // fold of level - 1's block.
  void push(int64_t entry, int level, const acc_t* v) {
    while (true) {
      acc_t* s = level_sums(entry, level);  // may grow pool_: pointers into it are taken after
      if (v == nullptr) v = pool_.data() + entries_[entry].offset[level - 1];
      Entry& e = entries_[entry];
      if (e.count[level] == 0) {
        std::copy(v, v + D_, s);
      } else {
        for (int64_t c = 0; c < D_; ++c) s[c] = Combine()(s[c], v[c]);
      }
      ++e.pushed[level];
      if (++e.count[level] < kBlock) return;
      e.count[level] = 0;  // a full block: its fold is one item of the next level
      v = nullptr;
      ++level;
    }
  }

  // StreamingTree::finish over a key whose level 0 received `total` > kBlock items and holds the fold
  // `open` of its last, partial block (if total % kBlock != 0). Returns the D totals.
  const acc_t* finish(int64_t entry, int64_t total, const acc_t* open) {
    if (total % kBlock != 0) push(entry, 1, open);
    for (int level = 1;; ++level) {
      Entry& e = entries_[entry];
      if (e.count[level] > 0) {
        if (e.pushed[level] <= kBlock) return level_sums(entry, level);
        e.count[level] = 0;
        push(entry, level + 1, nullptr);
      }
    }
  }

  int64_t add_entry() {
    entries_.emplace_back();
    return static_cast<int64_t>(entries_.size()) - 1;
  }

 private:
  struct Entry {
    int count[kLevels] = {};
    int64_t pushed[kLevels] = {};
    int64_t offset[kLevels];  // of each level's D sums in pool_, once reached
    int reached = 0;          // levels [1, reached] have sums in pool_
  };

  acc_t* level_sums(int64_t entry, int level) {
    Entry& e = entries_[entry];
    while (e.reached < level) {
      e.offset[++e.reached] = static_cast<int64_t>(pool_.size());
      pool_.resize(pool_.size() + static_cast<size_t>(D_));
    }
    return pool_.data() + e.offset[level];
  }

  int64_t D_;
  std::vector<Entry> entries_;
  std::vector<acc_t> pool_;
};

// `a` where `pick`, else `b`, without a branch for 2-, 4- and 8-byte values (a fold's level 0 starts a block or
// continues one about as often as not).
template <typename T>
inline T select_bits(bool pick, T a, T b) {
  if constexpr (sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8) {
    using U = std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;
    U ua, ub;
    std::memcpy(&ua, &a, sizeof(T));
    std::memcpy(&ub, &b, sizeof(T));
    const U mask = U(0) - static_cast<U>(pick);
    const U r = (ua & mask) | (ub & ~mask);
    T out;
    std::memcpy(&out, &r, sizeof(T));
    return out;
  } else {
    return pick ? a : b;
  }
}

// The identity of a combine where it has an exact one: Combine()(identity, v) has v's bits for every v, but
// that a signalling NaN comes out quiet, as it does from the combine of any two values. Then a block of
// level 0 can start from the identity instead of from its first item, with the same bits wherever the fold
// meets arithmetic: for D == 1 it always does, in the upper levels or in every finalize of such a combine.
template <typename Combine, typename acc_t, typename = void>
struct combine_identity {
  static constexpr bool exists = false;
  static acc_t value() { return acc_t{}; }
};
template <typename acc_t>
struct combine_identity<AddRn, acc_t, std::enable_if_t<std::is_floating_point_v<acc_t>>> {
  static constexpr bool exists = true;
  static acc_t value() { return -acc_t(0); }  // -0 + v == v, -0 + -0 == -0
};
template <typename acc_t>
struct combine_identity<MulRn, acc_t, std::enable_if_t<std::is_floating_point_v<acc_t>>> {
  static constexpr bool exists = true;
  static acc_t value() { return acc_t(1); }
};
template <typename acc_t>
struct combine_identity<MaxNan, acc_t> {
  static constexpr bool exists = true;  // a selection: the identity never wins over a value of other bits
  static acc_t value() {
    return std::numeric_limits<acc_t>::has_infinity ? -std::numeric_limits<acc_t>::infinity()
                                                    : std::numeric_limits<acc_t>::lowest();
  }
};
template <typename acc_t>
struct combine_identity<MinNan, acc_t> {
  static constexpr bool exists = true;
  static acc_t value() {
    return std::numeric_limits<acc_t>::has_infinity ? std::numeric_limits<acc_t>::infinity()
                                                    : std::numeric_limits<acc_t>::max();
  }
};
template <>
struct combine_identity<WrapAdd, int64_t> {
  static constexpr bool exists = true;
  static int64_t value() { return 0; }
};
template <>
struct combine_identity<WrapMul, int64_t> {
  static constexpr bool exists = true;
  static int64_t value() { return 1; }
};
template <typename acc_t>
struct combine_identity<Last, acc_t> {
  static constexpr bool exists = true;  // Last(a, v) is v
  static acc_t value() { return acc_t{}; }
};

#if defined(__GNUC__) || defined(__clang__)
#define DETOPS_ALWAYS_INLINE __attribute__((always_inline)) inline
#else
#define DETOPS_ALWAYS_INLINE inline
#endif

// An op may lay its one column's destinations out densely for the engine (optional): dense_out() non-null
// means key k's only destination is dense_out()[k], and finalized(old, total, k) is what finalize(k, 0, total)
// stores there over `old`. Then ColumnReducer::finish takes every key of a chunk in one branch-free loop that
// stores finalized() where the key received a contribution and the old bits elsewhere (the compiler
// vectorises it), instead of listing the keys that received one and finalizing them one by one.
template <typename Op, typename = void>
struct has_dense_out : std::false_type {};
template <typename Op>
struct has_dense_out<Op, std::void_t<decltype(std::declval<const Op&>().dense_out())>> : std::true_type {};

// An op may finish one key's run of columns at once (optional): finalize_columns(k, c0, cols, total) stores what
// finalize(k, c0 + c, total[c]) stores, for every c in [0, cols), with what depends on the key alone read once, so
// that its loop over the columns vectorises. RowReducer calls it where the op has it.
template <typename Op, typename acc_t, typename = void>
struct has_finalize_columns : std::false_type {};
template <typename Op, typename acc_t>
struct has_finalize_columns<Op, acc_t,
                            std::void_t<decltype(std::declval<const Op&>().finalize_columns(
                                int64_t{}, int64_t{}, int64_t{}, std::declval<const acc_t*>()))>> : std::true_type {};

// ColumnReducer::finish_dense's loop over `len` destinations from key key_base on: finalized() where the key's
// level 0 `z` counts a contribution, else the old bits. `op` is a copy, which the stores cannot reach.
template <typename Op, typename T, typename Level0>
DETOPS_ALWAYS_INLINE void select_finalized(const Op op, T* dest, const Level0* z, int64_t key_base, int64_t len) {
  for (int64_t q = 0; q < len; ++q) {
    const T old = dest[q];
    dest[q] = select_bits(z[q].count != 0, op.finalized(old, z[q].sum, key_base + q), old);
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DETOPS_SELECT_AVX2 1
// The same loop in 32-byte vectors where the CPU has them (the library is built for the baseline x86-64).
template <typename Op, typename T, typename Level0>
__attribute__((target("avx2"))) void select_finalized_avx2(const Op& op, T* dest, const Level0* z, int64_t key_base,
                                                           int64_t len) {
  select_finalized(op, dest, z, key_base, len);
}
#else
#define DETOPS_SELECT_AVX2 0
#endif

// One column (D == 1), keys [key_lo, key_lo + num_keys): each key's level 0 (its count of contributions and
// its open block's fold) side by side in one dense array. One pass in source order, a load (but within a run
// of one key) and a store of the key's level 0 per contribution, with no branch on the data but for dropped
// contributions and a full block: where the combine has an exact identity (combine_identity) an open block
// holds the fold of the identity and its items, and a full block is listed (its key and fold, in source
// order) and the identity put in its place. Then the full blocks go up to their keys' higher levels (a
// StreamingTree, ops/contract.h, fed from level 1) in that order, and each key that received a contribution
// is finalized, in increasing key order.
template <typename acc_t, typename Op>
class ColumnReducer {
 public:
  using Combine = combine_of_t<Op>;
  using Identity = combine_identity<Combine, acc_t>;
  // Levels 1.. of a key; level 0 stays in the dense array. 32^7 > 2^31 > any count here (sort_reduce).
  using Upper = StreamingTree<acc_t, 7, Combine>;
  struct Level0 {
    acc_t sum;
    uint32_t count;
  };
  struct FullBlock {
    int64_t key;
    acc_t fold;
  };

  // At most n contributions will be run.
  ColumnReducer(const Op& op, int64_t key_lo, int64_t num_keys, int64_t n)
      : op_(op),
        key_lo_(key_lo),
        num_keys_(num_keys),
        level0_records_(static_cast<size_t>(num_keys) * sizeof(Level0), empty_tag().bytes, sizeof(EmptyTag)),
        full_scratch_(static_cast<size_t>(n / kBlock + 1) * sizeof(FullBlock)),
        level0_(level0_records_.as<Level0>()),
        full_(full_scratch_.as<FullBlock>()) {
    // Every key's level 0 empty: as the last call on this thread left it (finish() puts back each record it
    // used), or filled by doubling copies (a loop of Level0 stores would not vectorise).
    if (level0_records_.clean()) return;
    if (num_keys > 0) level0_[0] = {Identity::value(), 0};
    for (int64_t have = 1; have < num_keys; have *= 2) {
      std::memcpy(level0_ + have, level0_, static_cast<size_t>(std::min(have, num_keys - have)) * sizeof(Level0));
    }
  }

  // Every contribution i in [0, n) in increasing i, to key key_lo + key_of(i) (none where key_of(i) is outside
  // [0, num_keys)). Runs once. Keys that come in runs (a hot destination, sorted keys) take the pass that keeps
  // the run's level 0 in registers, whose additions then wait on each other and not on a store and a load; the
  // others the pass without that check. Which one runs changes no bits.
  template <typename KeyOf>
  void run(int64_t n, const KeyOf& key_of) {
    const int64_t probe = std::min<int64_t>(n, 64);
    int64_t repeats = 0;
    for (int64_t i = 1; i < probe; ++i) repeats += key_of(i) == key_of(i - 1);
    if (2 * repeats >= probe) {
      pass<true>(n, key_of);
    } else {
      pass<false>(n, key_of);
    }
  }

  void finish() {
    // A key of exactly one full block has that block's fold as its tree; the others of more than kBlock
    // contributions get their higher levels, fed their full blocks in source order.
    std::vector<Upper> upper;
    std::unique_ptr<Scratch> index_scratch;
    int32_t* upper_index = nullptr;  // key -> index into upper, for those keys only
    if (num_full_ > 0) {
      index_scratch = std::make_unique<Scratch>(static_cast<size_t>(num_keys_) * sizeof(int32_t));
      upper_index = index_scratch->as<int32_t>();
      for (int64_t b = 0; b < num_full_; ++b) upper_index[full_[b].key] = -1;
      for (int64_t b = 0; b < num_full_; ++b) {
        const int64_t k = full_[b].key;
        if (level0_[k].count == static_cast<uint32_t>(kBlock)) {
          level0_[k].sum = full_[b].fold;
          continue;
        }
        if (upper_index[k] < 0) {
          upper_index[k] = static_cast<int32_t>(upper.size());
          upper.emplace_back();
        }
        upper[static_cast<size_t>(upper_index[k])].push(full_[b].fold, 1);
      }
    }
    // The keys that received a contribution, listed per chunk without a branch (whether a key received one
    // is as good as random), then finalized; where no key has more than kBlock contributions (no higher
    // levels), each from its level 0 alone.
    constexpr int64_t kChunk = 1024;
    if constexpr (has_dense_out<Op>::value) {
      if (upper.empty() && op_.dense_out() != nullptr) {
        for (int64_t lo = 0; lo < num_keys_; lo += kChunk) finish_dense(lo, std::min(kChunk, num_keys_ - lo));
        level0_records_.mark_clean();
        return;
      }
    }
    int32_t listed[kChunk + kListSlack];
    for (int64_t lo = 0; lo < num_keys_; lo += kChunk) {
      const int64_t len = std::min(kChunk, num_keys_ - lo);
      int64_t m = 0;
      if constexpr (sizeof(Level0) == 8 && offsetof(Level0, count) == 4) {
        m = list_nonzero_counts(level0_ + lo, len, listed);
      } else {
        for (int64_t q = 0; q < len; ++q) {
          listed[m] = static_cast<int32_t>(q);
          m += level0_[lo + q].count != 0;
        }
      }
      // Each key's level 0 is put back to empty once read (CleanRecords).
      if (upper.empty()) {
        const int64_t key_base = key_lo_ + lo;
        Level0* const z0 = level0_ + lo;
        for (int64_t j = 0; j < m; ++j) {
          const int64_t q = listed[j];
          op_.finalize(key_base + q, 0, z0[q].sum);
          z0[q] = {Identity::value(), 0};
        }
        continue;
      }
      for (int64_t j = 0; j < m; ++j) {
        const int64_t k = lo + listed[j];
        const Level0 z = level0_[k];
        level0_[k] = {Identity::value(), 0};
        acc_t total = z.sum;
        if (z.count > static_cast<uint32_t>(kBlock)) {
          // StreamingTree::finish over the key's levels, with its last, partial block pushed first.
          Upper& u = upper[static_cast<size_t>(upper_index[k])];
          if (z.count % kBlock != 0) u.push(z.sum, 1);
          total = u.finish();
        }
        op_.finalize(key_lo_ + k, 0, total);
      }
    }
    level0_records_.mark_clean();
  }

 private:
  // Keys [lo, lo + len) of a call without higher levels, through the op's dense destinations (has_dense_out):
  // each destination takes finalized() where its key received a contribution and keeps its bits elsewhere;
  // then the chunk's level 0 is put back to empty (CleanRecords) by doubling copies.
  void finish_dense(int64_t lo, int64_t len) {
    auto* const dest = op_.dense_out() + key_lo_ + lo;
#if DETOPS_SELECT_AVX2
    static const bool avx2 = __builtin_cpu_supports("avx2");
    if (avx2) {
      select_finalized_avx2(op_, dest, level0_ + lo, key_lo_ + lo, len);
    } else {
      select_finalized(op_, dest, level0_ + lo, key_lo_ + lo, len);
    }
#else
    select_finalized(op_, dest, level0_ + lo, key_lo_ + lo, len);
#endif
    Level0* const w = level0_ + lo;
    w[0] = {Identity::value(), 0};
    for (int64_t have = 1; have < len; have *= 2) {
      std::memcpy(w + have, w, static_cast<size_t>(std::min(have, len - have)) * sizeof(Level0));
    }
  }

  template <bool kRuns, typename KeyOf>
  void pass(int64_t n, const KeyOf& key_of_arg) {
    // Local copies: the loop's stores into level0_ cannot reach them, so their fields stay in registers.
    const Op op = op_;
    const KeyOf key_of = key_of_arg;
    Level0* const level0 = level0_;
    FullBlock* const full_blocks = full_;
    int64_t full = 0;
    int64_t prev = -1;
    Level0 z{};
    const uint64_t num_keys = static_cast<uint64_t>(num_keys_);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = key_of(i);
      if (static_cast<uint64_t>(k) >= num_keys) continue;
      const acc_t v = op.contribution(i, 0);
      if (!kRuns || k != prev) z = level0[k];
      prev = k;
      // NB: level 0 of the contract: a key's contributions in source order, folded left to right in blocks
      // of kBlock; a block starts from its first item (here, where the combine has one, from its identity,
      // with the same bits: combine_identity).
      if constexpr (Identity::exists) {
        z.sum = Combine()(z.sum, v);
      } else {
        z.sum = select_bits(z.count % kBlock == 0, v, Combine()(z.sum, v));
      }
      if (++z.count % kBlock == 0) {
        full_blocks[full++] = {k, z.sum};
        z.sum = Identity::value();
      }
      level0[k] = z;
    }
    num_full_ = full;
  }

  // An empty level 0 as CleanRecords names it: the record's size and the bytes of the identity it starts from.
  struct EmptyTag {
    unsigned char bytes[1 + sizeof(acc_t)];
  };
  static EmptyTag empty_tag() {
    static_assert(sizeof(EmptyTag) <= CleanRecords::kMaxTag);
    EmptyTag t;
    t.bytes[0] = static_cast<unsigned char>(sizeof(Level0));
    const acc_t identity = Identity::value();
    std::memcpy(t.bytes + 1, &identity, sizeof(acc_t));
    return t;
  }

  const Op& op_;
  int64_t key_lo_;
  int64_t num_keys_;
  CleanRecords level0_records_;
  Scratch full_scratch_;
  Level0* level0_;
  FullBlock* full_;  // the full blocks of level 0, in source order
  int64_t num_full_ = 0;
};

// Rows (D > 1), keys [key_lo, key_lo + num_keys), columns [col_lo, col_lo + cols). Two passes in source
// order: the first counts each key's contributions; the second finalizes a key of one contribution from it
// directly, and folds the others in a row of scratch (a slot) taken at the key's first contribution and
// given back at its last, when the key is finalized. Scratch holds only the keys open at one time.
template <typename acc_t, typename Op>
class RowReducer {
 public:
  using Combine = combine_of_t<Op>;

  RowReducer(const Op& op, int64_t key_lo, int64_t num_keys, int64_t col_lo, int64_t cols)
      : op_(op),
        key_lo_(key_lo),
        num_keys_(num_keys),
        col_lo_(col_lo),
        cols_(cols),
        count_scratch_(static_cast<size_t>(num_keys) * sizeof(uint32_t)),
        count_(count_scratch_.as<uint32_t>()),
        upper_(cols) {
    std::memset(count_, 0, static_cast<size_t>(num_keys) * sizeof(uint32_t));
  }

  // keys[i]: the key of contribution i relative to key_lo, or negative (not this range's, or dropped).
  void run(const int64_t* keys, int64_t n) {
    int64_t shared = 0;  // keys of two or more contributions
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = keys[i];
      if (k >= 0) shared += ++count_[k] == 2;
    }
    Scratch slot_scratch(static_cast<size_t>(shared * cols_) * sizeof(acc_t) + 1);
    Scratch state_scratch(static_cast<size_t>(shared) * sizeof(SlotState) + 1);
    sums_ = slot_scratch.as<acc_t>();
    state_ = state_scratch.as<SlotState>();
    free_.clear();
    num_slots_ = 0;
    const Op op = op_;  // a local copy: the stores into the slots cannot reach it (its fields stay in registers)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = keys[i];
      if (k < 0) continue;
      const uint32_t v = count_[k];
      if (v == 1) {
        for (int64_t c = 0; c < cols_; ++c) op.finalize(key_lo_ + k, col_lo_ + c, op.contribution(i, col_lo_ + c));
        continue;
      }
      uint32_t slot;
      if (v & kOpen) {
        slot = v & ~kOpen;
      } else {
        slot = take_slot();
        count_[k] = slot | kOpen;
        state_[slot] = {v, 0, -1};
      }
      add(op, i, k, slot);
    }
  }

 private:
  static constexpr uint32_t kOpen = 0x80000000u;  // count_[k] holds the slot of an open key
  struct SlotState {
    uint32_t total;  // contributions of the key
    uint32_t seen;   // folded so far
    int64_t upper;   // entry of upper_, or -1
  };

  uint32_t take_slot() {
    if (!free_.empty()) {
      const uint32_t slot = free_.back();
      free_.pop_back();
      return slot;
    }
    return num_slots_++;
  }

  void add(const Op& op, int64_t i, int64_t k, uint32_t slot) {
    SlotState& st = state_[slot];
    acc_t* s = sums_ + static_cast<int64_t>(slot) * cols_;
    // NB: level 0 of the contract, as ColumnReducer::add.
    if (st.seen % kBlock == 0) {
      for (int64_t c = 0; c < cols_; ++c) s[c] = op.contribution(i, col_lo_ + c);
    } else {
      for (int64_t c = 0; c < cols_; ++c) s[c] = Combine()(s[c], op.contribution(i, col_lo_ + c));
    }
    ++st.seen;
    if (st.seen % kBlock == 0) {
      if (st.upper < 0) st.upper = upper_.add_entry();
      upper_.push(st.upper, 1, s);
    }
    if (st.seen < st.total) return;
    const acc_t* total = st.total <= static_cast<uint32_t>(kBlock) ? s : upper_.finish(st.upper, st.total, s);
    if constexpr (has_finalize_columns<Op, acc_t>::value) {
      op.finalize_columns(key_lo_ + k, col_lo_, cols_, total);
    } else {
      for (int64_t c = 0; c < cols_; ++c) op.finalize(key_lo_ + k, col_lo_ + c, total[c]);
    }
    free_.push_back(slot);
  }

  const Op& op_;
  int64_t key_lo_;
  int64_t num_keys_;
  int64_t col_lo_;
  int64_t cols_;
  Scratch count_scratch_;
  uint32_t* count_;
  acc_t* sums_ = nullptr;
  SlotState* state_ = nullptr;
  std::vector<uint32_t> free_;
  uint32_t num_slots_ = 0;
  UpperLevels<acc_t, Combine> upper_;
};

// An op whose keys are indices into a sorted table of the keys that occur (a sparse key space), forwarding
// everything else to the original op.
template <typename Op>
struct CompactKeysOp {
  using Combine = combine_of_t<Op>;
  const Op& op;
  const int64_t* compact;  // per contribution: index into `table`, or kSkipKey
  const int64_t* table;

  int64_t key(int64_t i) const { return compact[i]; }
  auto contribution(int64_t i, int64_t c) const { return op.contribution(i, c); }
  template <typename acc_t>
  void finalize(int64_t k, int64_t c, acc_t total) const {
    op.finalize(table[k], c, total);
  }
};

// An op whose contributions are those of `op` at the source positions list[0], list[1], ... (one thread's part,
// in source order), forwarding everything else to the original op.
template <typename Op>
struct ListedOp {
  using Combine = combine_of_t<Op>;
  const Op& op;
  const int32_t* list;

  auto contribution(int64_t j, int64_t c) const { return op.contribution(list[j], c); }
  template <typename acc_t>
  void finalize(int64_t k, int64_t c, acc_t total) const {
    op.finalize(k, c, total);
  }
  // The op's dense destinations, where it has them (has_dense_out): the keys are the op's.
  template <typename O = Op>
  auto dense_out() const -> decltype(std::declval<const O&>().dense_out()) {
    return op.dense_out();
  }
  template <typename T, typename acc_t>
  T finalized(T old, acc_t total, int64_t k) const {
    return op.finalized(old, total, k);
  }
  // The op's finish of a key's columns at once, where it has one (has_finalize_columns).
  template <typename acc_t, typename O = Op>
  auto finalize_columns(int64_t k, int64_t c0, int64_t cols, const acc_t* total) const
      -> decltype(std::declval<const O&>().finalize_columns(k, c0, cols, total)) {
    return op.finalize_columns(k, c0, cols, total);
  }
};

// Work below this many (contribution, column) pairs runs on the calling thread alone.
constexpr int64_t kParallelGrain = 1 << 16;

// The dense plan: num_keys is small enough for per-key arrays.
template <typename acc_t, typename Op>
void dense_sort_reduce(const Op& op, int64_t n, int64_t num_keys, int64_t D) {
  const int threads = at::in_parallel_region() ? 1 : at::get_num_threads();
  const bool parallel = threads > 1 && n * D >= kParallelGrain;
  if (!parallel && D == 1) {
    ColumnReducer<acc_t, Op> r(op, 0, num_keys, n);
    r.run(n, [op](int64_t i) {
      // NB: kSkipKey is dropped; so is an invalid key (the front ends validate indices on the CPU path): the
      // pass skips every key outside [0, num_keys).
      return op.key(i);
    });
    r.finish();
    return;
  }
  // Keys once (in parallel: key() is pure), -1 for a dropped contribution.
  Scratch key_scratch(static_cast<size_t>(n) * sizeof(int64_t));
  int64_t* keys = key_scratch.as<int64_t>();
  const auto make_keys = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t k = op.key(i);
      keys[i] = (k >= 0 && k < num_keys) ? k : -1;
    }
  };
  if (!parallel) {
    make_keys(0, n);
    RowReducer<acc_t, Op>(op, 0, num_keys, 0, D).run(keys, n);
    return;
  }
  at::parallel_for(0, n, 4096, make_keys);
  const int64_t parts = threads;
  // NB: split by columns only where the keys' rows fit a core's cache: each thread then passes over every
  // contribution, and where the rows do not fit, each contribution's row is a cache miss whatever its width, so
  // halving the columns does not halve a thread's time; a split by keys halves its contributions.
  const bool rows_fit = static_cast<size_t>(num_keys * D) * sizeof(acc_t) <= (size_t{1} << 20);
  const bool by_columns = D >= 8 * parts && rows_fit;
  // NB: each (key, column) is built by one thread over all of its contributions in source order; the split
  // decides only which thread, so the bits are the same at any thread count.
  at::parallel_for(0, parts, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      if (by_columns) {
        const int64_t lo = D * p / parts, hi = D * (p + 1) / parts;
        if (lo < hi) RowReducer<acc_t, Op>(op, 0, num_keys, lo, hi - lo).run(keys, n);
        continue;
      }
      const int64_t lo = num_keys * p / parts, hi = num_keys * (p + 1) / parts;
      if (lo == hi) continue;
      if (D == 1) {
        // The part's contributions listed first, in source order, without a branch on the keys, then reduced from
        // the list: a pass over every contribution that skipped the other parts' took a branch on each that random
        // keys make unpredictable (6x stock's time for 256K of them on 2 threads, 3x with the list:
        // bench/RESULTS.md). NB: each key's contributions keep their source order.
        Scratch list_scratch(static_cast<size_t>(n) * sizeof(int32_t));
        int32_t* list = list_scratch.as<int32_t>();
        int64_t m = 0;
        for (int64_t i = 0; i < n; ++i) {
          list[m] = static_cast<int32_t>(i);
          m += static_cast<int64_t>(keys[i] >= lo && keys[i] < hi);
        }
        const ListedOp<Op> listed{op, list};
        ColumnReducer<acc_t, ListedOp<Op>> r(listed, lo, hi - lo, m);
        r.run(m, [&](int64_t j) { return keys[list[j]] - lo; });
        r.finish();
      } else {
        // As for one column: the part's contributions listed first (with their keys), in source order.
        Scratch list_scratch(static_cast<size_t>(n) * sizeof(int32_t));
        Scratch rel_scratch(static_cast<size_t>(n) * sizeof(int64_t));
        int32_t* list = list_scratch.as<int32_t>();
        int64_t* rel = rel_scratch.as<int64_t>();
        int64_t m = 0;
        for (int64_t i = 0; i < n; ++i) {
          list[m] = static_cast<int32_t>(i);
          rel[m] = keys[i] - lo;
          m += static_cast<int64_t>(keys[i] >= lo && keys[i] < hi);
        }
        const ListedOp<Op> listed{op, list};
        RowReducer<acc_t, ListedOp<Op>>(listed, lo, hi - lo, 0, D).run(rel, m);
      }
    }
  });
}

}  // namespace detail

// Op provides: key(i) -> destination in [0, num_keys) (already validated by the front end) or kSkipKey
// (dropped), contribution(i, c) -> acc_t, finalize(key, c, acc_t), and optionally a Combine type (default
// AddRn, combine_of_t in ops/contract.h) and a gate (gate_of, ops/contract.h: nothing is done while it is 0). i
// is the source position, c a column of D. finalize is called once per (key, column) that received at least one
// contribution, after all of that key's contributions.
template <typename acc_t, typename Op>
void sort_reduce(const Op& op, int64_t n, int64_t num_keys, int64_t D) {
  if (n == 0 || D == 0 || num_keys <= 0 || gated_off(gate_of(op))) return;
  if (n >= int64_t{INT32_MAX}) {  // per-key counts and slots are 31-bit
    reference_sort_reduce<acc_t>(op, n, num_keys, D);
    return;
  }
  if (num_keys <= 4 * n + 1024) {
    detail::dense_sort_reduce<acc_t>(op, n, num_keys, D);
    return;
  }
  // A sparse key space: the keys that occur, sorted, stand in for the keys.
  std::vector<int64_t> compact(n), table;
  table.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = op.key(i);
    const bool ok = k >= 0 && k < num_keys;
    compact[i] = ok ? k : kSkipKey;
    if (ok) table.push_back(k);
  }
  std::sort(table.begin(), table.end());
  table.erase(std::unique(table.begin(), table.end()), table.end());
  for (int64_t i = 0; i < n; ++i) {
    if (compact[i] != kSkipKey) {
      compact[i] = std::lower_bound(table.begin(), table.end(), compact[i]) - table.begin();
    }
  }
  const detail::CompactKeysOp<Op> compact_op{op, compact.data(), table.data()};
  detail::dense_sort_reduce<acc_t>(compact_op, n, static_cast<int64_t>(table.size()), D);
}

// The last writer (combine Last) without the engine: each destination keeps its last contribution in source
// order, the engine's result (the value is copied, not computed). One column: every contribution in source
// order overwrites its destination. Rows, where plan::last_writer_table: each key's winner (the last position
// naming it, one pass in source order), then each winner copies its row, threads splitting the keys or the
// contributions, whichever are fewer (plan::last_writer_over_keys, as on CUDA). Other rows: every contribution
// in source order overwrites its destinations, threads splitting the columns. NB: each destination's value is
// its last contribution's whatever the thread count (docs/order_contract.md, "Last writer wins").
template <typename Op>
void last_writer_pass(const Op& op, int64_t n, int64_t num_keys, int64_t D) {
  // Recorded as the calls it stands for (the CUDA engine's last_writer makes them).
  bool plan_only = false;
  for (const plan::EngineCall& call : plan::last_writer_calls(n, num_keys, D)) plan_only = plan::record(call);
  if (plan_only) return;
  if (D > 1 && plan::last_writer_table(n, num_keys, D)) {
    std::vector<int32_t> winner(static_cast<size_t>(num_keys), -1);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = op.key(i);
      if (k >= 0 && k < num_keys) winner[k] = static_cast<int32_t>(i);
    }
    const bool over_keys = plan::last_writer_over_keys(n, num_keys);
    const auto copy = [&](int64_t lo, int64_t hi) {
      const Op local = op;
      for (int64_t j = lo; j < hi; ++j) {
        int64_t k = j;
        if (!over_keys) {
          k = local.key(j);
          if (k < 0 || k >= num_keys || winner[k] != j) continue;
        }
        if (winner[k] < 0) continue;
        for (int64_t c = 0; c < D; ++c) local.finalize(k, c, local.contribution(winner[k], c));
      }
    };
    const int64_t rows = over_keys ? num_keys : n;
    if (rows * D < detail::kParallelGrain || at::in_parallel_region()) {
      copy(0, rows);
    } else {
      at::parallel_for(0, rows, std::max<int64_t>(1, detail::kParallelGrain / D), copy);
    }
    return;
  }
  const auto pass = [&](int64_t lo, int64_t hi) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = op.key(i);
      if (k < 0) continue;
      for (int64_t c = lo; c < hi; ++c) op.finalize(k, c, op.contribution(i, c));
    }
  };
  if (D == 1) {
    // The same pass without the loop over columns (1-D scatters: the loop's bookkeeping was most of it), on a
    // local copy of the op, which the pass's stores cannot reach.
    const Op local = op;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = local.key(i);
      if (k >= 0) local.finalize(k, 0, local.contribution(i, 0));
    }
  } else if (n * D < detail::kParallelGrain || at::in_parallel_region()) {
    pass(0, D);
  } else {
    at::parallel_for(0, D, std::max<int64_t>(1, detail::kParallelGrain / n), pass);
  }
}

// The CPU engine: what the op computations (ops/*_op.h, `*_compute<Engine>`) call; cuda::Engine
// (cuda/sort_reduce.cuh) has the same members.
struct Engine {
  // The sort-reduce engine above. `name` and `like` serve the CUDA engine (errors, allocations).
  template <typename acc_t, typename Op>
  static void sort_reduce(const char* /*name*/, const Op& op, int64_t n, int64_t num_keys, int64_t D,
                          const at::Tensor& /*like*/) {
    if (plan::record(plan::sort_reduce_call(n, num_keys, D, sizeof(acc_t), gate_of(op) != nullptr))) return;
    cpu::sort_reduce<acc_t>(op, n, num_keys, D);
  }

  // The sort-reduce engine's result for an op folded with Last over source positions (the last writer),
  // without the sort (last_writer_pass); it records the CUDA engine's calls for the same sizes.
  template <typename Op>
  static void last_writer(const char* /*name*/, const Op& op, int64_t n, int64_t num_keys, int64_t D,
                          const at::Tensor& /*like*/) {
    static_assert(std::is_same_v<combine_of_t<Op>, Last>, "last_writer takes ops folded with Last");
    last_writer_pass(op, n, num_keys, D);
  }

  // op(i) for every i in [0, n). NB: each i is computed whole by one call, so the bits do not depend on
  // the number of threads.
  template <typename Op>
  static void for_each(const Op& op, int64_t n) {
    plan::record({plan::Kind::kForEach, n, 0, 1, 0, 0});  // runs in plan-only mode: host code may read it
    at::parallel_for(0, n, 2048, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) op(i);
    });
  }

  // counts[v] += occurrences of v among values[0, n) (integers: exact in any order); values outside
  // [0, bins) are skipped.
  template <typename index_t>
  static void count(const index_t* values, int64_t n, int64_t bins, int64_t* counts) {
    if (plan::record({plan::Kind::kCount, n, bins, 1, 0, sizeof(index_t)})) return;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = static_cast<int64_t>(values[i]);
      if (v >= 0 && v < bins) ++counts[v];
    }
  }

  // counts[k] += the number of contributions of key k among keys.key(0 .. n-1) (a sort-reduce op or a layout;
  // kSkipKey and keys outside [0, num_keys) counted nowhere, as sort_reduce skips them).
  template <typename Keys>
  static void count_keys(const Keys& keys, int64_t n, int64_t num_keys, int64_t* counts) {
    if (plan::record({plan::Kind::kCount, n, num_keys, 1, 0, sizeof(int64_t)})) return;
    const auto count_part = [&](int64_t begin, int64_t end, int64_t* c) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t k = keys.key(i);
        if (k >= 0 && k < num_keys) ++c[k];
      }
    };
    // NB: integer counts are exact in any order: with several threads each counts a part of the keys into a
    // histogram of its own (the first part straight into counts), added at the end, where the histograms are
    // small.
    const int64_t threads = at::in_parallel_region() ? 1 : at::get_num_threads();
    const int64_t parts = std::min(threads, n / kCountPart);
    if (parts < 2 || num_keys > kCountPartKeys) {
      count_part(0, n, counts);
      return;
    }
    std::vector<int64_t> partial(static_cast<size_t>((parts - 1) * num_keys), 0);
    at::parallel_for(0, parts, 1, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        count_part(n * p / parts, n * (p + 1) / parts, p == 0 ? counts : partial.data() + (p - 1) * num_keys);
      }
    });
    for (int64_t p = 1; p < parts; ++p) {
      const int64_t* c = partial.data() + (p - 1) * num_keys;
      for (int64_t k = 0; k < num_keys; ++k) counts[k] += c[k];
    }
  }

  // count_keys: keys per thread at least, and the most keys whose histograms a thread keeps of its own.
  static constexpr int64_t kCountPart = 8192;
  static constexpr int64_t kCountPartKeys = int64_t{1} << 16;
};

}  // namespace detops::cpu
