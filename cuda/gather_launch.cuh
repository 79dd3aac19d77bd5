// Launch glue for the per-element gathers (padding, pooling): one thread per result element.
#pragma once

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <cstdint>

namespace detops::cuda {

// One thread per element, grid-stride in the op's index type (32 bits where the host found the sizes fit).
// NB: each element is computed whole by one thread, so the bits do not depend on the launch shape.
template <typename Op>
__global__ void gather_elements_kernel(Op op, typename Op::index_type n) {
  using index_t = typename Op::index_type;
  const index_t stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) op(i);
}

template <typename Op>
void launch_gather(const Op& op, int64_t n) {
  constexpr int kThreads = 256;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t{1} << 20));
  gather_elements_kernel<<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      op, static_cast<typename Op::index_type>(n));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace detops::cuda
