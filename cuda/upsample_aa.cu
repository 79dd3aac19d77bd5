// Antialiased upsample backwards on CUDA: the per-element code of ops/upsample_aa_op.h over the window
// tables built on the host. Checks and the tables are done by ops/upsample_aa.cpp.
#include "cuda/gather_launch.cuh"
#include "ops/upsample_aa_op.h"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace detops::cuda {

void upsample_aa_backward_kernel(at::Tensor& grad_in, const at::Tensor& grad_out, const UpsampleAaTables& t) {
  const c10::cuda::CUDAGuard guard(grad_in.device());
  const int64_t n = grad_in.numel();
  if (n == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_in.scalar_type(), "detops_upsample_aa_backward", [&] {
    const auto op = make_upsample_aa_backward_op<scalar_t>(grad_in, grad_out, t);
    if (upsample_aa_fits_int32(grad_in, grad_out)) {
      launch_gather(UpsampleAaElementOp<scalar_t, int32_t>(op), n);
    } else {
      launch_gather(UpsampleAaElementOp<scalar_t, int64_t>(op), n);
    }
  });
  plan::record(upsample_aa_backward_kernels(t, grad_in, grad_out));
}

}  // namespace detops::cuda
