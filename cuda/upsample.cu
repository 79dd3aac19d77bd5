// Upsample backwards on CUDA: the per-element code of ops/upsample_op.h over the reader tables built on the
// host. Checks are done by ops/upsample.cpp.
#include "ops/upsample_op.h"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace detops::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per grad_input element, grid-stride; the linear index split by dividers fixed per call
// (32-bit where every offset fits). NB: each element's value comes from one thread with the contract's
// tree, so the bits do not depend on the launch shape.
template <typename scalar_t, typename index_t>
__global__ void upsample_backward_element_kernel(const UpsampleElementOp<scalar_t, index_t> op, int64_t n) {
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += step) op(static_cast<index_t>(i));
}

template <typename scalar_t, typename index_t>
void launch(const UpsampleBackwardOp<scalar_t>& op, int64_t n) {
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t{1} << 20));
  upsample_backward_element_kernel<scalar_t, index_t><<<grid, kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      UpsampleElementOp<scalar_t, index_t>(op), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void upsample_backward_kernel(at::Tensor& grad_in, const at::Tensor& grad_out, const UpsampleSpec& spec,
                              bool channels_last) {
  const c10::cuda::CUDAGuard guard(grad_in.device());
  const int64_t n = grad_in.numel();
  if (n == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_in.scalar_type(), "detops_upsample_backward", [&] {
    const UpsampleTables t = build_upsample_tables<acc_type<scalar_t>>(spec, grad_in.device());
    const auto op = make_upsample_backward_op<scalar_t>(grad_in, grad_out, spec, t, channels_last);
    if (upsample_fits_int32(grad_in, grad_out)) {
      launch<scalar_t, int32_t>(op, n);
    } else {
      launch<scalar_t, int64_t>(op, n);
    }
  });
}

}  // namespace detops::cuda
