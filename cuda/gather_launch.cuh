// Launch glue for the per-element gathers (padding, pooling, upsample, antialiased upsample): one thread per
// result element.
#pragma once

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <cstdint>

namespace detops::cuda {

// One thread per element, grid-stride; the op takes its index in its own type (32 bits where the host found the
// sizes fit). NB: the loop counts in 64 bits: near 2^31 elements a 32-bit i + stride would wrap past n. Each
// element is computed whole by one thread, so the bits do not depend on the launch shape.
template <typename Op>
__global__ void gather_elements_kernel(Op op, int64_t n) {
  using index_t = typename Op::index_type;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) op(static_cast<index_t>(i));
}

template <typename Op>
void launch_gather(const Op& op, int64_t n) {
  constexpr int kThreads = 256;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t{1} << 20));
  gather_elements_kernel<<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(op, n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace detops::cuda
