#include "ops/plan.h"

#include "ops/plan_record.h"

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

int64_t align(int64_t x) {
  return (x + kAlign - 1) / kAlign * kAlign;
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

int64_t predicted_cub_temp_bytes(int64_t n, int64_t key_bytes, int bits) {
  // The radix sort on a double buffer: histograms, look-back state and counters (onesweep), nothing beyond
  // its alignment for a single tile.
  int64_t sort = 1;
  if (n > kCubSingleTileItems) {
    const int64_t passes = ceil_div(bits, kOnesweepRadixBits);
    const int64_t portions = ceil_div(n, kOnesweepPortion);
    const int64_t blocks = ceil_div(std::min(n, kOnesweepPortion), onesweep_tile(key_bytes));
    sort = portions * passes * kOnesweepDigits * 4 + blocks * kOnesweepDigits * 4 + portions * passes * 4 + 3 * kAlign;
  }
  return sort;
}

Layout layout_for(const EngineCall& call, int64_t cub_temp_bytes) {
  Layout l;
  const int64_t n = call.n;
  const int64_t kb = call.key_bytes > 0 ? call.key_bytes : key_bytes_for(call.num_keys);
  int64_t at = 0;
  const auto carve = [&](int64_t bytes) {
    const int64_t offset = at;
    at += align(bytes);
    return offset;
  };
  const bool single = single_block(call);
  l.keys[0] = carve(n * kb);
  if (!single) l.keys[1] = carve(n * kb);
  const int64_t vb = sort_value_bytes(call);
  l.pos[0] = carve(n * vb);
  if (!single) l.pos[1] = carve(n * vb);
  l.levels = tree_levels(n);
  if (l.levels > 0) {
    l.seg_first = carve(n * 4);
    l.tile_start = carve((n / kBlock + 1) * 4);
    l.max_slots = n / 16 + 1;  // a segment longer than kBlock has ceil(len / kBlock) < len / 16 blocks
    l.slot_first = carve(l.max_slots * 4);
    l.slot_pos = carve(l.max_slots * 4);
    l.num_slots = carve(4);
    l.scratch = carve(l.max_slots * call.D * call.acc_bytes);
  }
  if (counting_sort(call)) {
    l.table_entries = counting_table_entries(call);
    l.table = carve(l.table_entries * 4);
  }
  if (!single) {
    l.temp_bytes = std::max<int64_t>(cub_temp_bytes, 1);
    l.temp = carve(l.temp_bytes);
  }
  if (buckets(call)) {
    l.bucket_counts = carve((call.num_keys + 2) * 4);
    l.bucket_cursor = carve(call.num_keys * 4);
  }
  l.total = at;
  return l;
}

// The pipeline of cuda/sort_reduce.cu and cuda/sort_reduce.cuh, step by step (docs/engine.md).
PlanSummary plan_for(const EngineCall& call) {
  PlanSummary s;
  if (call.n <= 0) return s;
  if (call.kind == kKernel) {
    s.path = kKernelPath;
    s.launches = call.n;
    s.memsets = call.num_keys;
    s.allocations = call.D;
    s.workspace_bytes = call.acc_bytes;
    s.bytes_moved = call.key_bytes;
    return s;
  }
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
  const int bits = sort_bits_for(call.num_keys, kb);
  const bool counting = counting_sort(call);
  const Layout l = layout_for(call, counting ? kCountingTempBytes : predicted_cub_temp_bytes(n, kb, bits));
  s.sort_bits = bits;
  s.levels = l.levels;
  s.value_bytes = sort_value_bytes(call);
  s.allocations = 1;
  s.workspace_bytes = l.total;
  if (single_block(call)) {
    // One launch: keys and the sort in registers, sorted keys and permutation written once and read by the
    // slots' step and level 0; the contributions; the results; the levels' scratch.
    s.path = Path::kSingleBlock;
    s.launches = 1;
    s.bytes_moved = n * (kb + 4) * 2 + n * D * acc + std::min(n, call.num_keys) * D * acc +
                    s.levels * 2 * (n / kBlock + 1) * D * acc;
    return s;
  }
  s.path = Path::kMulti;
  const auto add = [&](CubOps ops) {
    s.launches += ops.launches;
    s.memsets += ops.memsets;
  };
  const int64_t passes = n <= kCubSingleTileItems ? 1 : ceil_div(bits, kOnesweepRadixBits);
  const bool carry = carries_values(call);
  const int64_t vb = s.value_bytes;
  // The contributions, read once: by the key kernel in source order where the sort carries them, else by level 0
  // through the permutation.
  const int64_t contributions = n * D * acc;
  // The key kernel: keys and their values (source positions, or the contributions).
  s.launches += 1;
  s.bytes_moved += n * (kb + vb) + (carry ? contributions : 0);
  if (counting) {
    // The stable counting sort, one cooperative launch: per pass, the count reads the keys and writes the table,
    // the scan reads and writes it, the scatter reads the keys, their values and the table and writes both
    // sorted.
    s.launches += 1;
    s.bytes_moved += counting_passes(call.num_keys).passes * (n * kb + 3 * l.table_entries * 4 + 2 * n * (kb + vb));
  } else {
    // The stable radix sort of (key, value): a histogram read, then each pass reads and writes both.
    add(cub_radix_sort_ops(n, bits));
    s.bytes_moved += (n > kCubSingleTileItems ? n * kb : 0) + passes * 2 * n * (kb + vb);
  }
  // The long segments' slots (with tree levels): sorted keys read (3 per position, mostly cached: counted
  // once); a word per long segment written.
  if (s.levels > 0) {
    s.launches += 1;
    s.bytes_moved += n * kb;
  }
  // Level 0 (and the slot tables): keys (3 per position, mostly cached: counted once), the sorted values; the
  // contributions through the permutation unless the sort carried them; the results.
  s.launches += 1;
  s.bytes_moved += n * (kb + vb) + (carry ? 0 : contributions) + std::min(n, call.num_keys) * D * acc;
  // Levels 1..levels: one cooperative launch over the slots, a grid-wide barrier between levels.
  s.launches += s.levels > 0 ? 1 : 0;
  s.bytes_moved += s.levels * (2 * l.max_slots * 4 + 2 * (n / kBlock) * D * acc);
  if (buckets(call)) {
    // The buckets first, one cooperative launch; the multi-block path's launches above follow, gated (they return at
    // once unless a key has more than kBucketMaxCount contributions), so its bytes are not moved. The counts zeroed,
    // the keys' sources read and the counts raised, the counts read and the cursors written, the keys' sources again
    // and each cursor raised, a slot's position (and carried columns) written, then the counts, cursors, slots, the
    // contributions (read once: in step 3 where carried, else in step 4) and the results.
    const int64_t m = call.num_keys;
    const int64_t slot_bytes = n * (4 + (carry ? D * acc : 0));
    s.path = kBucketsPath;
    s.launches += 1;
    s.bytes_moved = (m + 2) * 4 + n * (kb + 4) + 2 * m * 4 + n * (kb + 4) + contributions + slot_bytes +
                    2 * m * 4 + slot_bytes + std::min(n, m) * D * acc;
  }
  return s;
}

bool record(const EngineCall& call) {
  if (!recorder.on) return false;
  recorder.calls.push_back(call);
  return recorder.plan_only;
}

bool recording() {
  return recorder.on;
}

bool plan_only() {
  return recorder.on && recorder.plan_only;
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
  return {static_cast<int64_t>(c.kind), c.n, c.num_keys, c.D, c.acc_bytes, c.key_bytes, c.gated};
}

EngineCall call_from_list(const std::vector<int64_t>& f) {
  TORCH_CHECK((f.size() == 6 || f.size() == 7) && f[0] >= 0 && f[0] <= 3,
              "detops: an engine call is [kind (0 sort_reduce, 1 for_each, 2 count, 3 kernel), n, num_keys, D, "
              "acc bytes, key bytes] and optionally [gated (0 or 1)], got ", f.size(), " fields");
  TORCH_CHECK(f.size() == 6 || f[6] == 0 || f[6] == 1, "detops: an engine call's gated field is 0 or 1, got ", f[6]);
  return {static_cast<Kind>(f[0]), f[1], f[2], f[3], f[4], f[5], f.size() == 7 ? f[6] : 0};
}

std::vector<int64_t> to_list(const PlanSummary& s) {
  return {static_cast<int64_t>(s.path), s.launches,  s.memsets,   s.stream_ops(), s.allocations,
          s.workspace_bytes,            s.bytes_moved, s.sort_bits, s.levels,       s.value_bytes};
}

}  // namespace detops::plan
