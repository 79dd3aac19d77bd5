// The plan of the sort-reduce engine: stable radix sort of (key, source position), then the scratch slots of the
// long segments, taken by their heads (docs/order_contract.md, docs/engine.md).
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
#include <cub/device/device_select.cuh>
#include <cuda/std/iterator>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

namespace detops::cuda {
namespace {

namespace cub = CUB_NS_QUALIFIER;  // detops' own CUB namespace (CUB_WRAPPED_NAMESPACE), not torch's

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

// The lanes of engine::SerialLanes as one warp: one probe per lane, one vote (the host form exists only so
// that the engine's __host__ __device__ steps instantiate with it; only kernels call it).
struct WarpLanes {
  template <typename F>
  C10_HOST_DEVICE uint32_t ballot(const F& f) const {
#ifdef __CUDA_ARCH__
    return __ballot_sync(0xffffffffu, f(static_cast<int>(threadIdx.x % 32)));
#else
    return engine::SerialLanes{}.ballot(f);
#endif
  }
};

// A warp per tile of kBlock sorted positions: the tile records its segment's start where the segment began in
// the kBlock positions before it (engine::near_tile_start, one load per lane); then, for each head of a run
// longer than kBlock in the tile, in turn, the warp finds the run's end (engine::segment_end, a load per lane
// per round), the head takes the segment's scratch slots (engine::segment_slots, valid keys only) from the
// counter the key kernel zeroed, and the lanes record the run's start in the tiles further inside it
// (engine::tiles_inside). NB: the order in which heads reach the counter places each segment's slots, not its
// tree (the bits); each tile's start is written once, by one of the two steps.
template <typename KeyT>
__global__ void long_segments_kernel(const KeyT* keys, int32_t n, int64_t num_keys, int32_t* seg_first,
                                     int32_t* tile_start, int32_t* num_slots) {
  static_assert(kBlock == 32, "a tile is a warp");
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t p64 = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int64_t first = p64 - lane;
  if (first >= n) return;  // the whole warp: every lane below votes
  const WarpLanes lanes;
  const auto q = static_cast<int32_t>(first);
  const int32_t near = engine::near_tile_start(keys, q, lanes);
  if (lane == 0 && near >= 0) tile_start[q / kBlock] = near;
  uint32_t heads = __ballot_sync(0xffffffffu, p64 < n && engine::long_run_head(keys, n, static_cast<int32_t>(p64)));
  while (heads != 0) {
    const int h = __ffs(heads) - 1;
    heads &= heads - 1;
    const int32_t head = q + h;
    const KeyT key = keys[head];
    const int32_t end = engine::segment_end(keys, n, head, key, lanes);
    if (lane == h && static_cast<int64_t>(key) < num_keys) {
      seg_first[head] = atomicAdd(num_slots, engine::segment_slots(int64_t{end} - head, true));
    }
    const engine::TileRange inside = engine::tiles_inside(head, end);
    for (int64_t t = inside.begin + lane; t < inside.end; t += 32) tile_start[t] = head;
  }
}

// CUB temp sizes depend on the device and the problem, not on the data: queried once per shape.
std::mutex temp_mutex;
std::map<std::tuple<int, int64_t, int64_t, int, int64_t>, int64_t> temp_cache;

template <typename KeyT, typename ValueT>
int64_t query_temp_bytes(int32_t n, int bits) {
  size_t sort_bytes = 0;
  cub::DoubleBuffer<KeyT> keys(nullptr, nullptr);
  cub::DoubleBuffer<ValueT> values(nullptr, nullptr);
  C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys, values, n, 0, bits));
  return static_cast<int64_t>(sort_bytes);
}

// ValueT: int32_t for source positions and 4-byte contributions (their bits: the sort only moves them),
// uint64_t for 8-byte contributions.
template <typename KeyT, typename ValueT>
SortedSegments plan_typed(char* ws, const plan::Layout& layout, int32_t n, int64_t num_keys) {
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const int bits = plan::sort_bits_for(num_keys, sizeof(KeyT));
  // NB: radix sort is stable, so equal keys keep source order. Sort only the bits num_keys needs.
  cub::DoubleBuffer<KeyT> keys(reinterpret_cast<KeyT*>(ws + layout.keys[0]), reinterpret_cast<KeyT*>(ws + layout.keys[1]));
  cub::DoubleBuffer<ValueT> values(reinterpret_cast<ValueT*>(ws + layout.pos[0]),
                                   reinterpret_cast<ValueT*>(ws + layout.pos[1]));
  size_t bytes = static_cast<size_t>(layout.temp_bytes);
  // NB: the temp pointer is never null (layout_for gives at least one byte): a null one would make this a size query.
  C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(ws + layout.temp, bytes, keys, values, n, 0, bits, stream));
  const KeyT* sorted = keys.Current();

  // The long segments' scratch slots and the tiles' segment starts (none without tree levels: then no segment
  // is longer than one block, and every position is in the first tile).
  int32_t* seg_first = nullptr;
  int32_t* tile_start = nullptr;
  if (layout.levels > 0) {
    seg_first = reinterpret_cast<int32_t*>(ws + layout.seg_first);
    tile_start = reinterpret_cast<int32_t*>(ws + layout.tile_start);
    const auto blocks = static_cast<unsigned>((int64_t{n} + 255) / 256);
    long_segments_kernel<KeyT><<<blocks, 256, 0, stream>>>(sorted, n, num_keys, seg_first, tile_start,
                                                           reinterpret_cast<int32_t*>(ws + layout.num_slots));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return {sorted, values.Current(), seg_first, tile_start};
}

void check_value_bytes(int64_t key_bytes, int64_t value_bytes) {
  TORCH_CHECK(value_bytes == 4 || (value_bytes == 8 && key_bytes == 4),
              "detops: the sort-reduce engine sorts 4-byte values, or 8-byte ones with 32-bit keys; got ", value_bytes,
              " bytes with ", key_bytes, "-byte keys");
}

}  // namespace

int64_t cub_temp_bytes(int64_t n, int64_t key_bytes, int bits, int64_t value_bytes) {
  check_value_bytes(key_bytes, value_bytes);
  const auto key = std::make_tuple(static_cast<int>(c10::cuda::current_device()), n, key_bytes, bits, value_bytes);
  const std::lock_guard<std::mutex> lock(temp_mutex);
  const auto it = temp_cache.find(key);
  if (it != temp_cache.end()) return it->second;
  const auto m = static_cast<int32_t>(n);
  const int64_t bytes = key_bytes == 8     ? query_temp_bytes<uint64_t, int32_t>(m, bits)
                        : value_bytes == 8 ? query_temp_bytes<uint32_t, uint64_t>(m, bits)
                                           : query_temp_bytes<uint32_t, int32_t>(m, bits);
  temp_cache.emplace(key, bytes);
  return bytes;
}

SortedSegments plan_segments(char* ws, const plan::Layout& layout, int32_t n, int64_t num_keys, int64_t key_bytes,
                             int64_t value_bytes) {
  TORCH_CHECK(n > 0, "detops: the sort-reduce engine's plan needs at least one contribution");
  check_value_bytes(key_bytes, value_bytes);
  if (key_bytes == 8) return plan_typed<uint64_t, int32_t>(ws, layout, n, num_keys);
  if (value_bytes == 8) return plan_typed<uint32_t, uint64_t>(ws, layout, n, num_keys);
  return plan_typed<uint32_t, int32_t>(ws, layout, n, num_keys);
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
