// bincount with weights on CUDA: bincount_compute (ops/bincount_op.h) on the CUDA engine. Checks are
// done by ops/bincount.cpp.
#include "cuda/sort_reduce.cuh"
#include "ops/bincount_op.h"

#include <c10/cuda/CUDAGuard.h>

namespace detops::cuda {

void bincount_kernel(at::Tensor& out, const at::Tensor& self, const at::Tensor& weights) {
  const c10::cuda::CUDAGuard guard(out.device());
  bincount_compute<Engine>(out, self, weights);
}

}  // namespace detops::cuda
