// The CUDA engine's calls of 2^31 or more contributions (ops/key_chunks.h): one histogram of the keys per
// level of buckets (one host synchronisation each), then per chunk a stable compaction of its contributions'
// positions (cub::DeviceSelect::If, 64-bit item counts) and one ordinary engine call over PositionsOp.
// Included by cuda/sort_reduce.cuh, whose sort_reduce() sends such calls here.
#pragma once

#include "cuda/sort_reduce_steps.h"
#include "ops/common.h"
#include "ops/contract.h"
#include "ops/key_chunks.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <cub/device/device_select.cuh>

#include <algorithm>
#include <iterator>
#include <vector>

namespace detops::cuda {

// The source positions 0, 1, 2, ... as a random-access iterator, the input of the compaction.
struct PositionIterator {
  using value_type = int64_t;
  using difference_type = int64_t;
  using pointer = const int64_t*;
  using reference = int64_t;
  using iterator_category = std::random_access_iterator_tag;
  int64_t base;

  C10_HOST_DEVICE int64_t operator*() const { return base; }
  C10_HOST_DEVICE int64_t operator[](int64_t i) const { return base + i; }
  C10_HOST_DEVICE PositionIterator operator+(int64_t i) const { return {base + i}; }
  C10_HOST_DEVICE PositionIterator operator-(int64_t i) const { return {base - i}; }
  C10_HOST_DEVICE int64_t operator-(const PositionIterator& o) const { return base - o.base; }
  C10_HOST_DEVICE PositionIterator& operator++() {
    ++base;
    return *this;
  }
  C10_HOST_DEVICE PositionIterator& operator+=(int64_t i) {
    base += i;
    return *this;
  }
  C10_HOST_DEVICE bool operator==(const PositionIterator& o) const { return base == o.base; }
  C10_HOST_DEVICE bool operator!=(const PositionIterator& o) const { return base != o.base; }
};

// Whether contribution i has a key in [lo, hi) (skipped contributions have none).
template <typename Op>
struct KeyInRange {
  Op op;
  int64_t lo;
  int64_t hi;

  C10_HOST_DEVICE bool operator()(int64_t i) const {
    const int64_t k = op.key(i);
    return k != kSkipKey && k >= lo && k < hi;
  }
};

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

template <typename acc_t, typename Op>
void sort_reduce(const char* name, const Op& op, int64_t n, int64_t num_keys, int64_t D,
                 const at::TensorOptions& device_options);

// sort_reduce for n > kMaxContributions: key chunks of at most kMaxContributions contributions each.
template <typename acc_t, typename Op>
void sort_reduce_in_chunks(const char* name, const Op& op, int64_t n, int64_t num_keys, int64_t D,
                           const at::TensorOptions& device_options) {
  namespace cub = CUB_NS_QUALIFIER;
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
  const auto run = [&](const KeyChunk& chunk) {
    at::Tensor pos = empty_scratch({chunk.count}, longs);
    at::Tensor selected = empty_scratch({1}, longs);
    const KeyInRange<Op> in_range{op, chunk.lo, chunk.hi};
    size_t bytes = 0;
    C10_CUDA_CHECK(cub::DeviceSelect::If(nullptr, bytes, PositionIterator{0}, pos.data_ptr<int64_t>(),
                                         selected.data_ptr<int64_t>(), n, in_range, stream));
    at::Tensor temp = empty_scratch({static_cast<int64_t>(std::max<size_t>(bytes, 1))}, device_options.dtype(at::kByte));
    C10_CUDA_CHECK(cub::DeviceSelect::If(temp.data_ptr(), bytes, PositionIterator{0}, pos.data_ptr<int64_t>(),
                                         selected.data_ptr<int64_t>(), n, in_range, stream));
    // NB: the compaction is stable, so each destination's contributions keep their source order.
    const PositionsOp<Op> chunk_op{op, pos.data_ptr<int64_t>(), chunk.lo};
    sort_reduce<acc_t>(name, chunk_op, chunk.count, chunk.hi - chunk.lo, D, device_options);
  };
  for_each_key_chunk(name, 0, num_keys, kMaxContributions, kChunkBuckets, histogram, run);
}

}  // namespace detops::cuda
