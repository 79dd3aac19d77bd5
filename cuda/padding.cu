// Padding backwards on CUDA: the computation of ops/padding_op.h, launch glue only (one thread per
// grad_input element, cuda/gather_launch.cuh). Checks are done by ops/padding.cpp.
#include "cuda/gather_launch.cuh"
#include "ops/padding_op.h"
#include "ops/plan_record.h"

#include <c10/cuda/CUDAGuard.h>

namespace detops::cuda {

void pad_backward_kernel(at::Tensor& grad_in, const at::Tensor& grad_out, const PadDims& dims, bool reflect) {
  const c10::cuda::CUDAGuard guard(grad_in.device());
  const int64_t n = grad_in.numel();
  if (n == 0) return;
  plan::record(plan::for_each_call(n));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_in.scalar_type(), "detops_padding_backward", [&] {
    with_pad_backward_op<scalar_t>(grad_in, grad_out, dims, reflect, /*force_general=*/false,
                                   [&](const auto& op) { launch_gather(op, n); });
  });
}

}  // namespace detops::cuda
