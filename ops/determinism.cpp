// detops::enable_determinism: the reproducibility recipe for LibTorch applications (seeds, the
// deterministic-algorithms flag, cuDNN flags, the cuBLAS workspace variable, the intra-op thread count) and
// the DeterminismRecord of what it found and set. The Python twin is
// python_shim/detops/repro.py; docs/reproducibility.md explains each step.
#include "detops/detops.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/util/Exception.h>
#include <c10/util/irange.h>

#include <cstdlib>
#include <sstream>

namespace detops {
namespace {

constexpr const char* kCublasVariable = "CUBLAS_WORKSPACE_CONFIG";
constexpr const char* kCublasDeterministic = ":4096:8";

// True if some CUDA device already has a primary context; never creates one.
bool cuda_initialized() {
  if (!at::globalContext().hasCUDA()) return false;
  const auto& hooks = at::detail::getCUDAHooks();
  for (const auto i : c10::irange(hooks.deviceCount())) {
    if (hooks.hasPrimaryContext(static_cast<c10::DeviceIndex>(i))) return true;
  }
  return false;
}

std::string cublas_setting() {
  const char* value = std::getenv(kCublasVariable);
  return value == nullptr ? std::string() : std::string(value);
}

template <typename T>
void describe(std::ostringstream& out, const char* name, const Setting<T>& setting) {
  if (setting.changed()) {
    out << "\n  set " << name << ": " << setting.before << " -> " << setting.after;
  } else {
    out << "\n  kept " << name << " = " << setting.after;
  }
}

}  // namespace

std::string DeterminismRecord::to_string() const {
  std::ostringstream out;
  out << std::boolalpha << "detops::enable_determinism(seed=" << seed << "):";
  describe(out, "seed of the CPU generator", cpu_seed);
  describe(out, "deterministic algorithms", deterministic_algorithms);
  describe(out, "warn only", warn_only);
  describe(out, "cuDNN deterministic", cudnn_deterministic);
  describe(out, "cuDNN benchmark", cudnn_benchmark);
  describe(out, kCublasVariable, Setting<std::string>{
      cublas_workspace_config.before.empty() ? "(unset)" : cublas_workspace_config.before,
      cublas_workspace_config.after.empty() ? "(unset)" : cublas_workspace_config.after});
  describe(out, "intra-op threads", num_threads);
  for (const auto& warning : warnings) out << "\n  warning: " << warning;
  return out.str();
}

DeterminismRecord enable_determinism(uint64_t seed, bool warn_only, int num_threads) {
  TORCH_CHECK(num_threads == -1 || num_threads > 0,
              "detops::enable_determinism(): num_threads must be positive (or -1 to leave the intra-op thread "
              "count as it is), got ", num_threads);
  DeterminismRecord record;
  record.seed = seed;
  record.cuda_was_initialized = cuda_initialized();
  record.cublas_workspace_config.before = cublas_setting();
  if (std::getenv(kCublasVariable) == nullptr) {
    // NB: cuBLAS reads the workspace configuration when torch creates its handles and workspaces; set
    // before the first CUDA matmul it applies to every one of them.
    if (record.cuda_was_initialized) {
      std::ostringstream message;
      message << "detops::enable_determinism(): CUDA was already initialised when " << kCublasVariable
              << " was set to " << kCublasDeterministic
              << "; cuBLAS workspaces created before now may not follow it. Set it in the environment, or "
                 "call enable_determinism() before the first CUDA operation.";
      TORCH_WARN(message.str());
      record.warnings.push_back(message.str());
    }
    ::setenv(kCublasVariable, kCublasDeterministic, /*overwrite=*/0);
  }
  record.cublas_workspace_config.after = cublas_setting();

  auto& context = at::globalContext();
  record.cpu_seed.before = context.defaultGenerator(at::kCPU).current_seed();
  at::manual_seed(seed);  // CPU and every CUDA device
  record.cpu_seed.after = context.defaultGenerator(at::kCPU).current_seed();

  record.deterministic_algorithms.before = context.deterministicAlgorithms();
  record.warn_only.before = context.deterministicAlgorithmsWarnOnly();
  context.setDeterministicAlgorithms(true, warn_only);
  record.deterministic_algorithms.after = context.deterministicAlgorithms();
  record.warn_only.after = context.deterministicAlgorithmsWarnOnly();

  record.cudnn_deterministic.before = context.deterministicCuDNN();
  context.setDeterministicCuDNN(true);
  record.cudnn_deterministic.after = context.deterministicCuDNN();
  record.cudnn_benchmark.before = context.benchmarkCuDNN();
  context.setBenchmarkCuDNN(false);
  record.cudnn_benchmark.after = context.benchmarkCuDNN();

  // NB: stock CPU kernels (convolution, matmul) may split a sum among the intra-op threads, so their bits
  // can change with the count; pinning it makes CPU runs on machines with different core counts comparable.
  record.num_threads.before = at::get_num_threads();
  if (num_threads > 0) {
    at::set_num_threads(num_threads);
    record.num_threads_pinned = true;
  }
  record.num_threads.after = at::get_num_threads();
  return record;
}

}  // namespace detops
