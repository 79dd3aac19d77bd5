// detops::enable_determinism: every flag, seed and variable it promises, checked afterwards.
#include "detops/detops.h"
#include "tests/cpp/global_state.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace {

using detops::testing::RestoreGlobalState;

TEST(EnableDeterminism, SetsEveryFlagAndVariable) {
  RestoreGlobalState restore;
  ::unsetenv("CUBLAS_WORKSPACE_CONFIG");
  auto& context = at::globalContext();
  context.setDeterministicAlgorithms(false, false);
  context.setDeterministicCuDNN(false);
  context.setBenchmarkCuDNN(true);

  detops::enable_determinism(1234);

  EXPECT_TRUE(context.deterministicAlgorithms());
  EXPECT_FALSE(context.deterministicAlgorithmsWarnOnly());
  EXPECT_TRUE(context.deterministicCuDNN());
  EXPECT_FALSE(context.benchmarkCuDNN());
  const char* cublas = std::getenv("CUBLAS_WORKSPACE_CONFIG");
  ASSERT_NE(cublas, nullptr);
  EXPECT_EQ(std::string(cublas), ":4096:8");
  EXPECT_EQ(at::globalContext().defaultGenerator(at::kCPU).current_seed(), 1234u);
}

TEST(EnableDeterminism, WarnOnlyAndKeepsAnExistingCublasSetting) {
  RestoreGlobalState restore;
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8", 1);
  detops::enable_determinism(7, /*warn_only=*/true);
  EXPECT_TRUE(at::globalContext().deterministicAlgorithms());
  EXPECT_TRUE(at::globalContext().deterministicAlgorithmsWarnOnly());
  EXPECT_EQ(std::string(std::getenv("CUBLAS_WORKSPACE_CONFIG")), ":16:8");
  ::unsetenv("CUBLAS_WORKSPACE_CONFIG");
}

TEST(EnableDeterminism, SameSeedSameRandomNumbers) {
  RestoreGlobalState restore;
  detops::enable_determinism(42);
  const at::Tensor first = at::randn({64});
  const at::Tensor dropout_mask = at::rand({64}) > 0.5;
  detops::enable_determinism(42);
  EXPECT_TRUE(at::equal(first, at::randn({64})));
  EXPECT_TRUE(at::equal(dropout_mask, at::rand({64}) > 0.5));
  detops::enable_determinism(43);
  EXPECT_FALSE(at::equal(first, at::randn({64})));
}

// The CUDA generators' seeding is checked in tests/cpp/test_gpu.cpp (a GPU binary).

}  // namespace
