// detops::enable_determinism: every flag, seed and variable it promises, checked afterwards.
#include "detops/detops.h"
#include "tests/cpp/global_state.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
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

TEST(EnableDeterminism, RecordsWhatItFoundAndSet) {
  RestoreGlobalState restore;
  ::unsetenv("CUBLAS_WORKSPACE_CONFIG");
  auto& context = at::globalContext();
  context.setDeterministicAlgorithms(false, false);
  context.setDeterministicCuDNN(true);
  context.setBenchmarkCuDNN(true);
  at::manual_seed(5);
  const int threads = at::get_num_threads();

  const detops::DeterminismRecord record = detops::enable_determinism(1234, /*warn_only=*/true);

  EXPECT_EQ(record.seed, 1234u);
  EXPECT_EQ(record.cpu_seed.before, 5u);
  EXPECT_EQ(record.cpu_seed.after, 1234u);
  EXPECT_FALSE(record.deterministic_algorithms.before);
  EXPECT_TRUE(record.deterministic_algorithms.after);
  EXPECT_FALSE(record.warn_only.before);
  EXPECT_TRUE(record.warn_only.after);
  EXPECT_FALSE(record.cudnn_deterministic.changed());
  EXPECT_TRUE(record.cudnn_deterministic.after);
  EXPECT_TRUE(record.cudnn_benchmark.before);
  EXPECT_FALSE(record.cudnn_benchmark.after);
  EXPECT_EQ(record.cublas_workspace_config.before, "");
  EXPECT_EQ(record.cublas_workspace_config.after, ":4096:8");
  EXPECT_FALSE(record.num_threads_pinned);
  EXPECT_EQ(record.num_threads.before, threads);
  EXPECT_EQ(record.num_threads.after, threads);
  EXPECT_FALSE(record.cuda_was_initialized);  // no GPU here; tests/cpp/test_gpu.cpp has one
  EXPECT_TRUE(record.warnings.empty());
  const std::string text = record.to_string();
  EXPECT_NE(text.find("set deterministic algorithms: false -> true"), std::string::npos) << text;
  EXPECT_NE(text.find("kept cuDNN deterministic = true"), std::string::npos) << text;
  EXPECT_NE(text.find("set CUBLAS_WORKSPACE_CONFIG: (unset) -> :4096:8"), std::string::npos) << text;
  ::unsetenv("CUBLAS_WORKSPACE_CONFIG");
}

TEST(EnableDeterminism, PinsTheIntraOpThreadCount) {
  RestoreGlobalState restore;
  at::set_num_threads(2);
  const detops::DeterminismRecord one = detops::enable_determinism(3, false, /*num_threads=*/1);
  EXPECT_EQ(at::get_num_threads(), 1);
  EXPECT_TRUE(one.num_threads_pinned);
  EXPECT_EQ(one.num_threads.before, 2);
  EXPECT_EQ(one.num_threads.after, 1);
  EXPECT_NE(one.to_string().find("set intra-op threads: 2 -> 1"), std::string::npos) << one.to_string();

  const detops::DeterminismRecord kept = detops::enable_determinism(3);  // -1: left as it is
  EXPECT_EQ(at::get_num_threads(), 1);
  EXPECT_FALSE(kept.num_threads_pinned);
  EXPECT_FALSE(kept.num_threads.changed());
}

TEST(EnableDeterminism, RejectsAThreadCountThatIsNotPositiveBeforeChangingAnything) {
  RestoreGlobalState restore;
  auto& context = at::globalContext();
  context.setDeterministicAlgorithms(false, false);
  const int threads = at::get_num_threads();
  for (const int bad : {0, -2}) {
    try {
      detops::enable_determinism(9, false, bad);
      ADD_FAILURE() << "num_threads=" << bad << " was accepted";
    } catch (const c10::Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("detops::enable_determinism(): num_threads must be positive"), std::string::npos) << what;
      EXPECT_NE(what.find("got " + std::to_string(bad)), std::string::npos) << what;
    }
  }
  EXPECT_FALSE(context.deterministicAlgorithms());
  EXPECT_EQ(at::get_num_threads(), threads);
}

// The CUDA generators' seeding is checked in tests/cpp/test_gpu.cpp (a GPU binary).

}  // namespace
