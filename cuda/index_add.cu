// index_add_ on CUDA: index_add_compute (ops/index_add_op.h) on the CUDA engine. Checks are done by
// ops/index_add.cpp.
#include "cuda/sort_reduce.cuh"
#include "ops/index_add_op.h"

#include <c10/cuda/CUDAGuard.h>

namespace detops::cuda {

void index_add_kernel(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                      const at::Scalar& alpha) {
  const c10::cuda::CUDAGuard guard(result.device());
  index_add_compute<Engine>(result, dim, index, source, alpha);
}

}  // namespace detops::cuda
