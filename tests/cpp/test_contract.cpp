// The order contract (docs/order_contract.md) on the CPU: the shared arithmetic, the tree's shape, its
// accuracy, and independence from the number of threads.
#include "ops/contract.h"
#include "ops/index_add.h"
#include "ops/scatter_add.h"
#include "ops/sort_reduce_cpu.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// An independent statement of the tree: blocks of 32 folded left to right, repeated over the block sums.
float reference_tree(std::vector<float> v) {
  while (v.size() > 1) {
    std::vector<float> next;
    for (size_t b = 0; b < v.size(); b += 32) {
      float s = v[b];
      for (size_t i = b + 1; i < std::min(v.size(), b + 32); ++i) s = s + v[i];
      next.push_back(s);
    }
    v.swap(next);
  }
  return v[0];
}

TEST(Contract, HalfRoundingMatchesC10ForEveryNonNanInput) {
  std::mt19937 rng(1);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, sizeof(f));
    if (std::isnan(f)) continue;
    ASSERT_EQ(detops::half_bits_rne(f), c10::Half(f).x) << "input bits " << u;
  }
  // Boundaries: largest half, the overflow threshold, subnormals, ties.
  for (float f : {65504.f, 65519.99f, 65520.f, 6.1035156e-05f, 5.9604645e-08f, 2.9802322e-08f, 2.9802326e-08f,
                  1.0009766f, 1.0004883f, -0.f, 0.f, INFINITY, -INFINITY}) {
    EXPECT_EQ(detops::half_bits_rne(f), c10::Half(f).x) << f;
  }
  EXPECT_EQ(detops::half_bits_rne(std::nanf("")) & 0x7e00u, 0x7e00u);
}

TEST(Contract, BFloat16RoundingMatchesC10ForEveryNonNanInput) {
  std::mt19937 rng(2);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, sizeof(f));
    if (std::isnan(f)) continue;
    ASSERT_EQ(detops::bfloat16_bits_rne(f), c10::BFloat16(f).x) << "input bits " << u;
  }
  const uint16_t nan_bits = detops::bfloat16_bits_rne(-std::nanf(""));
  EXPECT_EQ(nan_bits & 0xffc0u, 0xffc0u);
}

TEST(Contract, TreeHasTheDocumentedShape) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
  for (int64_t n : {1, 2, 31, 32, 33, 63, 64, 65, 1023, 1024, 1025, 32768, 32769, 100000}) {
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    std::vector<float> buf((n + 31) / 32);
    const float got = detops::tree_reduce<float>(n, [&](int64_t i) { return v[i]; }, buf.data());
    EXPECT_EQ(bits_of(got), bits_of(reference_tree(v))) << "n = " << n;
  }
}

TEST(Contract, StreamingTreeGivesTheTreeBits) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (int64_t n : {1, 2, 31, 32, 33, 64, 1023, 1024, 1025, 1056, 32768, 32800, 70000}) {
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    detops::StreamingTree<float> stream;
    for (float x : v) stream.push(x);
    EXPECT_EQ(bits_of(stream.finish()), bits_of(reference_tree(v))) << "n = " << n;
  }
}

TEST(Contract, LastCombineGivesTheLastContributionWhateverTheTreeShape) {
  for (int64_t n : {1, 2, 31, 32, 33, 1024, 1025, 32769, 70000}) {
    std::vector<int64_t> buf((n + 31) / 32);
    const int64_t got = detops::tree_reduce<int64_t>(n, [](int64_t i) { return 3 * i + 1; }, buf.data(),
                                                     detops::Last());
    EXPECT_EQ(got, 3 * (n - 1) + 1) << "n = " << n;
    detops::StreamingTree<int64_t, 7, detops::Last> stream;
    for (int64_t i = 0; i < n; ++i) stream.push(3 * i + 1);
    EXPECT_EQ(stream.finish(), 3 * (n - 1) + 1) << "n = " << n;
  }
}

// reduce='prod': rounded multiplications in the tree's shape (blocks of 32, then the block products).
TEST(Contract, MulRnFoldsTheTreeOfProducts) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.75f, 1.25f);
  for (int64_t n : {1, 2, 32, 33, 1025, 40000}) {
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    std::vector<float> level = v;
    while (level.size() > 1) {
      std::vector<float> next;
      for (size_t b = 0; b < level.size(); b += 32) {
        float p = level[b];
        for (size_t i = b + 1; i < std::min(level.size(), b + 32); ++i) p = p * level[i];
        next.push_back(p);
      }
      level.swap(next);
    }
    std::vector<float> buf((n + 31) / 32);
    const float got = detops::tree_reduce<float>(n, [&](int64_t i) { return v[i]; }, buf.data(), detops::MulRn());
    EXPECT_EQ(bits_of(got), bits_of(level[0])) << "n = " << n;
  }
}

// amax / amin: any NaN wins (the last one), else the first of the tied extremes: -0.0 before +0.0 stays.
TEST(Contract, MaxMinCombinesAreSelectionsWhateverTheTreeShape) {
  const detops::MaxNan mx;
  const detops::MinNan mn;
  EXPECT_EQ(bits_of(mx(-0.f, 0.f)), bits_of(-0.f));
  EXPECT_EQ(bits_of(mx(0.f, -0.f)), bits_of(0.f));
  EXPECT_EQ(bits_of(mn(-0.f, 0.f)), bits_of(-0.f));
  EXPECT_EQ(bits_of(mn(0.f, -0.f)), bits_of(0.f));
  EXPECT_TRUE(std::isnan(mx(std::nanf(""), 1.f)) && std::isnan(mx(1.f, std::nanf(""))));
  EXPECT_TRUE(std::isnan(mn(std::nanf(""), 1.f)) && std::isnan(mn(1.f, std::nanf(""))));
  EXPECT_EQ(mx(int64_t{-3}, int64_t{7}), 7);
  EXPECT_EQ(mn(int64_t{-3}, int64_t{7}), -3);
  // Over 3000 values with ties of signed zeros, the tree gives the serial loop's value: the first zero.
  std::vector<float> v(3000, -1.f);
  v[100] = -0.f;
  v[2000] = 0.f;
  std::vector<float> buf(94);
  const float got = detops::tree_reduce<float>(3000, [&](int64_t i) { return v[i]; }, buf.data(), mx);
  EXPECT_EQ(bits_of(got), bits_of(-0.f));
  v[2500] = std::nanf("");
  EXPECT_TRUE(std::isnan(detops::tree_reduce<float>(3000, [&](int64_t i) { return v[i]; }, buf.data(), mn)));
}

// The combines against their rule stated with branches, bit for bit, over every ordered pair of special values: NaNs
// of several payloads and both signs (the later operand's wins), both zeros, infinities, subnormals, ties.
TEST(Contract, MaxMinCombinesGiveTheRulesBitsOnEveryPair) {
  const auto rule = [](float a, float b, bool is_max) {
    if (b != b) return b;
    if (a != a) return a;
    return (is_max ? b > a : b < a) ? b : a;
  };
  std::vector<float> specials;
  for (const uint32_t u : {0x7fc00000u, 0xffc00001u, 0x7f800005u, 0x7fc12345u, 0x00000000u, 0x80000000u, 0x7f800000u,
                           0xff800000u, 0x00000001u, 0x80000003u, 0x3f800000u, 0xbf800000u, 0x3f800000u}) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    specials.push_back(f);
  }
  const detops::MaxNan mx;
  const detops::MinNan mn;
  for (const float a : specials) {
    for (const float b : specials) {
      EXPECT_EQ(bits_of(mx(a, b)), bits_of(rule(a, b, true))) << bits_of(a) << " max " << bits_of(b);
      EXPECT_EQ(bits_of(mn(a, b)), bits_of(rule(a, b, false))) << bits_of(a) << " min " << bits_of(b);
    }
  }
}

TEST(Contract, WrapCombinesAreExactModuloTwoToThe64) {
  EXPECT_EQ(detops::WrapAdd()(INT64_MAX, 1), INT64_MIN);
  EXPECT_EQ(detops::WrapMul()(int64_t{1} << 62, 4), 0);
  EXPECT_EQ(static_cast<int8_t>(detops::WrapMul()(100, 3)), static_cast<int8_t>(300));
}

// An op that names its combine: each key gets the last source position that carries it.
struct LastPositionOp {
  using Combine = detops::Last;
  const int64_t* keys;
  int64_t* out;
  int64_t key(int64_t i) const { return keys[i]; }
  int64_t contribution(int64_t i, int64_t) const { return i; }
  void finalize(int64_t k, int64_t, int64_t pos) const { out[k] = pos; }
};

TEST(Contract, CpuEngineFoldsWithTheOpsCombine) {
  static_assert(std::is_same_v<detops::combine_of_t<LastPositionOp>, detops::Last>);
  static_assert(std::is_same_v<detops::combine_of_t<int>, detops::AddRn>);
  std::mt19937 rng(6);
  const int64_t n = 50000, num_keys = 40;
  std::vector<int64_t> keys(n), want(num_keys, -1), got(num_keys, -1);
  for (int64_t i = 0; i < n; ++i) {
    keys[i] = static_cast<int64_t>(rng() % (i < n / 2 ? num_keys : num_keys / 2));  // a tail of long segments
    want[keys[i]] = i;
  }
  detops::cpu::sort_reduce<int64_t>(LastPositionOp{keys.data(), got.data()}, n, num_keys, 1);
  EXPECT_EQ(got, want);
}

// Sums float contributions per key; a key of kSkipKey drops its contribution.
struct SkippingSumOp {
  const int64_t* keys;
  const float* values;
  float* out;
  int64_t key(int64_t i) const { return keys[i]; }
  float contribution(int64_t i, int64_t) const { return values[i]; }
  void finalize(int64_t k, int64_t, float total) const { out[k] = total; }
};

TEST(Contract, CpuEngineDropsSkippedContributions) {
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  // A few keys (counting sort) and a sparse key space (merge sort); every contribution skipped.
  for (const auto& [num_keys, skip_every] : {std::pair<int64_t, int>{7, 3}, {int64_t{1} << 40, 3}, {7, 1}}) {
    const int64_t n = 5000;
    std::vector<int64_t> keys(n);
    std::vector<float> values(n);
    std::vector<std::vector<float>> per_key(7);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = static_cast<int64_t>(rng() % 7);
      values[i] = uniform(rng);
      if (rng() % skip_every == 0) {
        keys[i] = detops::kSkipKey;
      } else {
        keys[i] = k;
        per_key[k].push_back(values[i]);
      }
    }
    const float untouched = -1234.5f;
    std::vector<float> got(7, untouched);
    detops::cpu::sort_reduce<float>(SkippingSumOp{keys.data(), values.data(), got.data()}, n, num_keys, 1);
    for (int64_t k = 0; k < 7; ++k) {
      const float want = per_key[k].empty() ? untouched : reference_tree(per_key[k]);
      EXPECT_EQ(bits_of(got[k]), bits_of(want)) << "key " << k << " of " << num_keys;
    }
  }
}

TEST(Contract, TreeLevels) {
  EXPECT_EQ(detops::tree_levels(1), 0);
  EXPECT_EQ(detops::tree_levels(32), 0);
  EXPECT_EQ(detops::tree_levels(33), 1);
  EXPECT_EQ(detops::tree_levels(1024), 1);
  EXPECT_EQ(detops::tree_levels(1025), 2);
  EXPECT_EQ(detops::tree_levels(1 << 20), 3);
}

TEST(Contract, HotDestinationIsAtLeastAsAccurateAsBlockedSummation) {
  const int64_t n = 200000;
  at::Tensor src = at::rand({n}, at::TensorOptions().dtype(at::kFloat));
  at::Tensor out = at::zeros({1});
  detops::scatter_add_(out, 0, at::zeros({n}, at::kLong), src);
  const double exact = src.to(at::kDouble).sum().item<double>();
  EXPECT_LT(std::abs(out.item<float>() - exact) / exact, 2e-6);
}

TEST(Contract, CpuBitsDoNotDependOnTheNumberOfThreads) {
  at::manual_seed(4);
  const at::Tensor self = at::randn({20000, 3});
  const at::Tensor index = at::randint(0, 20000, {60000});
  const at::Tensor source = at::randn({60000, 3});
  const at::Tensor scatter_index = at::randint(0, 20000, {60000, 3});
  at::set_num_threads(1);
  const at::Tensor a = detops::index_add(self, 0, index, source, 0.75);
  const at::Tensor b = detops::scatter_add(self, 0, scatter_index, source);
  at::set_num_threads(2);
  EXPECT_TRUE(at::equal(a, detops::index_add(self, 0, index, source, 0.75)));
  EXPECT_TRUE(at::equal(b, detops::scatter_add(self, 0, scatter_index, source)));
}

}  // namespace
