// Padding backwards on CUDA: the computation of ops/padding_op.h on the CUDA engine (one thread per
// grad_input element, Engine::for_each). Checks are done by ops/padding.cpp.
#include "cuda/sort_reduce.cuh"
#include "ops/padding_op.h"

#include <c10/cuda/CUDAGuard.h>

namespace detops::cuda {

void pad_backward_kernel(at::Tensor& grad_in, const at::Tensor& grad_out, const PadDims& dims, bool reflect) {
  const c10::cuda::CUDAGuard guard(grad_in.device());
  pad_backward_compute<Engine>(grad_in, grad_out, dims, reflect);
}

}  // namespace detops::cuda
