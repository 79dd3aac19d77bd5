// detops::enable_determinism: the reproducibility recipe for LibTorch applications (seeds, the
// deterministic-algorithms flag, cuDNN flags, the cuBLAS workspace variable). The Python twin is
// python_shim/detops/repro.py; docs/reproducibility.md explains each step.
#include "detops/detops.h"

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/util/Exception.h>
#include <c10/util/irange.h>

#include <cstdlib>

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

}  // namespace

void enable_determinism(uint64_t seed, bool warn_only) {
  if (std::getenv(kCublasVariable) == nullptr) {
    // NB: cuBLAS reads the workspace configuration when torch creates its handles and workspaces; set
    // before the first CUDA matmul it applies to every one of them.
    if (cuda_initialized()) {
      TORCH_WARN("detops::enable_determinism(): CUDA was already initialised when ", kCublasVariable,
                 " was set to ", kCublasDeterministic,
                 "; cuBLAS workspaces created before now may not follow it. Set it in the environment, or "
                 "call enable_determinism() before the first CUDA operation.");
    }
    ::setenv(kCublasVariable, kCublasDeterministic, /*overwrite=*/0);
  }
  at::manual_seed(seed);  // CPU and every CUDA device
  auto& context = at::globalContext();
  context.setDeterministicAlgorithms(true, warn_only);
  context.setDeterministicCuDNN(true);
  context.setBenchmarkCuDNN(false);
}

}  // namespace detops
