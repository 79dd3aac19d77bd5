// GPU checks (CTest label `gpu`): CUDA == CPU bitwise, overrides under the flag, reruns, strict mode, CUDA
// generator seeding. Every test skips with "detops: no CUDA device" where there is none.
//
// The detops twins (torch.ops.detops.<name>) are called through the dispatcher, so this file needs the public
// header only. Under the deterministic flag an aten call on CUDA must give the CPU twin's bits: stock's
// kernels throw there or, for index_add and scatter_add, take a fallback that accumulates one contribution at
// a time, which does not give the order contract's bits where an element has more than 32 contributions.
#include "detops/detops.h"
#include "tests/cpp/global_state.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace {

#define SKIP_WITHOUT_CUDA() \
  if (!at::globalContext().hasCUDA()) GTEST_SKIP() << "detops: no CUDA device"

// The deterministic flag on for a scope; the previous setting restored afterwards.
struct DeterministicFlag {
  const bool flag = at::globalContext().deterministicAlgorithms();
  const bool warn_only = at::globalContext().deterministicAlgorithmsWarnOnly();
  DeterministicFlag() { at::globalContext().setDeterministicAlgorithms(true, false); }
  ~DeterministicFlag() { at::globalContext().setDeterministicAlgorithms(flag, warn_only); }
};

// A detops mode for a scope; the previous mode restored afterwards.
struct ModeGuard {
  const std::string previous = detops::get_mode();
  explicit ModeGuard(const std::string& mode) { detops::set_mode(mode); }
  ~ModeGuard() { detops::set_mode(previous); }
};

struct StrictGuard {
  const bool previous = detops::get_strict();
  explicit StrictGuard(bool strict) { detops::set_strict(strict); }
  ~StrictGuard() { detops::set_strict(previous); }
};

using detops::testing::RestoreGlobalState;

// Calls the twin torch.ops.detops.<name>.<overload> ("" for the default overload) through the dispatcher,
// boxed: `args` holds every argument of the schema in order, defaults included. The tensors' device picks
// the CPU or the CUDA kernel. Returns the op's one result.
at::Tensor twin(const std::string& name, const char* overload, std::vector<c10::IValue> args) {
  const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow(("detops::" + name).c_str(), overload);
  op.callBoxed(&args);
  EXPECT_EQ(args.size(), 1u) << name;
  return args.at(0).toTensor();
}

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         at::equal(a.cpu().contiguous().view(at::kByte), b.cpu().contiguous().view(at::kByte));
}

TEST(Gpu, CudaTwinEqualsCpuTwinBitwise) {
  SKIP_WITHOUT_CUDA();
  at::manual_seed(0);
  for (auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16}) {
    for (int64_t dests : {1, 10, 1000, 100000}) {
      const at::Tensor self = at::randn({dests, 8}).to(dtype);
      const at::Tensor index = at::randint(0, dests, {50000});
      const at::Tensor source = at::randn({50000, 8}).to(dtype);
      const at::Tensor cpu = twin("index_add", "", {self, int64_t{0}, index, source, at::Scalar(0.5)});
      const at::Tensor gpu =
          twin("index_add", "", {self.cuda(), int64_t{0}, index.cuda(), source.cuda(), at::Scalar(0.5)});
      EXPECT_TRUE(gpu.is_cuda());
      EXPECT_TRUE(bitwise_equal(cpu, gpu)) << dtype << " dests " << dests;
      const at::Tensor sindex = at::randint(0, dests, {50000, 8});
      EXPECT_TRUE(bitwise_equal(twin("scatter_add", "", {self, int64_t{0}, sindex, source}),
                                twin("scatter_add", "", {self.cuda(), int64_t{0}, sindex.cuda(), source.cuda()})))
          << dtype << " dests " << dests;
    }
  }
}

TEST(Gpu, HotDestinationOfAMillionMatchesCpuAndIsAccurate) {
  SKIP_WITHOUT_CUDA();
  const int64_t n = 1 << 20;
  const at::Tensor src = at::rand({n});
  const at::Tensor index = at::zeros({n}, at::kLong);
  const at::Tensor cpu = twin("scatter_add", "", {at::zeros({1}), int64_t{0}, index, src});
  const at::Tensor gpu = twin("scatter_add", "", {at::zeros({1}, at::kCUDA), int64_t{0}, index.cuda(), src.cuda()});
  EXPECT_TRUE(bitwise_equal(cpu, gpu));
  const double exact = src.to(at::kDouble).sum().item<double>();
  EXPECT_LT(std::abs(gpu.item<float>() - exact) / exact, 2e-6);
}

TEST(Gpu, OverridesUnderTheFlagEqualTheCpuTwinAndRepeatBitwise) {
  SKIP_WITHOUT_CUDA();
  at::manual_seed(1);
  // About 50 contributions into each element: two blocks of the order contract's tree.
  const at::Tensor self = at::randn({1000, 64}, at::kCUDA);
  const at::Tensor index = at::randint(0, 1000, {50000}, at::TensorOptions(at::kCUDA).dtype(at::kLong));
  const at::Tensor source = at::randn({50000, 64}, at::kCUDA);
  const at::Tensor sindex = at::randint(0, 1000, {50000, 64}, at::TensorOptions(at::kCUDA).dtype(at::kLong));
  at::Tensor stock;
  {
    const ModeGuard off("off");
    stock = at::index_add(self, 0, index, source);
  }
  const at::Tensor want_ia = twin("index_add", "", {self.cpu(), int64_t{0}, index.cpu(), source.cpu(), at::Scalar(1)});
  const at::Tensor want_sa = twin("scatter_add", "", {self.cpu(), int64_t{0}, sindex.cpu(), source.cpu()});
  const ModeGuard on("auto");
  const DeterministicFlag flag;
  const at::Tensor first = at::index_add(self, 0, index, source);
  EXPECT_TRUE(at::allclose(first, stock, 1e-4, 1e-4));
  EXPECT_TRUE(first.is_cuda());
  EXPECT_TRUE(bitwise_equal(first, want_ia)) << "index_add under the flag vs the CPU twin";
  at::Tensor inplace = self.clone();
  inplace.index_add_(0, index, source);
  EXPECT_TRUE(bitwise_equal(inplace, want_ia)) << "index_add_ under the flag vs the CPU twin";
  at::Tensor out = at::empty({0}, self.options());
  at::index_add_out(out, self, 0, index, source);
  EXPECT_TRUE(bitwise_equal(out, want_ia)) << "index_add.out under the flag vs the CPU twin";
  const at::Tensor first_sa = at::scatter_add(self, 0, sindex, source);
  EXPECT_TRUE(bitwise_equal(first_sa, want_sa)) << "scatter_add under the flag vs the CPU twin";
  at::Tensor inplace_sa = self.clone();
  inplace_sa.scatter_add_(0, sindex, source);
  EXPECT_TRUE(bitwise_equal(inplace_sa, want_sa)) << "scatter_add_ under the flag vs the CPU twin";
  at::Tensor out_sa = at::empty({0}, self.options());
  at::scatter_add_out(out_sa, self, 0, sindex, source);
  EXPECT_TRUE(bitwise_equal(out_sa, want_sa)) << "scatter_add.out under the flag vs the CPU twin";
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(bitwise_equal(first, at::index_add(self, 0, index, source))) << "rerun " << i;
  }
}

TEST(Gpu, BincountWithWeightsUnderTheFlagEqualsTheCpuTwin) {
  SKIP_WITHOUT_CUDA();
  at::manual_seed(2);
  const at::Tensor input = at::randint(0, 1000, {200000});  // about 200 contributions per bin
  for (auto wdtype : {at::kFloat, at::kDouble}) {
    const at::Tensor weights = at::randn({200000}).to(wdtype);
    for (int64_t minlength : {int64_t{0}, int64_t{1500}}) {
      const at::Tensor cpu = twin("bincount", "", {input, weights, minlength});
      const at::Tensor gpu = twin("bincount", "", {input.cuda(), weights.cuda(), minlength});
      EXPECT_TRUE(gpu.is_cuda());
      EXPECT_TRUE(bitwise_equal(cpu, gpu)) << wdtype << " minlength " << minlength;
      const ModeGuard on("auto");
      const DeterministicFlag flag;
      // Stock throws here (bincount with weights has no deterministic CUDA kernel).
      const at::Tensor ours = at::bincount(input.cuda(), weights.cuda(), minlength);
      EXPECT_TRUE(ours.is_cuda());
      EXPECT_TRUE(bitwise_equal(ours, cpu)) << wdtype << " minlength " << minlength;
    }
  }
}

TEST(Gpu, EmbeddingBagDenseBackwardUnderTheFlagEqualsTheCpuTwin) {
  SKIP_WITHOUT_CUDA();
  at::manual_seed(3);
  const int64_t num_weights = 50;
  const int64_t n = 20000;  // about 400 contributions per row of the gradient
  const at::Tensor weight = at::randn({num_weights, 16});
  const at::Tensor indices = at::randint(0, num_weights, {n});
  const at::Tensor offsets = at::arange(0, n, 7);
  for (int64_t mode : {int64_t{1}, int64_t{2}}) {  // mean, max: the CPU forward fills offset2bag for both
    const auto [out, offset2bag, bag_size, max_indices] = at::_embedding_bag(weight, indices, offsets, false, mode);
    const at::Tensor grad = at::randn(out.sizes());
    const at::Tensor cpu = twin("_embedding_bag_dense_backward", "",
                                {grad, indices, offset2bag, bag_size, max_indices, num_weights, false, mode,
                                 c10::IValue(), int64_t{-1}});
    const at::Tensor gpu = twin("_embedding_bag_dense_backward", "",
                                {grad.cuda(), indices.cuda(), offset2bag.cuda(), bag_size.cuda(), max_indices.cuda(),
                                 num_weights, false, mode, c10::IValue(), int64_t{-1}});
    EXPECT_TRUE(gpu.is_cuda());
    EXPECT_TRUE(bitwise_equal(cpu, gpu)) << "mode " << mode;
    const ModeGuard on("auto");
    const DeterministicFlag flag;
    // Stock throws here for mode max.
    const at::Tensor ours =
        at::_embedding_bag_dense_backward(grad.cuda(), indices.cuda(), offset2bag.cuda(), bag_size.cuda(),
                                          max_indices.cuda(), num_weights, false, mode, std::nullopt, -1);
    EXPECT_TRUE(ours.is_cuda());
    EXPECT_TRUE(bitwise_equal(ours, cpu)) << "mode " << mode;
  }
}

TEST(Gpu, AdaptiveAvgPool2dBackwardUnderTheFlagEqualsTheCpuTwin) {
  SKIP_WITHOUT_CUDA();
  at::manual_seed(4);
  for (auto dtype : {at::kFloat, at::kDouble}) {
    // 7x5 -> 40x33: overlapping windows, about 40 contributions into each input element.
    const at::Tensor self = at::randn({4, 3, 7, 5}).to(dtype);
    const at::Tensor grad = at::randn({4, 3, 40, 33}).to(dtype);
    const at::Tensor cpu = twin("_adaptive_avg_pool2d_backward", "", {grad, self});
    const at::Tensor gpu = twin("_adaptive_avg_pool2d_backward", "", {grad.cuda(), self.cuda()});
    EXPECT_TRUE(gpu.is_cuda());
    EXPECT_TRUE(bitwise_equal(cpu, gpu)) << dtype;
    const ModeGuard on("auto");
    const DeterministicFlag flag;
    // Stock throws here.
    const at::Tensor ours = at::_adaptive_avg_pool2d_backward(grad.cuda(), self.cuda());
    EXPECT_TRUE(ours.is_cuda());
    EXPECT_TRUE(bitwise_equal(ours, cpu)) << dtype;
  }
}

TEST(Gpu, StrictModeRaisesAndLeavesTheContextUsable) {
  SKIP_WITHOUT_CUDA();
  at::Tensor self = at::zeros({5, 3}, at::kCUDA);
  const at::Tensor before = self.clone();
  {
    const StrictGuard strict(true);
    EXPECT_THROW(twin("index_add_", "",
                      {self, int64_t{0}, at::tensor({0, 9}, at::kLong).cuda(), at::ones({2, 3}, at::kCUDA),
                       at::Scalar(1)}),
                 c10::Error);
    EXPECT_THROW(twin("scatter_add_", "",
                      {self, int64_t{0}, at::tensor({0, -1, 2}, at::kLong).view({1, 3}).cuda(),
                       at::ones({1, 3}, at::kCUDA)}),
                 c10::Error);
  }
  EXPECT_TRUE(at::equal(self, before));
  EXPECT_EQ(at::ones({4}, at::kCUDA).sum().item<float>(), 4.f);
}

TEST(EnableDeterminism, SeedsEveryCudaGenerator) {
  SKIP_WITHOUT_CUDA();
  const RestoreGlobalState restore;
  detops::enable_determinism(99);
  const at::Tensor first = at::randn({64}, at::TensorOptions().device(at::kCUDA)).cpu();
  detops::enable_determinism(99);
  EXPECT_TRUE(at::equal(first, at::randn({64}, at::TensorOptions().device(at::kCUDA)).cpu()));
  EXPECT_EQ(at::globalContext().defaultGenerator(at::Device(at::kCUDA, 0)).current_seed(), 99u);
}

}  // namespace
