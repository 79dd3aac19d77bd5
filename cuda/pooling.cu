// Pooling backwards on CUDA: the computations of ops/pooling_op.h, launch glue only (average pools: one
// thread per grad_input element, cuda/gather_launch.cuh; max pools: the CUDA engine). Checks are done by
// ops/pooling.cpp.
#include "cuda/gather_launch.cuh"
#include "cuda/sort_reduce.cuh"
#include "ops/pooling_op.h"

#include <c10/cuda/CUDAGuard.h>

namespace detops::cuda {

void avg_pool_backward_kernel(at::Tensor& grad_in, const at::Tensor& grad_out, const PoolDims& dims, bool adaptive,
                              bool count_include_pad, int64_t divisor_override) {
  const c10::cuda::CUDAGuard guard(grad_in.device());
  const int64_t n = grad_in.numel();
  if (n == 0) return;
  plan::record(avg_pool_backward_call(grad_in));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_in.scalar_type(), "detops_avg_pool_backward", [&] {
    with_avg_pool_op<scalar_t>(grad_in, grad_out, dims, adaptive, count_include_pad, divisor_override,
                               /*force_general=*/false, [&](const auto& op) { launch_gather(op, n); });
  });
}

void max_pool_backward_kernel(const char* name, at::Tensor& grad_in, const at::Tensor& grad_out,
                              const at::Tensor& indices, int64_t output_plane, int64_t input_plane) {
  const c10::cuda::CUDAGuard guard(grad_in.device());
  max_pool_backward_compute<Engine>(name, grad_in, grad_out, indices, output_plane, input_plane);
}

}  // namespace detops::cuda
