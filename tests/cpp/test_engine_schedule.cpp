// The CUDA engine's parallel schedule, run on the CPU: the same per-thread steps the kernels call
// (cuda/sort_reduce_steps.h), each level's threads in a shuffled order, must give the CPU twin's bits.
#include "cuda/sort_reduce_steps.h"
#include "ops/index_add_op.h"
#include "ops/index_add.h"
#include "ops/scatter_add.h"
#include "ops/scatter_add_op.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

namespace {

// The inclusive segment scan in a random grouping, as a parallel scan may form it: random chunks scanned on
// their own, then each chunk's items prefixed by the combined chunks before it (engine::SegScan is associative).
std::vector<detops::engine::SegItem> grouped_scan(const std::vector<detops::engine::SegItem>& items, std::mt19937& rng) {
  const detops::engine::SegScan combine;
  const int32_t n = static_cast<int32_t>(items.size());
  std::vector<detops::engine::SegItem> out(items);
  std::vector<std::pair<int32_t, int32_t>> chunks;
  for (int32_t begin = 0; begin < n;) {
    const int32_t len = 1 + static_cast<int32_t>(rng() % 97);
    chunks.emplace_back(begin, std::min(n, begin + len));
    begin += len;
  }
  for (auto [begin, end] : chunks)
    for (int32_t p = begin + 1; p < end; ++p) out[p] = combine(out[p - 1], items[p]);
  // The chunks' totals, combined left to right, then applied as prefixes.
  detops::engine::SegItem prefix{};
  bool have_prefix = false;
  for (auto [begin, end] : chunks) {
    const detops::engine::SegItem total = out[end - 1];
    if (have_prefix) {
      for (int32_t p = begin; p < end; ++p) out[p] = combine(prefix, out[p]);
      prefix = combine(prefix, total);
    } else {
      prefix = total;
      have_prefix = true;
    }
  }
  return out;
}

// Emulates plan_segments (stable sort, the segment scan) and reduce_plan (level 0 with the slot tables, the
// levels) with shuffled threads; checks the scan's slots against a direct count of the long-segment leaders.
template <typename acc_t, typename Op>
void run_gpu_schedule(const Op& op, int32_t n, int64_t num_keys, int64_t D, std::mt19937& rng) {
  std::vector<uint32_t> unsorted(n);
  for (int32_t i = 0; i < n; ++i) unsorted[i] = static_cast<uint32_t>(op.key(i));
  std::vector<int32_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(), [&](int32_t a, int32_t b) { return unsorted[a] < unsorted[b]; });
  std::vector<uint32_t> keys(n);
  for (int32_t p = 0; p < n; ++p) keys[p] = unsorted[perm[p]];

  std::vector<detops::engine::SegItem> items(n);
  for (int32_t p = 0; p < n; ++p) items[p] = detops::engine::seg_item(keys.data(), n, num_keys, p);
  std::vector<detops::engine::SegItem> seg(items);
  for (int32_t p = 1; p < n; ++p) seg[p] = detops::engine::SegScan()(seg[p - 1], items[p]);
  const std::vector<detops::engine::SegItem> grouped = grouped_scan(items, rng);
  int32_t leaders = 0;
  for (int32_t p = 0; p < n; ++p) {
    ASSERT_EQ(grouped[p].head, seg[p].head) << p;
    ASSERT_EQ(grouped[p].slots, seg[p].slots) << p;
    ASSERT_EQ(grouped[p].tail, -1) << p;
    int32_t s0 = p;
    while (s0 > 0 && keys[s0 - 1] == keys[p]) --s0;
    ASSERT_EQ(seg[p].head, s0) << p;
    if (detops::engine::long_leader(keys.data(), s0, n, num_keys, p)) {
      ASSERT_EQ(detops::engine::slots_before(keys.data(), seg[p], n, num_keys, p) + (p - s0) / detops::kBlock, leaders)
          << p;
      ++leaders;
    }
  }
  ASSERT_EQ(seg[n - 1].slots, leaders);

  const int32_t max_slots = n / 16 + 1;
  ASSERT_LE(leaders, max_slots);
  std::vector<int32_t> slot_first(max_slots, -7), slot_pos(max_slots, -7);
  int32_t num_slots = -7;
  std::vector<acc_t> scratch(static_cast<size_t>(max_slots * D), acc_t(12345));
  std::vector<std::pair<int32_t, int64_t>> threads;
  for (int32_t p = 0; p < n; ++p)
    for (int64_t c = 0; c < D; ++c) threads.emplace_back(p, c);
  std::shuffle(threads.begin(), threads.end(), rng);
  for (auto [p, c] : threads) {
    if (c == 0) {
      detops::engine::slot_step(keys.data(), seg.data(), n, num_keys, p, slot_first.data(), slot_pos.data(),
                                &num_slots);
    }
    detops::engine::level0_step<acc_t>(op, keys.data(), perm.data(), seg.data(), n, num_keys, D, scratch.data(), p,
                                       c);
  }
  ASSERT_EQ(num_slots, leaders);
  int32_t stride = 1;
  for (int level = 1; level <= detops::tree_levels(n); ++level, stride *= detops::kBlock) {
    threads.clear();
    for (int32_t q = 0; q < max_slots; ++q)
      for (int64_t c = 0; c < D; ++c) threads.emplace_back(q, c);
    std::shuffle(threads.begin(), threads.end(), rng);
    for (auto [q, c] : threads) {
      detops::engine::level_step<acc_t>(op, keys.data(), slot_first.data(), slot_pos.data(), num_slots, stride, D,
                                        scratch.data(), q, c);
    }
  }
}

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  return at::equal(a.contiguous().view(at::kByte), b.contiguous().view(at::kByte));
}

at::Tensor index_with_segments(const std::vector<int64_t>& lengths, std::mt19937& rng) {
  std::vector<int64_t> values;
  for (size_t d = 0; d < lengths.size(); ++d) values.insert(values.end(), lengths[d], static_cast<int64_t>(d));
  std::shuffle(values.begin(), values.end(), rng);
  return at::tensor(values, at::kLong);
}

TEST(EngineSchedule, IndexAddGivesTheCpuBitsWhateverTheThreadOrder) {
  std::mt19937 rng(7);
  at::manual_seed(7);
  const std::vector<std::vector<int64_t>> shapes = {
      {1, 2, 3},                       // short segments only
      {32, 33, 64, 65, 1, 0, 31},      // block boundaries
      {1024, 1025, 1056, 2, 40000},    // two and three levels
      {70000},                         // one hot destination
  };
  for (const auto& lengths : shapes) {
    for (int64_t width : {1, 5}) {
      const at::Tensor index = index_with_segments(lengths, rng);
      const int64_t n = index.numel();
      const at::Tensor self = at::randn({static_cast<int64_t>(lengths.size()), width});
      const at::Tensor source = at::randn({n, width});
      const at::Tensor expected = detops::index_add(self, 0, index, source, 0.5);
      at::Tensor result = self.clone();
      const auto op = detops::make_index_add_op<float, int64_t>(result, 0, index, source, 0.5);
      run_gpu_schedule<float>(op, static_cast<int32_t>(n), op.dim_size, width, rng);
      EXPECT_TRUE(bitwise_equal(result, expected)) << "n " << n << " width " << width;
    }
  }
}

TEST(EngineSchedule, ScatterAddGivesTheCpuBitsWhateverTheThreadOrder) {
  std::mt19937 rng(8);
  at::manual_seed(8);
  const at::Tensor self = at::randn({50, 6}, at::kDouble);
  const at::Tensor src = at::randn({3000, 9}, at::kDouble).narrow(1, 0, 6);
  at::Tensor index = at::randint(0, 50, {3000, 6});
  index.narrow(0, 0, 1500).fill_(3);
  const at::Tensor expected = detops::scatter_add(self, 0, index, src);
  at::Tensor result = self.clone();
  const auto op = detops::make_scatter_add_op<double, int64_t>(result, 0, index, src);
  run_gpu_schedule<double>(op, static_cast<int32_t>(index.numel()), result.numel(), 1, rng);
  EXPECT_TRUE(bitwise_equal(result, expected));
}

}  // namespace

// An op whose contributions are all 1: finalize records (key, total), so a test sees how many
// contributions each destination got.
struct CountingOp {
  std::vector<std::pair<int64_t, double>>* finalized;
  int64_t key(int64_t) const { return 0; }
  double contribution(int64_t, int64_t) const { return 1.0; }
  void finalize(int64_t k, int64_t, double total) const { finalized->emplace_back(k, total); }
};

// The engine's steps at the top of its range (n = 2^31 - 1 contributions): sums such as s0 + kBlock must
// not wrap past n. The arrays are windows around the last positions; positions past n hold the last
// segment's key, as memory past the end may, so a read past n would be counted.
TEST(EngineSchedule, PositionsNearTheLimitStayBelowN) {
  const int32_t n = static_cast<int32_t>(detops::kMaxContributions);
  constexpr int32_t kBefore = 40;
  constexpr int32_t kAfter = 40;
  const int64_t base = int64_t{n} - kBefore;
  std::vector<uint32_t> key_window(kBefore + kAfter, 7u);
  std::vector<detops::engine::SegItem> seg_window(kBefore + kAfter, detops::engine::SegItem{n - 10, -1, 0, 0});
  std::vector<int32_t> perm_window(kBefore + kAfter, 0);
  for (int32_t j = 0; j < kBefore - 10; ++j) {
    key_window[j] = 6u;
    seg_window[j].head = static_cast<int32_t>(base);
  }
  // keys[p] is key_window[p - base]: only positions inside the window are ever read.
  const uint32_t* keys = key_window.data() - base;
  const detops::engine::SegItem* seg = seg_window.data() - base;
  const int32_t* perm = perm_window.data() - base;
  std::vector<std::pair<int64_t, double>> finalized;
  const CountingOp op{&finalized};
  std::vector<double> scratch(4, -1.0);
  const int32_t last = n - 10;  // the last segment: positions [n - 10, n), key 7
  EXPECT_EQ(detops::engine::long_leader(keys, last, n, /*num_keys=*/8, last), 0);
  const detops::engine::SegItem item = detops::engine::seg_item(keys, n, /*num_keys=*/8, n - 1);
  EXPECT_EQ(item.head, -1);
  EXPECT_EQ(item.tail, n - 1);
  EXPECT_EQ(detops::engine::segment_slots(int64_t{n}, true), static_cast<int32_t>((int64_t{n} + 31) / 32));
  detops::engine::level0_step<double>(op, keys, perm, seg, n, /*num_keys=*/8, /*D=*/1, scratch.data(), last, 0);
  ASSERT_EQ(finalized.size(), 1u);
  EXPECT_EQ(finalized[0].first, 7);
  EXPECT_EQ(finalized[0].second, 10.0);
  EXPECT_EQ(scratch, std::vector<double>(4, -1.0));
}

// block_count's shortcut and binary search against a scan: the block starting at p holds the positions of
// [p, min(p + kBlock, n)) with p's key, for runs of every length around the block size, and at the end.
TEST(EngineSchedule, BlockCountIsTheRunWithinOneBlock) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<uint32_t> keys;
    uint32_t key = 0;
    const int max_run = trial % 4 == 0 ? 3 : (trial % 4 == 1 ? 40 : 100);
    while (keys.size() < 300) {
      keys.insert(keys.end(), std::uniform_int_distribution<int>(1, max_run)(rng), key);
      ++key;
    }
    keys.resize(std::uniform_int_distribution<size_t>(1, keys.size())(rng));
    const int32_t n = static_cast<int32_t>(keys.size());
    for (int32_t p = 0; p < n; ++p) {
      int32_t expected = 0;
      while (expected < detops::kBlock && p + expected < n && keys[p + expected] == keys[p]) ++expected;
      ASSERT_EQ(detops::engine::block_count(keys.data(), n, p, keys[p]), expected)
          << "trial " << trial << ", p " << p;
    }
  }
}

// Invalid contributions (key num_keys, sorted last) get no scratch slots, so no tree level above 0 can
// fold or finalize them, however many there are.
TEST(EngineSchedule, TheInvalidSegmentGetsNoSlots) {
  const int64_t num_keys = 5;
  std::vector<uint32_t> keys(40, 0u);
  keys.resize(80, static_cast<uint32_t>(num_keys));
  const int32_t n = static_cast<int32_t>(keys.size());
  EXPECT_EQ(detops::engine::long_leader(keys.data(), 0, n, num_keys, 0), 1);
  EXPECT_EQ(detops::engine::long_leader(keys.data(), 0, n, num_keys, 32), 1);
  EXPECT_EQ(detops::engine::long_leader(keys.data(), 40, n, num_keys, 40), 0);
  EXPECT_EQ(detops::engine::long_leader(keys.data(), 40, n, num_keys, 72), 0);
  // The scan counts the valid segment's two slots and none for the invalid one.
  detops::engine::SegItem total = detops::engine::seg_item(keys.data(), n, num_keys, 0);
  for (int32_t p = 1; p < n; ++p) total = detops::engine::SegScan()(total, detops::engine::seg_item(keys.data(), n, num_keys, p));
  EXPECT_EQ(total.head, 40);
  EXPECT_EQ(total.slots, 2);
}

// scatter_add's map: forty dims whose strides compose merge to a few; more than kMaxDims dims that do
// not merge are a clear error, never a write past the map's arrays.
TEST(ScatterMap, MergesComposableDimsAndRejectsTooManyOthers) {
  std::vector<detops::ScatterDim> dims;
  int64_t stride = 1;
  for (int d = 39; d >= 0; --d) {
    const int64_t size = d % 3 == 0 ? 1 : 2;
    dims.insert(dims.begin(), detops::ScatterDim{size, stride, stride, stride, d == 20});
    stride *= size;
  }
  detops::ScatterMap m{};
  detops::build_scatter_map(m, dims, 2);
  EXPECT_EQ(m.ndim, 3);
  EXPECT_EQ(m.dim, 1);
  EXPECT_EQ(m.sizes[0] * m.sizes[1] * m.sizes[2], stride);

  std::vector<detops::ScatterDim> strided;
  for (int d = 0; d < 30; ++d) strided.push_back({2, int64_t{1} << (2 * (29 - d)), 1, 1, d == 0});
  try {
    detops::build_scatter_map(m, strided, 2);
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most 25 are supported"), std::string::npos) << e.what();
  }
}
