// _index_put_impl_ on CUDA: index_put_compute (ops/index_put_op.h) on the CUDA engine. Checks and the
// destination rows are done by ops/index_put.cpp.
#include "cuda/sort_reduce.cuh"
#include "ops/index_put_op.h"

#include <c10/cuda/CUDAGuard.h>

namespace detops::cuda {

void index_put_kernel(at::Tensor& result, const at::Tensor& rows, const at::Tensor& values, int64_t inner,
                      bool accumulate) {
  const c10::cuda::CUDAGuard guard(result.device());
  index_put_compute<Engine>(result, rows, values, inner, accumulate);
}

}  // namespace detops::cuda
