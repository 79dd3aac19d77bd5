// The CUDA engine's calls of 2^31 or more contributions (ops/key_chunks.h): one histogram of the keys per
// level of buckets (one host synchronisation each), then per chunk a bit mask of its contributions, their
// positions compacted stably (select_chunk_positions, cuda/sort_reduce.cu) and one plan over PositionsOp
// (sort_reduce_plan with kChunk: one fixed path, 3 kernels per op).
// Included by cuda/sort_reduce.cuh, whose sort_reduce() sends such calls here.
#pragma once

#include "cuda/sort_reduce.h"
#include "cuda/sort_reduce_steps.h"
#include "ops/common.h"
#include "ops/contract.h"
#include "ops/key_chunks.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <vector>

namespace detops::cuda {

// One thread per contribution, in whole warps: bit (i % 32) of mask[i / 32] says whether contribution i has a
// key in [lo, hi) (skipped contributions have none). The block size is a multiple of 32 and so is every base,
// so each warp writes one whole word. The compaction reads the mask, so CUB's select is compiled once, not
// once per op.
template <typename Op>
__global__ void chunk_mask_kernel(Op op, int64_t n, int64_t lo, int64_t hi, uint32_t* mask) {
  // The trip count depends on blockIdx only: every lane of a warp reaches the vote together.
  for (int64_t base = int64_t{blockIdx.x} * blockDim.x; base < n; base += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = base + threadIdx.x;
    bool in = false;
    if (i < n) {
      const int64_t k = op.key(i);
      in = k != kSkipKey && k >= lo && k < hi;
    }
    const unsigned word = __ballot_sync(0xffffffffu, in);
    if (threadIdx.x % 32 == 0 && i < n) mask[i / 32] = word;
  }
}

// One thread per contribution, grid-stride: counts it in its key's bucket when the key is in [lo, hi) (integer
// atomics, exact in any order); an invalid key fails as in make_keys_kernel.
template <typename Op>
__global__ void key_histogram_kernel(Op op, int64_t n, int64_t num_keys, int64_t lo, int64_t hi, int64_t width,
                                     unsigned long long* counts) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t k = op.key(i);
    if (k == kSkipKey) continue;
    CUDA_KERNEL_ASSERT(k >= 0 && k < num_keys && "detops: index out of range (set DETOPS_STRICT=1 for a host-side error)");
    if (k >= lo && k < hi) atomicAdd(&counts[(k - lo) / width], 1ull);
  }
}

template <typename acc_t, bool kChunk, typename Op>
void sort_reduce_plan(const char* name, const Op& op, int64_t n, int64_t num_keys, int64_t D,
                      const at::TensorOptions& device_options);

// sort_reduce for n > kMaxContributions: key chunks of at most kMaxContributions contributions each.
template <typename acc_t, typename Op>
void sort_reduce_in_chunks(const char* name, const Op& op, int64_t n, int64_t num_keys, int64_t D,
                           const at::TensorOptions& device_options) {
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const auto longs = device_options.dtype(at::kLong);
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, int64_t{1} << 20));
  const auto histogram = [&](int64_t lo, int64_t hi, int64_t width) {
    const int64_t buckets = (hi - lo + width - 1) / width;
    at::Tensor counts = at::zeros({buckets}, longs);
    static_assert(sizeof(unsigned long long) == sizeof(int64_t));
    key_histogram_kernel<<<grid, 256, 0, stream>>>(op, n, num_keys, lo, hi, width,
                                                    reinterpret_cast<unsigned long long*>(counts.data_ptr()));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const at::Tensor host = counts.cpu();  // NB: the one host synchronisation per histogram
    const int64_t* c = host.const_data_ptr<int64_t>();
    return std::vector<int64_t>(c, c + buckets);
  };
  at::Tensor mask = empty_scratch({(n + 31) / 32}, device_options.dtype(at::kInt));
  const auto run = [&](const KeyChunk& chunk) {
    chunk_mask_kernel<<<grid, 256, 0, stream>>>(op, n, chunk.lo, chunk.hi,
                                                reinterpret_cast<uint32_t*>(mask.data_ptr()));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    at::Tensor pos = empty_scratch({chunk.count}, longs);
    select_chunk_positions(reinterpret_cast<const uint32_t*>(mask.const_data_ptr()), n, pos.data_ptr<int64_t>(),
                           device_options);
    // NB: the compaction is stable, so each destination's contributions keep their source order.
    const PositionsOp<Op> chunk_op{op, pos.data_ptr<int64_t>(), chunk.lo};
    sort_reduce_plan<acc_t, true>(name, chunk_op, chunk.count, chunk.hi - chunk.lo, D, device_options);
  };
  for_each_key_chunk(name, 0, num_keys, kMaxContributions, kChunkBuckets, histogram, run);
}

}  // namespace detops::cuda
