// The plan of the sort-reduce engine: stable radix sort of (key, source position), then one segment scan that
// gives every sorted position its segment start and scratch slot (docs/order_contract.md, docs/engine.md).
// Everything lives in the call's one workspace (plan::layout_for).
#include "cuda/sort_reduce.h"
#include "cuda/sort_reduce_steps.h"
#include "ops/common.h"
#include "ops/contract.h"

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/dispatch/dispatch_scan.cuh>
#include <cub/device/device_select.cuh>
#include <cuda/std/iterator>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

namespace detops::cuda {
namespace {

namespace cub = CUB_NS_QUALIFIER;  // detops' own CUB namespace (CUB_WRAPPED_NAMESPACE), not torch's

// The segment-scan item of each sorted position, computed as CUB reads it (engine::seg_item): no array and
// no kernel for the per-position flags.
template <typename KeyT>
struct SegItemIterator {
  using value_type = engine::SegItem;
  using difference_type = ::cuda::std::ptrdiff_t;
  using pointer = const engine::SegItem*;
  using reference = engine::SegItem;
  using iterator_category = ::cuda::std::random_access_iterator_tag;

  const KeyT* keys;
  int32_t n;
  int64_t num_keys;
  difference_type p;

  __host__ __device__ engine::SegItem operator*() const {
    return engine::seg_item(keys, n, num_keys, static_cast<int32_t>(p));
  }
  __host__ __device__ engine::SegItem operator[](difference_type i) const {
    return engine::seg_item(keys, n, num_keys, static_cast<int32_t>(p + i));
  }
  __host__ __device__ SegItemIterator operator+(difference_type i) const { return {keys, n, num_keys, p + i}; }
  __host__ __device__ SegItemIterator operator-(difference_type i) const { return {keys, n, num_keys, p - i}; }
  __host__ __device__ difference_type operator-(const SegItemIterator& o) const { return p - o.p; }
  __host__ __device__ SegItemIterator& operator+=(difference_type i) {
    p += i;
    return *this;
  }
  __host__ __device__ SegItemIterator& operator-=(difference_type i) {
    p -= i;
    return *this;
  }
  __host__ __device__ SegItemIterator& operator++() {
    ++p;
    return *this;
  }
  __host__ __device__ SegItemIterator operator++(int) {
    SegItemIterator old = *this;
    ++p;
    return old;
  }
  __host__ __device__ SegItemIterator& operator--() {
    --p;
    return *this;
  }
  __host__ __device__ bool operator==(const SegItemIterator& o) const { return p == o.p; }
  __host__ __device__ bool operator!=(const SegItemIterator& o) const { return p != o.p; }
};

// The source positions 0, 1, 2, ... as a random-access iterator, the input of a key chunk's compaction (only the
// operations CUB's select uses).
struct PositionIterator {
  using value_type = int64_t;
  using difference_type = int64_t;
  using pointer = const int64_t*;
  using reference = int64_t;
  using iterator_category = ::cuda::std::random_access_iterator_tag;
  int64_t base;

  __host__ __device__ int64_t operator*() const { return base; }
  __host__ __device__ int64_t operator[](int64_t i) const { return base + i; }
  __host__ __device__ PositionIterator operator+(int64_t i) const { return {base + i}; }
};

// Whether position i's bit is set in a key chunk's mask.
struct MaskBit {
  const uint32_t* mask;

  __host__ __device__ bool operator()(int64_t i) const {
    return ((mask[i >> 5] >> (i & 31)) & 1u) != 0;
  }
};

// The segment scan's policy: tiles of plan::kSegScanThreads x plan::kSegScanItems items, loaded and stored
// through shared memory (coalesced), scanned with warp scans. Only the tile size differs from CUB's default
// for a 16-byte item; the items, and so the bits, do not depend on it (engine::SegScan is associative).
struct SegScanScaling {
  static constexpr int BLOCK_THREADS = static_cast<int>(plan::kSegScanThreads);
  static constexpr int ITEMS_PER_THREAD = static_cast<int>(plan::kSegScanItems);
};

struct SegScanPolicyHub {
  struct Policy500 : cub::ChainedPolicy<500, Policy500, Policy500> {
    using ScanPolicyT =
        cub::AgentScanPolicy<SegScanScaling::BLOCK_THREADS, SegScanScaling::ITEMS_PER_THREAD, engine::SegItem,
                             cub::BLOCK_LOAD_WARP_TRANSPOSE, cub::LOAD_DEFAULT, cub::BLOCK_STORE_WARP_TRANSPOSE,
                             cub::BLOCK_SCAN_WARP_SCANS, SegScanScaling>;
  };
  using MaxPolicy = Policy500;
};

// DeviceScan::InclusiveScan's dispatch with SegScanPolicyHub in place of CUB's default policies.
template <typename KeyT>
using SegScanDispatch = cub::DispatchScan<SegItemIterator<KeyT>, engine::SegItem*, engine::SegScan, cub::NullType,
                                          uint32_t, engine::SegItem, cub::ForceInclusive::No, SegScanPolicyHub>;

// CUB temp sizes depend on the device and the problem, not on the data: queried once per shape.
std::mutex temp_mutex;
std::map<std::tuple<int, int64_t, int64_t, int>, int64_t> temp_cache;

template <typename KeyT>
int64_t query_temp_bytes(int32_t n, int bits) {
  size_t sort_bytes = 0;
  cub::DoubleBuffer<KeyT> keys(nullptr, nullptr);
  cub::DoubleBuffer<int32_t> values(nullptr, nullptr);
  C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys, values, n, 0, bits));
  size_t scan_bytes = 0;
  C10_CUDA_CHECK(SegScanDispatch<KeyT>::Dispatch(nullptr, scan_bytes, SegItemIterator<KeyT>{nullptr, n, 0, 0},
                                                 nullptr, engine::SegScan{}, cub::NullType{},
                                                 static_cast<uint32_t>(n), nullptr));
  return static_cast<int64_t>(std::max(sort_bytes, scan_bytes));
}

template <typename KeyT>
SortedSegments plan_typed(char* ws, const plan::Layout& layout, int32_t n, int64_t num_keys) {
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const int bits = plan::sort_bits_for(num_keys, sizeof(KeyT));
  // NB: radix sort is stable, so equal keys keep source order. Sort only the bits num_keys needs.
  cub::DoubleBuffer<KeyT> keys(reinterpret_cast<KeyT*>(ws + layout.keys[0]), reinterpret_cast<KeyT*>(ws + layout.keys[1]));
  cub::DoubleBuffer<int32_t> values(reinterpret_cast<int32_t*>(ws + layout.pos[0]),
                                    reinterpret_cast<int32_t*>(ws + layout.pos[1]));
  size_t bytes = static_cast<size_t>(layout.temp_bytes);
  // NB: the temp pointer is never null (layout_for gives at least one byte): a null one would make this a size query.
  C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(ws + layout.temp, bytes, keys, values, n, 0, bits, stream));
  const KeyT* sorted = keys.Current();

  // Segment starts and slots: one inclusive scan of the positions' items (engine::SegScan).
  auto* seg = reinterpret_cast<engine::SegItem*>(ws + layout.seg);
  bytes = static_cast<size_t>(layout.temp_bytes);
  const SegItemIterator<KeyT> items{sorted, n, num_keys, 0};
  C10_CUDA_CHECK(SegScanDispatch<KeyT>::Dispatch(ws + layout.temp, bytes, items, seg, engine::SegScan{},
                                                 cub::NullType{}, static_cast<uint32_t>(n), stream));
  return {sorted, values.Current(), seg};
}

}  // namespace

int64_t cub_temp_bytes(int64_t n, int64_t key_bytes, int bits) {
  const auto key = std::make_tuple(static_cast<int>(c10::cuda::current_device()), n, key_bytes, bits);
  const std::lock_guard<std::mutex> lock(temp_mutex);
  const auto it = temp_cache.find(key);
  if (it != temp_cache.end()) return it->second;
  const int64_t bytes = key_bytes == 8 ? query_temp_bytes<uint64_t>(static_cast<int32_t>(n), bits)
                                       : query_temp_bytes<uint32_t>(static_cast<int32_t>(n), bits);
  temp_cache.emplace(key, bytes);
  return bytes;
}

SortedSegments plan_segments(char* ws, const plan::Layout& layout, int32_t n, int64_t num_keys, int64_t key_bytes) {
  TORCH_CHECK(n > 0, "detops: the sort-reduce engine's plan needs at least one contribution");
  if (key_bytes == 8) return plan_typed<uint64_t>(ws, layout, n, num_keys);
  return plan_typed<uint32_t>(ws, layout, n, num_keys);
}

void select_chunk_positions(const uint32_t* mask, int64_t n, int64_t* pos, const at::TensorOptions& device_options) {
  const auto stream = c10::cuda::getCurrentCUDAStream();
  at::Tensor selected = empty_scratch({1}, device_options.dtype(at::kLong));
  size_t bytes = 0;
  C10_CUDA_CHECK(cub::DeviceSelect::If(nullptr, bytes, PositionIterator{0}, pos, selected.data_ptr<int64_t>(), n,
                                       MaskBit{mask}, stream));
  at::Tensor temp = empty_scratch({static_cast<int64_t>(std::max<size_t>(bytes, 1))}, device_options.dtype(at::kByte));
  C10_CUDA_CHECK(cub::DeviceSelect::If(temp.data_ptr(), bytes, PositionIterator{0}, pos, selected.data_ptr<int64_t>(),
                                       n, MaskBit{mask}, stream));
}

}  // namespace detops::cuda
