// The CUDA engine's parallel schedule, run on the CPU: the same per-thread steps the kernels call
// (cuda/sort_reduce_steps.h), each level's threads in a shuffled order, must give the CPU twin's bits.
#include "cuda/sort_reduce_steps.h"
#include "ops/index_add_op.h"
#include "ops/ops.h"
#include "ops/scatter_add_op.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

namespace {

// Emulates plan_segments (stable sort, max-scan, exclusive sum) and reduce_plan with shuffled threads.
template <typename acc_t, typename Op>
void run_gpu_schedule(const Op& op, int32_t n, int64_t num_keys, int64_t D, std::mt19937& rng) {
  std::vector<uint32_t> unsorted(n);
  for (int32_t i = 0; i < n; ++i) unsorted[i] = static_cast<uint32_t>(op.key(i));
  std::vector<int32_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(), [&](int32_t a, int32_t b) { return unsorted[a] < unsorted[b]; });
  std::vector<uint32_t> keys(n);
  for (int32_t p = 0; p < n; ++p) keys[p] = unsorted[perm[p]];

  std::vector<int32_t> segstart(n), lead(n), slot(n);
  for (int32_t p = 0; p < n; ++p) segstart[p] = detops::engine::head_value(keys.data(), p);
  for (int32_t p = 1; p < n; ++p) segstart[p] = std::max(segstart[p], segstart[p - 1]);
  for (int32_t p = 0; p < n; ++p) lead[p] = detops::engine::long_leader(keys.data(), segstart.data(), n, p);
  std::exclusive_scan(lead.begin(), lead.end(), slot.begin(), 0);
  const int32_t max_slots = n / 16 + 1;
  std::vector<int32_t> slot_first(max_slots, -7), slot_pos(max_slots, -7);
  int32_t num_slots = -7;
  for (int32_t p = 0; p < n; ++p) {
    detops::engine::fill_slot(segstart.data(), lead.data(), slot.data(), n, p, slot_first.data(), slot_pos.data(),
                              &num_slots);
  }
  ASSERT_LE(num_slots, max_slots);

  std::vector<acc_t> scratch(static_cast<size_t>(max_slots * D), acc_t(12345));
  std::vector<std::pair<int32_t, int64_t>> threads;
  for (int32_t p = 0; p < n; ++p)
    for (int64_t c = 0; c < D; ++c) threads.emplace_back(p, c);
  std::shuffle(threads.begin(), threads.end(), rng);
  for (auto [p, c] : threads) {
    detops::engine::level0_step<acc_t>(op, keys.data(), perm.data(), segstart.data(), slot.data(), n, num_keys, D,
                                       scratch.data(), p, c);
  }
  int64_t stride = 1;
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
