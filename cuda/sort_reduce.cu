// The plan of the sort-reduce engine: stable sort of (key, source position or carried contribution), a counting
// sort of our own for 32-bit keys and CUB's radix sort for 64-bit ones, then the scratch slots of the long
// segments, taken by their heads (docs/order_contract.md, docs/engine.md).
// Everything lives in the call's one workspace (plan::layout_for).
#include "cuda/sort_reduce.h"
#include "cuda/sort_reduce_steps.h"
#include "ops/common.h"
#include "ops/contract.h"

#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_select.cuh>
#include <cooperative_groups.h>
#include <cuda/std/iterator>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>
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
                                     int32_t* tile_start, int32_t* num_slots, const int32_t* gate) {
  static_assert(kBlock == 32, "a tile is a warp");
  if (gated_off(gate)) return;
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

// The counting sort's keys past n: in no bin.
constexpr uint32_t kNoBin = 0xffffffffu;
constexpr int kCountThreads = engine::kCountWarps * 32;
// Table entries per thread in each round of a chunk's scan, and chunk totals per thread in the scatter's scan
// of them (kCountThreads x kScanItems >= plan::kCountingMaxGrid).
constexpr int kScanItems = 4;
static_assert(kCountThreads * kScanItems >= plan::kCountingMaxGrid, "one round scans every chunk total");
using BlockScan = cub::BlockScan<uint32_t, kCountThreads>;

// The counting sort's arguments: its double buffers (pass p reads buffer p % 2 and writes the other), its passes,
// the table, the scan chunks' totals (plan::kCountingMaxGrid) and the call's gate (null without).
template <typename ValueT>
struct CountingArgs {
  uint32_t* keys0;
  uint32_t* keys1;
  ValueT* values0;
  ValueT* values1;
  int32_t n;
  int64_t num_keys;
  int32_t tiles;
  plan::CountingPasses passes;
  uint32_t* table;
  uint32_t* totals;
  const int32_t* gate;
};

// One warp's count of its part of a tile (digits d, one per chunk, kNoBin past n) per bin, into its row of shared
// counts. In each chunk the lanes of one digit find each other (__match_any_sync) and the first adds their number:
// one writer per (row, bin) at a time, ordered by __syncwarp() from one chunk to the next.
__device__ void count_part(const uint32_t (&d)[engine::kCountChunks], int lane, uint32_t* row) {
  for (int c = 0; c < engine::kCountChunks; ++c) {
    const uint32_t peers = __match_any_sync(0xffffffffu, d[c]);
    if (d[c] != kNoBin && engine::peer_rank(peers, lane) == 0) row[d[c]] += engine::popcount32(peers);
    __syncwarp();
  }
}

// The block's counts per warp and bin (shared memory): one array for every step, so a count outlives the barrier
// after it.
using CountRows = uint32_t[engine::kCountWarps][plan::kCountingMaxBins];
__device__ CountRows& count_rows() {
  __shared__ CountRows rows;
  return rows;
}

// The digits at `shift` of this thread's keys k of a tile's part (kNoBin past n).
__device__ void tile_digits(int32_t n, int32_t tile, int shift, int width, const uint32_t (&k)[engine::kCountChunks],
                            uint32_t (&d)[engine::kCountChunks]) {
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
#pragma unroll
  for (int c = 0; c < engine::kCountChunks; ++c) {
    const int64_t p = engine::count_position(tile, warp, c, lane);
    d[c] = p < n ? plan::counting_digit(k[c], shift, width) : kNoBin;
  }
}

// The count and the scatter's first step for one tile: each warp loads its part's keys into k and their digits
// at `shift` into d (tile_digits), zeroes its row of the block's counts and counts its part into it (count_part).
// Returns the rows, once every warp's is done.
__device__ CountRows& count_tile(const uint32_t* keys, int32_t n, int32_t tile, int shift, int width, int32_t bins,
                                 uint32_t (&k)[engine::kCountChunks], uint32_t (&d)[engine::kCountChunks]) {
  CountRows& rows = count_rows();
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
#pragma unroll
  for (int c = 0; c < engine::kCountChunks; ++c) {
    const int64_t p = engine::count_position(tile, warp, c, lane);
    k[c] = p < n ? keys[p] : 0u;
  }
  tile_digits(n, tile, shift, width, k, d);
  for (int b = lane; b < bins; b += 32) rows[warp][b] = 0;
  __syncwarp();
  count_part(d, lane, rows[warp]);
  __syncthreads();
  return rows;
}

// A pass's count: each block takes tiles blockIdx.x, + gridDim.x, ...; its warps count their parts per bin
// (count_tile), then the block sums the rows into the tile's column of the table, bin-major (table[bin * tiles +
// tile]). NB: integer counts, exact in any order.
// The keys of the block's last tile stay in k.
__device__ void counting_count(const uint32_t* keys, int32_t n, int32_t tiles, int shift, int width, int32_t bins,
                               uint32_t* table, uint32_t (&k)[engine::kCountChunks]) {
  for (int32_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    uint32_t d[engine::kCountChunks];
    const CountRows& rows = count_tile(keys, n, tile, shift, width, bins, k, d);
    for (int b = static_cast<int>(threadIdx.x); b < bins; b += blockDim.x) {
      uint32_t total = 0;
      for (int w = 0; w < engine::kCountWarps; ++w) total += rows[w][b];
      table[int64_t{b} * tiles + tile] = total;
    }
    __syncthreads();
  }
}

// The running total of a block scan over rounds (cub::BlockScan's prefix callback, called by the first warp).
struct RunningTotal {
  uint32_t total;
  __device__ uint32_t operator()(uint32_t round) {
    const uint32_t before = total;
    total += round;
    return before;
  }
};

// A pass's scan, the table's exclusive scan in chunks: block c scans its chunk (plan::counting_scan_chunk) in
// place, in rounds of kCountThreads x kScanItems entries, and writes the chunk's total to totals[c]. NB: integer
// sums, exact in any order; the scatter adds each chunk the totals before it.
__device__ void counting_scan(uint32_t* table, int64_t entries, uint32_t* totals) {
  __shared__ typename BlockScan::TempStorage storage;
  const int64_t size = plan::counting_scan_chunk(entries, gridDim.x);
  const int64_t begin = std::min<int64_t>(int64_t{blockIdx.x} * size, entries);
  const int64_t end = std::min<int64_t>(begin + size, entries);
  RunningTotal running{0};
  for (int64_t round = begin; round < end; round += int64_t{kCountThreads} * kScanItems) {
    uint32_t v[kScanItems];
    const int64_t first = round + int64_t{threadIdx.x} * kScanItems;
#pragma unroll
    for (int j = 0; j < kScanItems; ++j) v[j] = first + j < end ? table[first + j] : 0u;
    BlockScan(storage).ExclusiveSum(v, v, running);
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kScanItems; ++j) {
      if (first + j < end) table[first + j] = v[j];
    }
  }
  if (threadIdx.x == 0) totals[blockIdx.x] = running.total;
}

// A pass's scatter, a block per tile as the count: the block scans the chunks' totals into shared memory; per
// tile, the warps load their parts' values and count their keys again; each row becomes the first sorted position
// of the warp's keys of each bin (the tile's, from the scanned table plus its chunk's base, then the warps before
// it); then each warp walks its chunks in turn: a lane's sorted position is its bin's next one plus its rank among
// the chunk's lanes of its digit (engine::peer_rank), and the first of them moves the next position past them.
// With `counted`, the block's one tile was counted in this launch: its rows and keys (k) are still there, and the
// warps take them instead of counting again. NB: the order of the keys of one bin is tiles, then warps, then
// chunks, then lanes: source order (engine::count_position), so each pass is stable, and so is the sort.
template <typename ValueT>
__device__ void counting_scatter(const uint32_t* keys, const ValueT* values, int32_t n, int32_t tiles, int shift,
                                 int width, int32_t bins, const uint32_t* table, const uint32_t* totals,
                                 uint32_t* keys_out, ValueT* values_out, bool counted,
                                 uint32_t (&k)[engine::kCountChunks]) {
  __shared__ typename BlockScan::TempStorage storage;
  __shared__ uint32_t base[kCountThreads * kScanItems];
  {
    uint32_t v[kScanItems];
    const int first = static_cast<int>(threadIdx.x) * kScanItems;
#pragma unroll
    for (int j = 0; j < kScanItems; ++j) v[j] = first + j < static_cast<int>(gridDim.x) ? totals[first + j] : 0u;
    BlockScan(storage).ExclusiveSum(v, v);
#pragma unroll
    for (int j = 0; j < kScanItems; ++j) base[first + j] = v[j];
  }
  __syncthreads();
  const int64_t size = plan::counting_scan_chunk(int64_t{bins} * tiles, gridDim.x);
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int32_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    // NB: the values are loaded first, so their loads are in flight while the warp counts.
    ValueT v[engine::kCountChunks];
#pragma unroll
    for (int c = 0; c < engine::kCountChunks; ++c) {
      const int64_t p = engine::count_position(tile, warp, c, lane);
      v[c] = p < n ? values[p] : ValueT{};
    }
    uint32_t d[engine::kCountChunks];
    if (counted) {
      tile_digits(n, tile, shift, width, k, d);
    } else {
      count_tile(keys, n, tile, shift, width, bins, k, d);
    }
    CountRows& rows = count_rows();
    for (int b = static_cast<int>(threadIdx.x); b < bins; b += blockDim.x) {
      const int64_t entry = int64_t{b} * tiles + tile;
      uint32_t at = table[entry] + base[entry / size];
      for (int w = 0; w < engine::kCountWarps; ++w) {
        const uint32_t count = rows[w][b];
        rows[w][b] = at;
        at += count;
      }
    }
    __syncthreads();
    uint32_t* next = rows[warp];
#pragma unroll
    for (int c = 0; c < engine::kCountChunks; ++c) {
      const uint32_t peers = __match_any_sync(0xffffffffu, d[c]);
      const uint32_t at = d[c] != kNoBin ? next[d[c]] : 0;
      __syncwarp();
      const int rank = engine::peer_rank(peers, lane);
      if (d[c] != kNoBin) {
        if (rank == 0) next[d[c]] = at + engine::popcount32(peers);
        keys_out[at + rank] = k[c];
        values_out[at + rank] = v[c];
      }
      __syncwarp();
    }
    __syncthreads();
  }
}

// The counting sort's steps first_step .. end_step - 1 (step 3p + 0, 1, 2: pass p's count, scan and scatter), a
// block of engine::kCountWarps warps per tile, grid-stride; a grid-wide barrier between steps. With all the
// steps in one cooperative launch its grid is all resident; a plain launch per step runs it too (one step never
// waits at the barrier). NB: each tile's counts, each chunk's scan and each key's sorted position are functions
// of the keys alone, whatever the grid (the chunks' bounds move with it, their sums do not).
template <typename ValueT>
__global__ void __launch_bounds__(kCountThreads) counting_sort_kernel(CountingArgs<ValueT> a, int first_step,
                                                                      int end_step) {
  if (gated_off(a.gate)) return;  // every block: none waits at a barrier
  // NB: where every block has at most one tile, a pass's scatter in the launch of its count takes the count's rows
  // (shared memory) and keys (k) instead of counting again: the same counts.
  const bool one_tile = a.tiles <= static_cast<int32_t>(gridDim.x);
  uint32_t k[engine::kCountChunks];
  for (int step = first_step; step < end_step; ++step) {
    if (step > first_step) cooperative_groups::this_grid().sync();
    const int pass = step / 3;
    const int shift = pass * a.passes.width;
    const int32_t bins = plan::counting_bins(a.num_keys, shift, a.passes.width);
    const bool even = pass % 2 == 0;
    if (step % 3 == 0) {
      counting_count(even ? a.keys0 : a.keys1, a.n, a.tiles, shift, a.passes.width, bins, a.table, k);
    } else if (step % 3 == 1) {
      counting_scan(a.table, int64_t{bins} * a.tiles, a.totals);
    } else {
      counting_scatter<ValueT>(even ? a.keys0 : a.keys1, even ? a.values0 : a.values1, a.n, a.tiles, shift,
                               a.passes.width, bins, a.table, a.totals, even ? a.keys1 : a.keys0,
                               even ? a.values1 : a.values0, one_tile && step - 2 >= first_step, k);
    }
  }
}

// Runs the counting sort of (keys0, values0) on the stream: one cooperative launch of every step, its grid the
// tiles, at most the blocks resident at once (queried once per device and value width) and
// plan::kCountingMaxGrid; one launch per step where the device has no cooperative launch (or the stream is
// capturing, or DETOPS_COOPERATIVE=0: cooperative_launch) or fewer blocks fit.
// The sorted keys and values end in buffer passes % 2.
template <typename ValueT>
void run_counting_sort(const CountingArgs<ValueT>& args, cudaStream_t stream) {
  const auto kernel = counting_sort_kernel<ValueT>;
  static std::atomic<int64_t> resident[C10_COMPILE_TIME_MAX_GPUS] = {};
  const int64_t blocks = resident_blocks(reinterpret_cast<const void*>(kernel), kCountThreads, resident);
  const auto grid = static_cast<unsigned>(std::min({int64_t{args.tiles}, blocks, plan::kCountingMaxGrid}));
  const int steps = 3 * args.passes.passes;
  CountingArgs<ValueT> a = args;
  int first = 0;
  int end = steps;
  void* params[] = {&a, &first, &end};
  if (launch_cooperative(reinterpret_cast<const void*>(kernel), dim3(grid), dim3(kCountThreads), params, stream)) {
    return;
  }
  for (int step = 0; step < steps; ++step) {
    kernel<<<grid, kCountThreads, 0, stream>>>(args, step, step + 1);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
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
SortedSegments plan_typed(char* ws, const plan::Layout& layout, int32_t n, int64_t num_keys, const int32_t* gate) {
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const int bits = plan::sort_bits_for(num_keys, sizeof(KeyT));
  const KeyT* sorted = nullptr;
  const void* sorted_values = nullptr;
  size_t bytes = static_cast<size_t>(layout.temp_bytes);
  bool counted = false;
  if constexpr (std::is_same_v<KeyT, uint32_t>) {
    if (layout.table_entries > 0) {
      // NB: the counting sort is stable (counting_scatter), as the radix sort.
      const CountingArgs<ValueT> args{reinterpret_cast<uint32_t*>(ws + layout.keys[0]),
                                      reinterpret_cast<uint32_t*>(ws + layout.keys[1]),
                                      reinterpret_cast<ValueT*>(ws + layout.pos[0]),
                                      reinterpret_cast<ValueT*>(ws + layout.pos[1]),
                                      n,
                                      num_keys,
                                      static_cast<int32_t>(plan::counting_tiles(n)),
                                      plan::counting_passes(num_keys),
                                      reinterpret_cast<uint32_t*>(ws + layout.table),
                                      reinterpret_cast<uint32_t*>(ws + layout.temp),
                                      gate};
      run_counting_sort<ValueT>(args, stream);
      const bool odd = args.passes.passes % 2 != 0;
      sorted = odd ? args.keys1 : args.keys0;
      sorted_values = odd ? args.values1 : args.values0;
      counted = true;
    }
  }
  if (!counted) {
    TORCH_INTERNAL_ASSERT(gate == nullptr, "detops: a gated engine call must not take CUB's sort");
    // NB: radix sort is stable, so equal keys keep source order. Sort only the bits num_keys needs.
    cub::DoubleBuffer<KeyT> keys(reinterpret_cast<KeyT*>(ws + layout.keys[0]),
                                 reinterpret_cast<KeyT*>(ws + layout.keys[1]));
    cub::DoubleBuffer<ValueT> values(reinterpret_cast<ValueT*>(ws + layout.pos[0]),
                                     reinterpret_cast<ValueT*>(ws + layout.pos[1]));
    // NB: the temp pointer is never null (layout_for gives at least one byte): a null one would make this a size
    // query.
    C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(ws + layout.temp, bytes, keys, values, n, 0, bits, stream));
    sorted = keys.Current();
    sorted_values = values.Current();
  }

  // The long segments' scratch slots and the tiles' segment starts (none without tree levels: then no segment
  // is longer than one block, and every position is in the first tile).
  int32_t* seg_first = nullptr;
  int32_t* tile_start = nullptr;
  if (layout.levels > 0) {
    seg_first = reinterpret_cast<int32_t*>(ws + layout.seg_first);
    tile_start = reinterpret_cast<int32_t*>(ws + layout.tile_start);
    const auto blocks = static_cast<unsigned>((int64_t{n} + 255) / 256);
    long_segments_kernel<KeyT><<<blocks, 256, 0, stream>>>(sorted, n, num_keys, seg_first, tile_start,
                                                           reinterpret_cast<int32_t*>(ws + layout.num_slots), gate);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return {sorted, sorted_values, seg_first, tile_start};
}

void check_value_bytes(int64_t key_bytes, int64_t value_bytes) {
  TORCH_CHECK(value_bytes == 4 || (value_bytes == 8 && key_bytes == 4),
              "detops: the sort-reduce engine sorts 4-byte values, or 8-byte ones with 32-bit keys; got ", value_bytes,
              " bytes with ", key_bytes, "-byte keys");
}

}  // namespace

int64_t resident_blocks(const void* kernel, int threads, std::atomic<int64_t> (&cache)[C10_COMPILE_TIME_MAX_GPUS]) {
  const int device = c10::cuda::current_device();
  int64_t blocks = cache[device].load(std::memory_order_relaxed);
  if (blocks == 0) {
    int per_sm = 0;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
    blocks = std::max<int64_t>(1, int64_t{per_sm} * at::cuda::getCurrentDeviceProperties()->multiProcessorCount);
    cache[device].store(blocks, std::memory_order_relaxed);
  }
  return blocks;
}

bool cooperative_launch(cudaStream_t stream) {
  const char* value = std::getenv("DETOPS_COOPERATIVE");
  if (value != nullptr && std::string_view(value) == "0") return false;
  if (at::cuda::getCurrentDeviceProperties()->cooperativeLaunch == 0) return false;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  return capture == cudaStreamCaptureStatusNone;
}

bool launch_cooperative(const void* kernel, dim3 grid, dim3 block, void** args, cudaStream_t stream) {
  if (!cooperative_launch(stream)) return false;
  const cudaError_t launched = cudaLaunchCooperativeKernel(kernel, grid, block, args, 0, stream);
  if (launched == cudaErrorCooperativeLaunchTooLarge) {
    (void)cudaGetLastError();
    return false;
  }
  C10_CUDA_CHECK(launched);
  return true;
}

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
                             int64_t value_bytes, const int32_t* gate) {
  TORCH_CHECK(n > 0, "detops: the sort-reduce engine's plan needs at least one contribution");
  check_value_bytes(key_bytes, value_bytes);
  if (key_bytes == 8) return plan_typed<uint64_t, int32_t>(ws, layout, n, num_keys, gate);
  if (value_bytes == 8) return plan_typed<uint32_t, uint64_t>(ws, layout, n, num_keys, gate);
  return plan_typed<uint32_t, int32_t>(ws, layout, n, num_keys, gate);
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
