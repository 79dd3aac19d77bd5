// Antialiased upsample backwards on CUDA: the computation of ops/upsample_aa_op.h on the CUDA engine (one
// thread per grad_input element, Engine::for_each). Checks and the window tables are done by
// ops/upsample_aa.cpp.
#include "cuda/sort_reduce.cuh"
#include "ops/upsample_aa_op.h"

#include <c10/cuda/CUDAGuard.h>

namespace detops::cuda {

void upsample_aa_backward_kernel(at::Tensor& grad_in, const at::Tensor& grad_out, const UpsampleAaTables& t) {
  const c10::cuda::CUDAGuard guard(grad_in.device());
  upsample_aa_backward_compute<Engine>(grad_in, grad_out, t);
}

}  // namespace detops::cuda
