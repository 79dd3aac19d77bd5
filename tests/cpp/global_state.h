// Test helper: every global setting detops::enable_determinism changes, restored when destroyed.
#pragma once

#include <ATen/Context.h>
#include <ATen/Parallel.h>

namespace detops::testing {

struct RestoreGlobalState {
  at::Context& context = at::globalContext();
  const bool flag = context.deterministicAlgorithms();
  const bool warn_only = context.deterministicAlgorithmsWarnOnly();
  const bool cudnn_deterministic = context.deterministicCuDNN();
  const bool cudnn_benchmark = context.benchmarkCuDNN();
  const int num_threads = at::get_num_threads();
  ~RestoreGlobalState() {
    context.setDeterministicAlgorithms(flag, warn_only);
    context.setDeterministicCuDNN(cudnn_deterministic);
    context.setBenchmarkCuDNN(cudnn_benchmark);
    at::set_num_threads(num_threads);
  }
};

}  // namespace detops::testing
