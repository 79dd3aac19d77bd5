// put_ on CUDA: put_compute (ops/put_op.h) on the CUDA engine. Checks are done by ops/put.cpp.
#include "cuda/sort_reduce.cuh"
#include "ops/put_op.h"

#include <c10/cuda/CUDAGuard.h>

namespace detops::cuda {

void put_kernel(at::Tensor& result, const at::Tensor& index, const at::Tensor& source, bool accumulate) {
  const c10::cuda::CUDAGuard guard(result.device());
  put_compute<Engine>(result, index, source, accumulate);
}

}  // namespace detops::cuda
