// The CUDA engine's plan for one engine call, on the host: which path it takes, how many stream operations
// (kernel launches, CUB's included, and memsets) and allocations it issues, how its workspace is laid out, and
// the bytes it is predicted to move. cuda::Engine (cuda/sort_reduce.cuh) picks its path and carves its
// workspace from this model, so the counts cannot drift from the code; tests count them without a GPU by
// recording the engine calls of an op's CPU twin (the same `*_compute<Engine>` makes the same calls on both
// engines). docs/engine.md explains the counting.
#pragma once

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
  int64_t levels = 0;           // tree levels above level 0 launched
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
// code (cub/device/dispatch/dispatch_radix_sort.cuh, dispatch_scan.cuh).
struct CubOps {
  int64_t launches = 0;
  int64_t memsets = 0;
};
// DeviceRadixSort::SortPairs: up to kCubSingleTileItems items, one single-tile kernel; otherwise onesweep:
// two memsets (counters, histograms), the histogram and exclusive-sum kernels, then for every 8-bit pass and
// every portion of up to 2^28 items one memset of the look-back state and one onesweep kernel.
constexpr int64_t kCubSingleTileItems = 256 * 19;
CubOps cub_radix_sort_ops(int64_t n, int bits);
// DeviceScan::InclusiveScan / ExclusiveSum: the tile-state init kernel and the scan kernel.
CubOps cub_scan_ops(int64_t n);

// The plan of one engine call.
PlanSummary plan_for(const EngineCall& call);

// Recording: while on (on this thread), every engine member appends its call. In plan-only mode the CPU
// engine then returns without computing: the op's checks and allocations run, its arithmetic does not.
// record() returns true when the caller must skip its work (plan-only mode).
bool record(const EngineCall& call);
void start_recording(bool plan_only);
std::vector<EngineCall> stop_recording();

// The fields of a call and of a summary as flat int64 lists (the private ops torch.ops.detops._plan_*).
std::vector<int64_t> to_list(const EngineCall& call);
EngineCall call_from_list(const std::vector<int64_t>& fields);
std::vector<int64_t> to_list(const PlanSummary& summary);

}  // namespace detops::plan
