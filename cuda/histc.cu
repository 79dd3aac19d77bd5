// histc on CUDA: histc_compute (ops/histc_op.h) on the CUDA engine. Checks are done by ops/histc.cpp.
#include "cuda/sort_reduce.cuh"
#include "ops/histc_op.h"

#include <c10/cuda/CUDAGuard.h>

namespace detops::cuda {

void histc_kernel(at::Tensor& counts, const at::Tensor& input, double lo, double hi) {
  const c10::cuda::CUDAGuard guard(counts.device());
  histc_compute<Engine>(counts, input, lo, hi);
}

}  // namespace detops::cuda
