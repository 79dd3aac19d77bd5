// scatter_reduce_ on CUDA: scatter_reduce_compute (ops/scatter_reduce_op.h) on the CUDA engine. Checks are
// done by ops/scatter_reduce.cpp.
#include "cuda/sort_reduce.cuh"
#include "ops/scatter_reduce_op.h"

#include <c10/cuda/CUDAGuard.h>

namespace detops::cuda {

void scatter_reduce_kernel(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                           Reduction reduce, bool include_self, IntDtype ints) {
  const c10::cuda::CUDAGuard guard(result.device());
  scatter_reduce_compute<Engine>(result, dim, index, src, reduce, include_self, ints);
}

}  // namespace detops::cuda
