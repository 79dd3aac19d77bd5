// GPU checks (CTest label `gpu`): CUDA == CPU bitwise, overrides under the flag, reruns, strict mode.
// Every test skips with "detops: no CUDA device" where there is none.
#include "detops/detops.h"
#include "ops/index_add.h"
#include "ops/scatter_add.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace {

#define SKIP_WITHOUT_CUDA() \
  if (!at::globalContext().hasCUDA()) GTEST_SKIP() << "detops: no CUDA device"

struct DeterministicFlag {
  DeterministicFlag() { at::globalContext().setDeterministicAlgorithms(true, false); }
  ~DeterministicFlag() { at::globalContext().setDeterministicAlgorithms(false, false); }
};

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
      const at::Tensor cpu = detops::index_add(self, 0, index, source, 0.5);
      const at::Tensor gpu = detops::index_add(self.cuda(), 0, index.cuda(), source.cuda(), 0.5);
      EXPECT_TRUE(bitwise_equal(cpu, gpu)) << dtype << " dests " << dests;
      const at::Tensor sindex = at::randint(0, dests, {50000, 8});
      EXPECT_TRUE(bitwise_equal(detops::scatter_add(self, 0, sindex, source),
                                detops::scatter_add(self.cuda(), 0, sindex.cuda(), source.cuda())))
          << dtype << " dests " << dests;
    }
  }
}

TEST(Gpu, HotDestinationOfAMillionMatchesCpuAndIsAccurate) {
  SKIP_WITHOUT_CUDA();
  const int64_t n = 1 << 20;
  const at::Tensor src = at::rand({n});
  const at::Tensor index = at::zeros({n}, at::kLong);
  const at::Tensor cpu = detops::scatter_add(at::zeros({1}), 0, index, src);
  const at::Tensor gpu = detops::scatter_add(at::zeros({1}, at::kCUDA), 0, index.cuda(), src.cuda());
  EXPECT_TRUE(bitwise_equal(cpu, gpu));
  const double exact = src.to(at::kDouble).sum().item<double>();
  EXPECT_LT(std::abs(gpu.item<float>() - exact) / exact, 2e-6);
}

TEST(Gpu, OverridesUnderTheFlagMatchStockAndRepeatBitwise) {
  SKIP_WITHOUT_CUDA();
  const at::Tensor self = at::randn({1000, 64}, at::kCUDA);
  const at::Tensor index = at::randint(0, 1000, {20000}, at::kCUDA);
  const at::Tensor source = at::randn({20000, 64}, at::kCUDA);
  detops::set_mode("off");
  const at::Tensor stock = at::index_add(self, 0, index, source);
  detops::set_mode("auto");
  const DeterministicFlag flag;
  const at::Tensor first = at::index_add(self, 0, index, source);
  EXPECT_TRUE(at::allclose(first, stock, 1e-4, 1e-4));
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(bitwise_equal(first, at::index_add(self, 0, index, source))) << "rerun " << i;
  }
}

TEST(Gpu, StrictModeRaisesAndLeavesTheContextUsable) {
  SKIP_WITHOUT_CUDA();
  detops::set_strict(true);
  at::Tensor self = at::zeros({5, 3}, at::kCUDA);
  const at::Tensor before = self.clone();
  EXPECT_THROW(detops::index_add_(self, 0, at::tensor({0, 9}, at::kLong).cuda(), at::ones({2, 3}, at::kCUDA), 1),
               c10::Error);
  EXPECT_THROW(detops::scatter_add_(self, 0, at::tensor({0, -1, 2}, at::kLong).view({1, 3}).cuda(), at::ones({1, 3}, at::kCUDA)),
               c10::Error);
  detops::set_strict(false);
  EXPECT_TRUE(at::equal(self, before));
  EXPECT_EQ(at::ones({4}, at::kCUDA).sum().item<float>(), 4.f);
}

}  // namespace
