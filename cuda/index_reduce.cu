// index_reduce_ on CUDA: index_reduce_compute (ops/index_reduce_op.h) on the CUDA engine. Checks are done by
// ops/index_reduce.cpp.
#include "cuda/sort_reduce.cuh"
#include "ops/index_reduce_op.h"

#include <c10/cuda/CUDAGuard.h>

namespace detops::cuda {

void index_reduce_kernel(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                         Reduction reduce, bool include_self, IntDtype ints) {
  const c10::cuda::CUDAGuard guard(result.device());
  index_reduce_compute<Engine>(result, dim, index, source, reduce, include_self, ints);
}

}  // namespace detops::cuda
