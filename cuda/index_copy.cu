// index_copy_ on CUDA: index_copy_compute (ops/index_copy_op.h) on the CUDA engine. Checks are done by
// ops/index_copy.cpp.
#include "cuda/sort_reduce.cuh"
#include "ops/index_copy_op.h"

#include <c10/cuda/CUDAGuard.h>

namespace detops::cuda {

void index_copy_kernel(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& source) {
  const c10::cuda::CUDAGuard guard(result.device());
  index_copy_compute<Engine>(result, dim, index, source);
}

}  // namespace detops::cuda
