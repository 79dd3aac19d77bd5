// Launch glue for the per-element gathers (padding, pooling, upsample, antialiased upsample): one thread per
// result element; a warp's block sums for an element of many contributions (padding, CTC).
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

// A warp's sums of one element's `blocks` blocks of the contract's tree, taken up the tree in block order: lane l
// computes blocks l, l + 32, ... (block(b): level 0 of the tree), side by side, and lane 0 pushes every sum, in
// block order, to push(sum). Every lane of the warp calls it. NB: which lane folds a block does not change its sum,
// and the levels above see the sums in block order, so the bits are the one-thread fold's.
template <typename acc_t, typename index_t, typename Block, typename Push>
__device__ void warp_block_sums(index_t blocks, int lane, const Block& block, Push&& push) {
  for (index_t g = 0; g < blocks; g += 32) {
    const acc_t mine = g + lane < blocks ? block(g + lane) : acc_t(0);
    const int in_group = blocks - g < 32 ? static_cast<int>(blocks - g) : 32;
    for (int l = 0; l < in_group; ++l) {
      const acc_t sum = __shfl_sync(0xffffffffu, mine, l);
      if (lane == 0) push(sum);
    }
  }
}

template <typename Op>
void launch_gather(const Op& op, int64_t n) {
  constexpr int kThreads = 256;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t{1} << 20));
  gather_elements_kernel<<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(op, n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace detops::cuda
