// Upsample backwards on CUDA: the computation of ops/upsample_op.h on the CUDA engine (one thread per
// grad_input element, Engine::for_each). Checks are done by ops/upsample.cpp.
#include "cuda/sort_reduce.cuh"
#include "ops/upsample_op.h"

#include <c10/cuda/CUDAGuard.h>

namespace detops::cuda {

void upsample_backward_kernel(at::Tensor& grad_in, const at::Tensor& grad_out, const UpsampleSpec& spec,
                              bool channels_last) {
  const c10::cuda::CUDAGuard guard(grad_in.device());
  upsample_backward_compute<Engine>(grad_in, grad_out, spec, channels_last);
}

}  // namespace detops::cuda
