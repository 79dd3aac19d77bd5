#include "ops/plan.h"

#include "ops/contract.h"

#include <c10/util/Exception.h>

#include <algorithm>

namespace detops::plan {
namespace {

constexpr int64_t kOnesweepRadixBits = 8;
constexpr int64_t kOnesweepDigits = int64_t{1} << kOnesweepRadixBits;
constexpr int64_t kOnesweepPortion = (int64_t{1} << 28) - 1;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Items per onesweep tile (sm_90 tuning: 384 threads, 23 or 30 items each for int32 values).
int64_t onesweep_tile(int64_t key_bytes) {
  return 384 * (key_bytes == 8 ? 30 : 23);
}

thread_local struct Recorder {
  bool on = false;
  bool plan_only = false;
  std::vector<EngineCall> calls;
} recorder;

}  // namespace

CubOps cub_radix_sort_ops(int64_t n, int bits) {
  if (n <= 0) return {};
  if (n <= kCubSingleTileItems) return {1, 0};
  const int64_t passes = ceil_div(bits, kOnesweepRadixBits);
  const int64_t portions = ceil_div(n, kOnesweepPortion);
  return {2 + passes * portions, 2 + passes * portions};
}

CubOps cub_scan_ops(int64_t n) {
  if (n <= 0) return {};
  return {2, 0};
}

// CUB's temp storage for SortPairs with separate input and output arrays (predicted: histograms, look-back
// state, counters, and the alternate key/value arrays CUB keeps when it may not overwrite the input).
int64_t cub_radix_sort_temp(int64_t n, int bits, int64_t key_bytes) {
  if (n <= kCubSingleTileItems) return 1;
  const int64_t passes = ceil_div(bits, kOnesweepRadixBits);
  const int64_t portions = ceil_div(n, kOnesweepPortion);
  const int64_t blocks = ceil_div(std::min(n, kOnesweepPortion), onesweep_tile(key_bytes));
  int64_t bytes = portions * passes * kOnesweepDigits * 4 + blocks * kOnesweepDigits * 4 + portions * passes * 4;
  if (passes > 1) bytes += n * (key_bytes + 4);
  return bytes;
}

// CUB's temp storage for a scan of int32 (predicted: one tile descriptor of 8 bytes per tile of 128 x 15 items,
// plus the look-back window).
int64_t cub_scan_temp(int64_t n) {
  return (ceil_div(n, 128 * 15) + 32) * 8;
}

// The pipeline of cuda/sort_reduce.cu and cuda/sort_reduce.cuh, step by step (docs/engine.md).
PlanSummary plan_for(const EngineCall& call) {
  PlanSummary s;
  if (call.n <= 0) return s;
  switch (call.kind) {
    case Kind::kForEach:
      s.path = Path::kGather;
      s.launches = 1;
      return s;
    case Kind::kCount:
      s.path = Path::kCount;
      s.launches = 1;
      s.bytes_moved = call.n * call.key_bytes + call.n * 8;
      return s;
    case Kind::kSortReduce:
      break;
  }
  if (call.D <= 0) return s;
  const int64_t n = call.n;
  const int64_t kb = call.key_bytes > 0 ? call.key_bytes : key_bytes_for(call.num_keys);
  const int64_t D = call.D;
  const int64_t acc = call.acc_bytes;
  s.path = Path::kMulti;
  s.sort_bits = sort_bits_for(call.num_keys, kb);
  s.levels = tree_levels(n);
  const int64_t max_slots = n / 16 + 1;
  const auto add = [&](CubOps ops) {
    s.launches += ops.launches;
    s.memsets += ops.memsets;
  };
  const auto alloc = [&](int64_t bytes) {
    ++s.allocations;
    s.workspace_bytes += bytes;
  };
  const int64_t passes = n <= kCubSingleTileItems ? 1 : ceil_div(s.sort_bits, kOnesweepRadixBits);

  // Keys (make_keys_kernel), positions (iota_kernel).
  alloc(n * kb);
  s.launches += 1;
  s.bytes_moved += n * kb;
  alloc(n * 4);
  s.launches += 1;
  s.bytes_moved += n * 4;
  // Stable radix sort of (key, position): sorted keys, permutation, temp storage.
  alloc(n * kb);
  alloc(n * 4);
  alloc(cub_radix_sort_temp(n, static_cast<int>(s.sort_bits), kb));
  add(cub_radix_sort_ops(n, static_cast<int>(s.sort_bits)));
  s.bytes_moved += (n > kCubSingleTileItems ? n * kb : 0) + passes * 2 * n * (kb + 4);
  // Head values (head_kernel), max-scanned into segment starts.
  s.launches += 1;
  s.bytes_moved += n * kb + n * 4;
  alloc(n * 4);
  alloc(cub_scan_temp(n));
  add(cub_scan_ops(n));
  s.bytes_moved += 2 * n * 4;
  if (s.levels > 0) {
    // Long-leader flags, their exclusive sum into slots, the slot tables.
    s.launches += 1;
    s.bytes_moved += n * kb + 2 * n * 4;
    alloc(n * 4);
    alloc(cub_scan_temp(n));
    add(cub_scan_ops(n));
    s.bytes_moved += 2 * n * 4;
    alloc(max_slots * 4);
    alloc(max_slots * 4);
    alloc(4);
    s.launches += 1;  // fill_slots_kernel
    s.bytes_moved += 3 * n * 4;
    alloc(max_slots * D * acc);  // scratch of the tree levels
  }
  // Level 0: sorted keys, permutation, segment starts (and slots) per position; the contributions; the results.
  s.launches += 1;
  s.bytes_moved += n * kb + n * 4 * (s.levels > 0 ? 3 : 2) + n * D * acc + std::min(n, call.num_keys) * D * acc;
  // Levels 1..levels, one launch each over the slots.
  s.launches += s.levels;
  s.bytes_moved += s.levels * (2 * max_slots * 4 + 2 * (n / kBlock) * D * acc);
  return s;
}

bool record(const EngineCall& call) {
  if (!recorder.on) return false;
  recorder.calls.push_back(call);
  return recorder.plan_only;
}

void start_recording(bool plan_only) {
  recorder.on = true;
  recorder.plan_only = plan_only;
  recorder.calls.clear();
}

std::vector<EngineCall> stop_recording() {
  recorder.on = false;
  recorder.plan_only = false;
  std::vector<EngineCall> calls;
  calls.swap(recorder.calls);
  return calls;
}

std::vector<int64_t> to_list(const EngineCall& c) {
  return {static_cast<int64_t>(c.kind), c.n, c.num_keys, c.D, c.acc_bytes, c.key_bytes};
}

EngineCall call_from_list(const std::vector<int64_t>& f) {
  TORCH_CHECK(f.size() == 6 && f[0] >= 0 && f[0] <= 2,
              "detops: an engine call is [kind (0 sort_reduce, 1 for_each, 2 count), n, num_keys, D, acc bytes, "
              "key bytes], got ", f.size(), " fields");
  return {static_cast<Kind>(f[0]), f[1], f[2], f[3], f[4], f[5]};
}

std::vector<int64_t> to_list(const PlanSummary& s) {
  return {static_cast<int64_t>(s.path), s.launches,  s.memsets,   s.stream_ops(), s.allocations,
          s.workspace_bytes,            s.bytes_moved, s.sort_bits, s.levels};
}

}  // namespace detops::plan
