// Pooling backwards on CUDA: launch glue over the shared per-element code in ops/pooling_op.h. Checks
// are done by ops/pooling.cpp.
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "cuda/pooling_launch.h"
#include "cuda/sort_reduce.cuh"

namespace detops::cuda {
namespace {

// One thread per input element (grid-stride): it gathers its covering output elements in ascending
// output order. NB: each element's sum is computed by one thread with the contract's tree, so the bits
// do not depend on the launch shape.
template <typename Op>
__global__ void avg_pool_backward_gather_kernel(Op op, int64_t n) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    op(i);
  }
}

}  // namespace

void avg_pool_backward_kernel(at::Tensor& grad_in, const at::Tensor& grad_out, const PoolDims& dims, bool adaptive,
                              bool count_include_pad, int64_t divisor_override) {
  const c10::cuda::CUDAGuard guard(grad_in.device());
  const int64_t n = grad_in.numel();
  if (n == 0) return;
  const auto stream = c10::cuda::getCurrentCUDAStream();
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t{1} << 20);
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, grad_in.scalar_type(), "detops_avg_pool_backward_cuda", [&] {
        const auto op =
            make_avg_pool_op<scalar_t>(grad_in, grad_out, dims, adaptive, count_include_pad, divisor_override);
        avg_pool_backward_gather_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(op, n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
}

void max_pool_backward_kernel(at::Tensor& grad_in, const at::Tensor& grad_out, const at::Tensor& indices,
                              int64_t output_plane, int64_t input_plane) {
  const c10::cuda::CUDAGuard guard(grad_in.device());
  if (grad_out.numel() == 0 || grad_in.numel() == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, grad_in.scalar_type(), "detops_max_pool_backward_cuda", [&] {
        const auto op = make_max_pool_op<scalar_t>(grad_in, grad_out, indices, output_plane, input_plane);
        sort_reduce<acc_type<scalar_t>>(op, grad_out.numel(), grad_in.numel(), 1, grad_in.options());
      });
}

}  // namespace detops::cuda
