// scatter_add_ on CUDA: scatter_add_compute (ops/scatter_add_op.h) on the CUDA engine. Checks are done
// by ops/scatter_add.cpp.
#include "cuda/sort_reduce.cuh"
#include "ops/scatter_add_op.h"

#include <c10/cuda/CUDAGuard.h>

namespace detops::cuda {

void scatter_add_kernel(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  const c10::cuda::CUDAGuard guard(result.device());
  scatter_add_compute<Engine>(result, dim, index, src);
}

}  // namespace detops::cuda
