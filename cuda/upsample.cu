// Upsample backwards on CUDA: the per-element code of ops/upsample_op.h over the reader tables built on the
// host. Checks are done by ops/upsample.cpp.
#include "cuda/gather_launch.cuh"
#include "ops/upsample_op.h"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace detops::cuda {

void upsample_backward_kernel(at::Tensor& grad_in, const at::Tensor& grad_out, const UpsampleSpec& spec,
                              bool channels_last) {
  const c10::cuda::CUDAGuard guard(grad_in.device());
  const int64_t n = grad_in.numel();
  if (n == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_in.scalar_type(), "detops_upsample_backward", [&] {
    const UpsampleTables t = build_upsample_tables_for(spec, grad_in.scalar_type(), grad_in.device());
    const auto op = make_upsample_backward_op<scalar_t>(grad_in, grad_out, spec, t, channels_last);
    if (upsample_fits_int32(grad_in, grad_out)) {
      launch_gather(UpsampleElementOp<scalar_t, int32_t>(op), n);
    } else {
      launch_gather(UpsampleElementOp<scalar_t, int64_t>(op), n);
    }
    plan::record(upsample_backward_kernels(t, grad_in, grad_out));
  });
}

}  // namespace detops::cuda
