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
  int64_t gated = 0;      // sort_reduce: 1 where the op carries a gate (gate_of, ops/contract.h), else 0
};

enum class Path : int64_t { kEmpty = 0, kGather = 1, kCount = 2, kSingleBlock = 3, kMulti = 4 };
// (5 is kKernelPath, ops/plan_record.h.) The multi-block path with the buckets first (buckets below).
inline constexpr Path kBucketsPath = static_cast<Path>(6);

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

// The stable counting sort (cuda/sort_reduce.cu, docs/engine.md step 2) in place of CUB's radix sort wherever the
// keys are 32-bit and the call takes the multi-block path: least significant digit first, in 1 to
// kCountingMaxPasses passes of at most kCountingDigitBits bits (sort_bits_for's bits split evenly), each a stable
// counting sort by its digit: a count per tile of kCountingTile contributions into a table of bins x tiles, the
// table's exclusive scan, a scatter. All the passes run in one cooperative launch (a grid-wide barrier between
// the steps), one launch per step where the device has no cooperative launch. 1 launch and no memset, where the
// radix sort takes 2 + passes launches and as many memsets for more than kCubSingleTileItems items.
constexpr int kCountingDigitBits = 10;
constexpr int64_t kCountingMaxBins = int64_t{1} << kCountingDigitBits;
constexpr int kCountingMaxPasses = 4;
constexpr int64_t kCountingTile = 4096;
// At most this many blocks: each scans one chunk of the table, and the scatter takes the chunks' totals into
// shared memory.
constexpr int64_t kCountingMaxGrid = 1024;
inline bool counting_sort(const EngineCall& call) {
  const int64_t key_bytes = call.key_bytes > 0 ? call.key_bytes : key_bytes_for(call.num_keys);
  return call.kind == Kind::kSortReduce && !single_block(call) && call.n <= INT32_MAX && key_bytes == 4;
}
// The passes of the counting sort of keys in [0, num_keys]: pass p sorts by the digit of `width` bits at shift
// p * width.
struct CountingPasses {
  int passes = 1;
  int width = 1;
};
inline CountingPasses counting_passes(int64_t num_keys) {
  const int bits = sort_bits_for(num_keys, 4);
  const int passes = (bits + kCountingDigitBits - 1) / kCountingDigitBits;
  return {passes, (bits + passes - 1) / passes};
}
// A key's digit at `shift`, and the bins of that pass: the digits keys in [0, num_keys] take (the top pass's
// fewer than 2^width). Used by the kernels (--expt-relaxed-constexpr) and the CPU emulation of their steps.
constexpr uint32_t counting_digit(uint32_t key, int shift, int width) {
  return (key >> shift) & ((uint32_t{1} << width) - 1u);
}
constexpr int32_t counting_bins(int64_t num_keys, int shift, int width) {
  return static_cast<int32_t>((num_keys >> shift) + 1 < (int64_t{1} << width) ? (num_keys >> shift) + 1
                                                                               : int64_t{1} << width);
}
// Tiles of the counting sort, and the entries of its table (bin-major: bin * tiles + tile) in its widest pass.
inline int64_t counting_tiles(int64_t n) {
  return (n + kCountingTile - 1) / kCountingTile;
}
inline int64_t counting_table_entries(const EngineCall& call) {
  const CountingPasses c = counting_passes(call.num_keys);
  return int64_t{counting_bins(call.num_keys, 0, c.width)} * counting_tiles(call.n);
}
// The scan of a pass's table in chunks, one per block of a grid of `grid`: chunk c holds entries [c * size,
// (c + 1) * size), each scanned alone, and its total, whose exclusive scan over the chunks the scatter adds.
constexpr int64_t counting_scan_chunk(int64_t entries, int64_t grid) {
  return (entries + grid - 1) / grid;
}
// The counting sort's temp storage: the chunks' totals.
constexpr int64_t kCountingTempBytes = kCountingMaxGrid * 4;

// The buckets (docs/engine.md, "Buckets"): where the keys are about as many as the contributions (at most
// kBucketsContributionsPerKey contributions per key on average, at most kBucketsKeysPerContribution keys per
// contribution), a multi-block call with 32-bit keys whose op has no gate of its own first puts each contribution in
// its destination's bucket, without a sort: one cooperative launch zeroes a count per key, counts, gives each key its
// run of slots, stores each contribution's source position (and its columns where the sort would carry them) in a
// slot of its key (an atomic add: any order), then folds each key's bucket in increasing source position. Where some
// key has more than kBucketMaxCount contributions, the last two steps do nothing and the multi-block path runs, gated
// on that (its kernels return at once otherwise).
constexpr int64_t kBucketMaxCount = 32;  // == kBlock: a bucket is one block of the contract's tree
constexpr int64_t kBucketsContributionsPerKey = 4;
constexpr int64_t kBucketsKeysPerContribution = 4;
inline bool buckets(const EngineCall& call) {
  return counting_sort(call) && call.gated == 0 &&
         call.n <= kBucketsContributionsPerKey * call.num_keys && call.num_keys <= kBucketsKeysPerContribution * call.n;
}

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
  int64_t temp = 0;          // the sort's temp storage (multi-block path only): CUB's radix sort's, or the counting
                             // sort's chunk totals
  int64_t temp_bytes = 0;
  int64_t max_slots = 0;     // static bound on scratch slots: n / 16 + 1
  int levels = 0;            // tree levels above level 0 in the worst case for n
  int64_t bucket_counts = 0;  // buckets(call): [num_keys + 2] int32, each key's count, then the flag (a count
                              // above kBucketMaxCount) and the slots taken; the buckets' slots are the second
                              // key and value buffers (keys[1]: positions, pos[1]: carried contributions), which
                              // the multi-block path uses only where the buckets do nothing
  int64_t bucket_cursor = 0;  // [num_keys] int32: each key's next slot
  int64_t total = 0;
};
Layout layout_for(const EngineCall& call, int64_t cub_temp_bytes);

// CUB's temp storage for a call, predicted (the CUDA engine queries the real size; docs/engine.md).
int64_t predicted_cub_temp_bytes(int64_t n, int64_t key_bytes, int bits);

// The plan of one engine call.
PlanSummary plan_for(const EngineCall& call);

// Recording: while on (on this thread), every engine member appends its call. In plan-only mode the CPU
// engine's sort_reduce and count then return without computing: the op's checks and allocations run, its
// reductions do not. for_each still runs (an op's host code may read what it wrote: median sorts its keys).
// record() returns true when the caller may skip its work (plan-only mode).
bool record(const EngineCall& call);
// Whether this thread records (for host code that computes a call only to record it).
bool recording();
void start_recording(bool plan_only);
std::vector<EngineCall> stop_recording();

// The fields of a call and of a summary as flat int64 lists (the private ops torch.ops.detops._plan_*).
std::vector<int64_t> to_list(const EngineCall& call);
EngineCall call_from_list(const std::vector<int64_t>& fields);
std::vector<int64_t> to_list(const PlanSummary& summary);

}  // namespace detops::plan
