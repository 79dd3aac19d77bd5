// scatter_ (src and value overloads) on CUDA: scatter_compute (ops/scatter_op.h) on the CUDA engine. Checks
// are done by ops/scatter.cpp; the reduce overloads run cuda/scatter_reduce.cu.
#include "cuda/sort_reduce.cuh"
#include "ops/scatter_op.h"

#include <c10/cuda/CUDAGuard.h>

namespace detops::cuda {

void scatter_kernel(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  const c10::cuda::CUDAGuard guard(result.device());
  scatter_compute<Engine>(result, dim, index, src);
}

}  // namespace detops::cuda
