// The CUDA engine's plan for one engine call, on the host: which path it takes, how many stream operations
// (kernel launches, CUB's included, and memsets) and allocations it issues, how its workspace is laid out, and
// the bytes it is predicted to move. cuda::Engine (cuda/sort_reduce.cuh) picks its path and carves its
// workspace from this model, so the counts cannot drift from the code; tests count them without a GPU by
// recording the engine calls of an op's CPU twin (the same `*_compute<Engine>` makes the same calls on both
// engines). docs/engine.md explains the counting.
#pragma once

#include <climits>
#include <cstdint>
#include <vector>

namespace detops::plan {

enum class Kind : int64_t { kSortReduce = 0, kForEach = 1, kCount = 2 };

// One call of an engine member, as both engines see it.
struct EngineCall {
  Kind kind = Kind::kSortReduce;
  int64_t n = 0;          // contributions (sort_reduce), elements (for_each), values (count)
  int64_t num_keys = 0;   // destinations (sort_reduce), bins (count), 0 (for_each)
  int64_t D = 1;          // columns per contribution (sort_reduce), 1 otherwise
  int64_t acc_bytes = 0;  // accumulator size (sort_reduce), 0 otherwise
  int64_t key_bytes = 0;  // sorted key width (sort_reduce: key_bytes_for(num_keys)), value width (count)
};

enum class Path : int64_t { kEmpty = 0, kGather = 1, kCount = 2, kSingleBlock = 3, kMulti = 4 };

struct PlanSummary {
  Path path = Path::kEmpty;
  int64_t launches = 0;         // kernels, those CUB launches included
  int64_t memsets = 0;          // cudaMemsetAsync calls (CUB's radix sort issues them)
  int64_t allocations = 0;      // caching-allocator requests of the engine (the op's own outputs not counted)
  int64_t workspace_bytes = 0;  // bytes the engine allocates (CUB's temp storage predicted)
  int64_t bytes_moved = 0;      // predicted global-memory traffic (docs/engine.md)
  int64_t sort_bits = 0;        // bits the radix sort sorts
  int64_t levels = 0;           // tree levels above level 0 (all in one launch)
  int64_t value_bytes = 0;      // bytes the radix sort carries with each key: 4 (the source position) or, where
                                // carries_values, the contribution's D columns
  int64_t stream_ops() const { return launches + memsets; }
};

// Width of the sorted keys: 32 bits unless num_keys (the sentinel of invalid contributions) needs more.
inline int64_t key_bytes_for(int64_t num_keys) {
  return num_keys >= (int64_t{1} << 32) - 1 ? 8 : 4;
}

// Bits the radix sort sorts: enough for keys in [0, num_keys] (num_keys marks invalid contributions).
inline int sort_bits_for(int64_t num_keys, int64_t key_bytes) {
  int end_bit = 1;
  while (end_bit < static_cast<int>(8 * key_bytes) && (static_cast<uint64_t>(num_keys) >> end_bit) != 0) ++end_bit;
  return end_bit;
}

// Stream operations of one CUB device-algorithm call (CCCL 3.0, sm_90 tunings), counted from its dispatch
// code (cub/device/dispatch/dispatch_radix_sort.cuh).
struct CubOps {
  int64_t launches = 0;
  int64_t memsets = 0;
};
// DeviceRadixSort::SortPairs: up to kCubSingleTileItems items, one single-tile kernel; otherwise onesweep:
// two memsets (counters, histograms), the histogram and exclusive-sum kernels, then for every 8-bit pass and
// every portion of up to 2^28 items one memset of the look-back state and one onesweep kernel.
constexpr int64_t kCubSingleTileItems = 256 * 19;
CubOps cub_radix_sort_ops(int64_t n, int bits);
// The single-block path: a call of at most kSingleBlockMaxN contributions and kSingleBlockMaxWork (position,
// column) pairs runs whole in one block of one launch (sort, slots, level 0 and the levels, cuda/sort_reduce.cuh).
// NB: the bounds keep one block's work at most ~128 (position, column) pairs per thread of 512 and its sort in
// registers (8 keys per thread); larger calls are faster spread over the device.
constexpr int64_t kSingleBlockThreads = 512;
constexpr int64_t kSingleBlockItems = 8;
constexpr int64_t kSingleBlockMaxN = kSingleBlockThreads * kSingleBlockItems;
constexpr int64_t kSingleBlockMaxWork = int64_t{1} << 16;
inline bool single_block(const EngineCall& call) {
  return call.kind == Kind::kSortReduce && call.n > 0 && call.n <= kSingleBlockMaxN &&
         call.n * call.D <= kSingleBlockMaxWork;
}

// The radix sort carries each contribution's D columns with its key, instead of its source position, where they
// fit in the 8 bytes of a sort value (D * acc_bytes of 4 or 8), the keys are 32-bit and the positions too: the
// key kernel computes them in source order, and level 0 reads them in sorted order instead of gathering them
// through the permutation (engine::SortedValues, cuda/sort_reduce_steps.h). Not on the single-block path (its
// sort is in registers) nor for a key chunk of a larger call (64-bit keys).
inline bool carries_values(const EngineCall& call) {
  const int64_t bytes = call.D * call.acc_bytes;
  const int64_t key_bytes = call.key_bytes > 0 ? call.key_bytes : key_bytes_for(call.num_keys);
  return call.kind == Kind::kSortReduce && !single_block(call) && call.n <= INT32_MAX && key_bytes == 4 &&
         (bytes == 4 || bytes == 8);
}
// Bytes of the radix sort's value per contribution.
inline int64_t sort_value_bytes(const EngineCall& call) {
  return carries_values(call) ? call.D * call.acc_bytes : 4;
}

// The stable counting sort (cuda/sort_reduce.cu, docs/engine.md step 2) in place of the radix sort, where the keys
// take at most kCountingMaxBins values (num_keys + 1: the invalid key num_keys is a bin too), are 32-bit, and the
// call takes the multi-block path: a count kernel (tiles of kCountingTile contributions, a table of bins x tiles
// counts), CUB's exclusive scan of the table in place (2 launches), a scatter kernel. 4 launches and no memset,
// where the radix sort takes 3 to 4 launches and as many memsets for 1 to 10 bits.
constexpr int64_t kCountingMaxBins = 1024;
constexpr int64_t kCountingTile = 4096;
inline bool counting_sort(const EngineCall& call) {
  const int64_t key_bytes = call.key_bytes > 0 ? call.key_bytes : key_bytes_for(call.num_keys);
  return call.kind == Kind::kSortReduce && !single_block(call) && call.n <= INT32_MAX && key_bytes == 4 &&
         call.num_keys + 1 <= kCountingMaxBins;
}
// Tiles of the counting sort, and the entries of its table (bin-major: bin * tiles + tile).
inline int64_t counting_tiles(int64_t n) {
  return (n + kCountingTile - 1) / kCountingTile;
}
inline int64_t counting_table_entries(const EngineCall& call) {
  return (call.num_keys + 1) * counting_tiles(call.n);
}
// CUB's DeviceScan (CCCL 3.0, dispatch_scan.cuh): an init kernel and a scan kernel.
constexpr int64_t kCubScanLaunches = 2;

// The workspace of one sort-reduce call: one allocation, carved at kAlign-aligned offsets (bytes).
constexpr int64_t kAlign = 256;
struct Layout {
  int64_t keys[2] = {0, 0};  // the radix sort's double buffer of keys: [n] x key_bytes each (single block: [0])
  int64_t pos[2] = {0, 0};   // and of its values: [n] int32 positions (the permutation once sorted), or [n][D]
                             // contributions where carries_values (single block: positions, [0] only)
  int64_t seg_first = 0;     // [n] int32: each long segment's first scratch slot, at its head (levels > 0 only,
                             // as the rest)
  int64_t tile_start = 0;    // [n / kBlock + 1] int32: the segment start of each tile's first position
  int64_t slot_first = 0;    // [max_slots] int32
  int64_t slot_pos = 0;      // [max_slots] int32
  int64_t num_slots = 0;     // [1] int32
  int64_t scratch = 0;       // [max_slots * D] accumulators of the tree levels
  int64_t table = 0;         // the counting sort's [bins x tiles] uint32 counts, then first positions (counting_sort)
  int64_t table_entries = 0;
  int64_t temp = 0;          // CUB's temp storage (multi-block path only): the radix sort's, or the counting
                             // sort's scan's
  int64_t temp_bytes = 0;
  int64_t max_slots = 0;     // static bound on scratch slots: n / 16 + 1
  int levels = 0;            // tree levels above level 0 in the worst case for n
  int64_t total = 0;
};
Layout layout_for(const EngineCall& call, int64_t cub_temp_bytes);

// CUB's temp storage for a call, predicted (the CUDA engine queries the real size; docs/engine.md).
int64_t predicted_cub_temp_bytes(int64_t n, int64_t key_bytes, int bits);
int64_t predicted_cub_scan_temp_bytes(int64_t items);

// The plan of one engine call.
PlanSummary plan_for(const EngineCall& call);

// Recording: while on (on this thread), every engine member appends its call. In plan-only mode the CPU
// engine's sort_reduce and count then return without computing: the op's checks and allocations run, its
// reductions do not. for_each still runs (an op's host code may read what it wrote: median sorts its keys).
// record() returns true when the caller may skip its work (plan-only mode).
bool record(const EngineCall& call);
void start_recording(bool plan_only);
std::vector<EngineCall> stop_recording();

// The fields of a call and of a summary as flat int64 lists (the private ops torch.ops.detops._plan_*).
std::vector<int64_t> to_list(const EngineCall& call);
EngineCall call_from_list(const std::vector<int64_t>& fields);
std::vector<int64_t> to_list(const PlanSummary& summary);

}  // namespace detops::plan
