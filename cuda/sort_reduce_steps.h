// The per-thread steps of the CUDA sort-reduce engine, as __host__ __device__ functions: the kernels in
// cuda/sort_reduce.cu and cuda/sort_reduce.cuh call them once per (position or slot, column), and
// tests/cpp/test_engine_schedule.cpp runs them on the CPU in shuffled orders to show that the parallel
// schedule gives the contract's bits (docs/order_contract.md) whatever order the threads run in.
#pragma once

#include "ops/contract.h"
#include "ops/plan.h"

#include <cstdint>

namespace detops {

// The CUDA engine's positions (sorted positions, permutation, segment starts, slots) are int32: a call
// takes at most this many contributions. Sums that can pass it (s0 + kBlock) are formed in 64 bits below.
constexpr int64_t kMaxContributions = (int64_t{1} << 31) - 1;

}  // namespace detops

namespace detops::engine {

// Segments and scratch slots, without a scan. A sorted position's segment is the run of its key; a segment of
// a valid key longer than one block keeps its block sums in ceil(len / kBlock) contiguous scratch slots.
// Before level 0, one pass over the sorted positions (long_segment_slots and tile_step on the single-block
// path; the multi-block kernel runs the warp form below) lets the head of each such segment take its slots from
// a counter (an atomic add on the GPU) and record the first one at its own position (seg_first[head]), and
// records, for every tile of kBlock positions, the start of the segment that holds its first position
// (tile_start). A level-0 position then learns whether it leads a block, and which slot, from a few loads
// (level0_block). NB: which slots a segment gets depends on the order in which the heads reach the counter,
// but only where its block sums are kept: level 0 and every level address a segment's slots from its first
// one, so the tree and the bits do not depend on it.

// Scratch slots of a segment of `len` contributions: one per block if it is longer than one block, none
// otherwise. The segment of invalid contributions (key num_keys, sorted last) gets none: level 0 skips it,
// so no level above sees it. NB: blocks start at multiples of kBlock from the segment start.
C10_HOST_DEVICE inline int32_t segment_slots(int64_t len, bool valid) {
  return (valid && len > kBlock) ? static_cast<int32_t>((len + kBlock - 1) / kBlock) : 0;
}

// The first sorted position of the segment that holds p (keys[p] == key): steps back of 1, 2, 4, ... until a
// position holds another key (or none is left), then a binary search between the two; about 2 log2(p - start)
// loads.
template <typename KeyT>
C10_HOST_DEVICE inline int32_t segment_start(const KeyT* keys, int32_t p, KeyT key) {
  int64_t hi = p;   // keys[hi] == key
  int64_t lo = -1;  // keys[lo] != key, or lo == -1
  for (int64_t step = 1;; step *= 2) {
    const int64_t probe = hi - step;
    if (probe < 0) break;
    if (keys[probe] != key) {
      lo = probe;
      break;
    }
    hi = probe;
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (keys[mid] == key) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return static_cast<int32_t>(hi);
}

// One past the last sorted position of the segment that starts at p, where p + kBlock < n and
// keys[p + kBlock] == key: steps forward of kBlock, 2 kBlock, 4 kBlock, ..., then a binary search.
template <typename KeyT>
C10_HOST_DEVICE inline int32_t segment_end(const KeyT* keys, int32_t n, int32_t p, KeyT key) {
  int64_t lo = int64_t{p} + kBlock;  // keys[lo] == key
  int64_t hi = n;                    // keys[hi] != key, or hi == n
  for (int64_t step = kBlock;; step *= 2) {
    const int64_t probe = lo + step;
    if (probe >= n) break;
    if (keys[probe] != key) {
      hi = probe;
      break;
    }
    lo = probe;
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (keys[mid] == key) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return static_cast<int32_t>(hi);
}

// Once per sorted position, before level 0: the scratch slots sorted position p takes, nonzero only at the
// head of a long segment of a valid key (segment_slots). The caller takes them from the counter and records
// the first at seg_first[p].
template <typename KeyT>
C10_HOST_DEVICE inline int32_t long_segment_slots(const KeyT* keys, int32_t n, int64_t num_keys, int32_t p) {
  const KeyT key = keys[p];
  if (p > 0 && keys[p - 1] == key) return 0;
  if (static_cast<int64_t>(key) >= num_keys) return 0;
  if (int64_t{p} + kBlock >= n || keys[p + kBlock] != key) return 0;
  return segment_slots(int64_t{segment_end(keys, n, p, key)} - p, true);
}

// Once per sorted position, before level 0: the first position of each tile of kBlock positions records the
// start of its segment. NB: one search per tile, not per position: for a segment of m positions, m / kBlock
// searches of about 2 log2(m) loads.
template <typename KeyT>
C10_HOST_DEVICE inline void tile_step(const KeyT* keys, int32_t p, int32_t* tile_start) {
  if (p % kBlock == 0) tile_start[p / kBlock] = segment_start(keys, p, keys[p]);
}

// The multi-block kernel's form of the pass above (cuda/sort_reduce.cu, long_segments_kernel): a warp per tile
// of kBlock positions, whose lanes load together what the searches above load one after another.
// lanes.ballot(f) is the mask of the lanes l in [0, kBlock) for which f(l) holds, each lane evaluating f once: a
// warp's __ballot_sync on the device, SerialLanes on the CPU. The results are functions of the keys alone.
struct SerialLanes {
  template <typename F>
  C10_HOST_DEVICE uint32_t ballot(const F& f) const {
    uint32_t mask = 0;
    for (int l = 0; l < kBlock; ++l) {
      if (f(l)) mask |= uint32_t{1} << l;
    }
    return mask;
  }
};

C10_HOST_DEVICE inline int popcount32(uint32_t mask) {
#ifdef __CUDA_ARCH__
  return __popc(mask);
#else
  return __builtin_popcount(mask);
#endif
}

// The first x in (lo, hi] with pred(x), where pred is false and then true over (lo, hi) and hi counts as true
// (it is never probed). Each round the lanes probe kBlock evenly spaced points at once and keep the gap
// between the last false and the first true: ceil(log32(hi - lo)) rounds of one load per lane.
template <typename Lanes, typename Pred>
C10_HOST_DEVICE inline int64_t first_true(const Lanes& lanes, int64_t lo, int64_t hi, const Pred& pred) {
  while (hi - lo > 1) {
    const int64_t step = (hi - lo + kBlock - 1) / kBlock;
    // The lanes whose probe is false form a prefix (pred is monotone): f of them.
    const int f = popcount32(lanes.ballot([&](int l) {
      const int64_t x = lo + (l + 1) * step;
      return x < hi && !pred(x);
    }));
    const int64_t next = lo + (f + 1) * step;
    if (next < hi) hi = next;
    lo += f * step;
  }
  return hi;
}

// One past the last sorted position of the run of `key` that holds p: lane l probes p + 2^l (the lanes that
// still see the key are a prefix, k of them, as n <= 2^31), then first_true between p + 2^(k-1) and p + 2^k.
template <typename KeyT, typename Lanes>
C10_HOST_DEVICE inline int32_t segment_end(const KeyT* keys, int32_t n, int32_t p, KeyT key, const Lanes& lanes) {
  const int k = popcount32(lanes.ballot([&](int l) {
    const int64_t x = int64_t{p} + (int64_t{1} << l);
    return x < n && keys[x] == key;
  }));
  const int64_t lo = int64_t{p} + (k == 0 ? 0 : (int64_t{1} << (k - 1)));
  const int64_t hi = int64_t{p} + (int64_t{1} << k) < n ? int64_t{p} + (int64_t{1} << k) : int64_t{n};
  return static_cast<int32_t>(first_true(lanes, lo, hi, [&](int64_t x) { return keys[x] != key; }));
}

// Whether sorted position p heads a run of more than kBlock positions (of any key: the invalid one too).
template <typename KeyT>
C10_HOST_DEVICE inline bool long_run_head(const KeyT* keys, int32_t n, int32_t p) {
  const KeyT key = keys[p];
  return (p == 0 || keys[p - 1] != key) && int64_t{p} + kBlock < n && keys[p + kBlock] == key;
}

// The start of the segment holding the tile's first position q, where it began at most kBlock - 1 positions
// before q: lane l probes q - 1 - l, and the k lanes that see q's key (a prefix) put the start at q - k; -1
// where all do (the run began kBlock or more before q, so its head is a long_run_head: tiles_inside).
template <typename KeyT, typename Lanes>
C10_HOST_DEVICE inline int32_t near_tile_start(const KeyT* keys, int32_t q, const Lanes& lanes) {
  const KeyT key = keys[q];
  const int k = popcount32(lanes.ballot([&](int l) {
    const int64_t x = int64_t{q} - 1 - l;
    return x >= 0 && keys[x] == key;
  }));
  return k == kBlock ? -1 : q - k;
}

// The tiles whose start the head of a long run [head, end) records: those whose first position lies in
// [head + kBlock, end), the ones near_tile_start leaves. NB: each tile's start is written once, by one of the
// two.
struct TileRange {
  int64_t begin;
  int64_t end;
};

C10_HOST_DEVICE inline TileRange tiles_inside(int32_t head, int32_t end) {
  return {(int64_t{head} + 2 * kBlock - 1) / kBlock, (int64_t{end} + kBlock - 1) / kBlock};
}

// Items a leader loads before folding them, at level 0 and above (grouped_fold; kBlock is a multiple).
constexpr int kLoadGroup = 8;

// The block of up to kBlock contributions that sorted position p leads at level 0, the same for every column:
// count is 0 where p leads none (not at a multiple of kBlock from its segment start, or the invalid key);
// slot is the scratch slot of a block of a long segment and first the segment's first slot, both -1 where the
// block is the whole segment (finished at level 0).
struct Level0Block {
  int64_t key;
  int32_t count;
  int32_t slot;
  int32_t first;
};

// The stable counting sort (plan::counting_sort; counting_sort_kernel in cuda/sort_reduce.cu), one pass per
// digit (plan::counting_passes), least significant first. In each pass a block of kCountWarps warps takes a tile
// of plan::kCountingTile contributions; warp w takes kCountChunks chunks of kBlock consecutive ones, after those
// of warps 0 .. w-1, lane l the l-th of each chunk. Each warp counts its part per bin (the pass's digit) in its
// own row (chunk by chunk: the lanes of a chunk that hold one digit find each other, __match_any_sync on the
// device, and the first of them adds their number); the count step sums a tile's rows into the table, bin-major
// (bin * tiles + tile), whose exclusive scan (chunk by chunk, plan::counting_scan_chunk, then the chunks' totals)
// gives each (bin, tile) the first sorted position of its keys. The scatter step counts again, turns each row
// into the first position of the warp's keys of each bin (the tile's, plus the counts of the warps before it),
// then walks its chunks again: a lane's position is its bin's next one plus its rank among the chunk's lanes of
// its digit, and the first of them moves the bin's next position past them. NB: so equal digits keep their order
// across tiles (the scan), warps (the rows' prefix), chunks (in turn) and lanes (the rank): each pass is stable,
// so the sort by all the digits is stable, as the radix sort.
constexpr int kCountWarps = 8;
constexpr int kCountChunks = static_cast<int>(plan::kCountingTile / kCountWarps / kBlock);
static_assert(kCountChunks * kCountWarps * kBlock == plan::kCountingTile, "a tile is whole chunks of every warp");

C10_HOST_DEVICE inline int64_t count_position(int64_t tile, int warp, int chunk, int lane) {
  return tile * plan::kCountingTile + (int64_t{warp} * kCountChunks + chunk) * kBlock + lane;
}

// Lane l's rank among the lanes of its chunk that hold its key (peers, a mask with bit l set): 0 for the first.
C10_HOST_DEVICE inline int peer_rank(uint32_t peers, int lane) {
  return popcount32(peers & ((uint32_t{1} << lane) - 1u));
}

// Contributions in the block that starts at sorted position p with key `key`: the positions from p on that
// hold key, at most kBlock of them (keys are sorted). NB: the block's last possible position and p + 1 are
// loaded together and settle a full block and a single contribution; a block in between takes a binary
// search (at most 5 loads), not a scan of kBlock keys. Keys: the sorted keys (a pointer, or a shared-memory
// window of them, WindowKeys), read at p + 1 .. p + kBlock - 1 only.
template <typename Keys, typename KeyT>
C10_HOST_DEVICE inline int32_t block_count(const Keys& keys, int32_t n, int32_t p, KeyT key) {
  const int32_t span = static_cast<int32_t>((int64_t{p} + kBlock <= n ? int64_t{kBlock} : int64_t{n} - p) - 1);
  const bool full = keys[p + span] == key;
  const bool single = span == 0 || keys[p + 1] != key;
  if (full) return span + 1;
  if (single) return 1;
  // keys[p + 1] == key != keys[p + span]: the first offset whose key differs is in (1, span].
  int32_t lo = 2, hi = span;
  while (lo < hi) {
    const int32_t mid = (lo + hi) / 2;
    if (keys[p + mid] == key) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// A position leads a block if it heads its segment, or if its segment started a multiple of kBlock before it.
// Its key, the key before it and the key at the start of its tile settle most positions: a head; a position
// whose segment started inside its tile (so less than kBlock before it) leads nothing; the others take their
// segment's start from the tile's (tile_start, not read in the first tile, so it may be null for n <= kBlock).
// A long segment's leader takes its slot from the first one its head recorded (seg_first). Keys and Tiles:
// pointers, or shared-memory windows (WindowKeys, WindowTiles); keys are read at p - 1 .. p + kBlock and at the
// start of p's tile only, tile starts at p's tile only.
template <typename Keys, typename Tiles>
C10_HOST_DEVICE inline Level0Block level0_block(const Keys& keys, const int32_t* seg_first, const Tiles& tile_start,
                                                int32_t n, int64_t num_keys, int32_t p) {
  constexpr Level0Block kNone{0, 0, -1, -1};
  const auto key = keys[p];
  // Invalid contributions are sorted last and never written.
  if (static_cast<int64_t>(key) >= num_keys) return kNone;
  int32_t s0 = p;
  if (p > 0 && keys[p - 1] == key) {
    if (keys[p - p % kBlock] != key) return kNone;  // its segment started inside its tile, after the tile's start
    s0 = p < kBlock ? 0 : tile_start[p / kBlock];  // the first tile starts its first segment
    if ((p - s0) % kBlock != 0) return kNone;
  }
  // A leader past its segment's head is at least kBlock into it: the segment is long.
  const bool is_long = p > s0 || (int64_t{p} + kBlock < n && keys[p + kBlock] == key);
  const int32_t first = is_long ? seg_first[s0] : -1;
  const int32_t slot = is_long ? first + (p - s0) / kBlock : -1;
  return {static_cast<int64_t>(key), block_count(keys, n, p, key), slot, first};
}

// Once per block leader (level 0's first column): a long segment's block records, at its slot, the segment's
// first slot and its own position, which the levels above read.
C10_HOST_DEVICE inline void record_slot(const Level0Block& b, int32_t p, int32_t* slot_first, int32_t* slot_pos) {
  if (b.slot < 0) return;
  slot_first[b.slot] = b.first;
  slot_pos[b.slot] = p;
}

// Where level 0 takes the contribution at a sorted position. By default through the permutation: the op's
// contribution at the source position (a gather). Where a call's contributions fit in the 8 bytes per position
// the radix sort can carry (plan::carries_values), the key kernel stores them in source order
// (store_contributions) and the sort moves them with their keys instead of the positions: level 0 then reads
// them in sorted order, with no gather. NB: the same values either way, folded in the same order.
template <typename acc_t>
struct SortedValues {
  const acc_t* values;  // [n][D], in sorted order
};

template <typename acc_t, typename Op>
C10_HOST_DEVICE inline acc_t sorted_contribution(const Op& op, const int32_t* perm, int32_t q, int64_t /*D*/,
                                                 int64_t c) {
  return op.contribution(perm[q], c);
}

template <typename acc_t, typename Op>
C10_HOST_DEVICE inline acc_t sorted_contribution(const Op& /*op*/, const SortedValues<acc_t>& sorted, int32_t q,
                                                 int64_t D, int64_t c) {
  return sorted.values[int64_t{q} * D + c];
}

// The key kernel's step where the sort carries the contributions: source position i's D columns, computed only
// where its key is valid (a skipped or invalid contribution is never read, and may not be computable: its
// columns are zeros). The kernel computes carried_contribution for several positions before it stores them.
template <typename acc_t, typename Op>
C10_HOST_DEVICE inline acc_t carried_contribution(const Op& op, int64_t i, bool valid, int64_t c) {
  return valid ? op.contribution(i, c) : acc_t{};
}

template <typename acc_t, typename Op>
C10_HOST_DEVICE inline void store_contributions(const Op& op, int64_t i, bool valid, int64_t D, acc_t* values) {
  for (int64_t c = 0; c < D; ++c) values[i * D + c] = carried_contribution<acc_t>(op, i, valid, c);
}

// Columns of a carried contribution at most (plan::carries_values: 4 or 8 bytes, of 4-byte accumulators at the
// least).
constexpr int kMaxCarriedColumns = 2;

// fold_block's left fold of get(0), ..., get(count - 1), count in [1, kBlock], with the items loaded kLoadGroup at
// a time before they are folded. NB: the loads are independent instead of one chain, and the fold is fold_block's,
// in the same order: the same bits.
template <typename acc_t, typename Get, typename Combine>
C10_HOST_DEVICE inline acc_t grouped_fold(const Get& get, int count, const Combine& combine) {
  static_assert(kBlock % kLoadGroup == 0, "grouped_fold loads whole groups");
  acc_t s{};
  for (int g = 0; g < count; g += kLoadGroup) {
    acc_t v[kLoadGroup];
#pragma unroll
    for (int j = 0; j < kLoadGroup; ++j) {
      if (g + j < count) v[j] = get(g + j);
    }
#pragma unroll
    for (int j = 0; j < kLoadGroup; ++j) {
      if (g + j < count) s = g + j == 0 ? v[j] : combine(s, v[j]);
    }
  }
  return s;
}

// Level 0's fold of block b (led by sorted position p) in column c: a segment of one block is finished here,
// longer ones leave their block sums in scratch. src gives the contributions (sorted_contribution), loaded a group
// at a time (grouped_fold).
template <typename acc_t, typename Op, typename Src>
C10_HOST_DEVICE inline void level0_fold(const Op& op, const Src& src, const Level0Block& b, int64_t D,
                                        acc_t* scratch, int32_t p, int64_t c) {
  const acc_t s = grouped_fold<acc_t>([&](int i) { return sorted_contribution<acc_t>(op, src, p + i, D, c); }, b.count,
                                      combine_of_t<Op>());
  if (b.slot >= 0) {
    scratch[int64_t{b.slot} * D + c] = s;
  } else {
    op.finalize(b.key, c, s);
  }
}

// Level 0 for sorted position p and column c: the leader of each block folds it, and records its slot in the
// first column. The kernels that run many columns per position take level0_block once and level0_fold per
// column instead.
template <typename acc_t, typename KeyT, typename Op, typename Src>
C10_HOST_DEVICE inline void level0_step(const Op& op, const KeyT* keys, const Src& src, const int32_t* seg_first,
                                        const int32_t* tile_start, int32_t n, int64_t num_keys, int64_t D,
                                        acc_t* scratch, int32_t* slot_first, int32_t* slot_pos, int32_t p, int64_t c) {
  const Level0Block b = level0_block(keys, seg_first, tile_start, n, num_keys, p);
  if (b.count == 0) return;
  if (c == 0) record_slot(b, p, slot_first, slot_pos);
  level0_fold<acc_t>(op, src, b, D, scratch, p, c);
}

// Level 0 from a window in shared memory (level0_window_kernel, the calls whose sort carries their contributions:
// at most kWindowValueBytes per position). A block of kWindow threads takes the kWindow sorted positions from
// `base` (a multiple of kWindow), one each. Everything their block facts and folds read lies within kBlock
// positions of them (level0_block, block_count), so the block first loads, each thread a few independent words,
// the keys of positions base - 1 .. base + kWindow + kBlock - 1, the carried contributions of base .. base +
// kWindow + kBlock - 2 and the block's tile starts (window_load); then each position takes its facts and its
// fold from there (window_level0_step). NB: the same facts and the same left fold as level0_step's, from copies
// of the same words: the bits cannot differ.
constexpr int32_t kWindow = 256;
constexpr int32_t kWindowKeys = kWindow + kBlock + 1;
constexpr int32_t kWindowValues = kWindow + kBlock - 1;
constexpr int32_t kWindowTiles = kWindow / kBlock;
constexpr int64_t kWindowValueBytes = 8;
static_assert(kWindow % kBlock == 0, "a window holds whole tiles");

// The window's keys as level0_block reads them: keys[p] for p in [base - 1, base + kWindow + kBlock).
template <typename KeyT>
struct WindowKeys {
  const KeyT* keys;
  int32_t base;

  C10_HOST_DEVICE KeyT operator[](int64_t p) const { return keys[p - base + 1]; }
};

// The window's tile starts: tile_start[t] for the window's kWindowTiles tiles.
struct WindowTiles {
  const int32_t* starts;
  int32_t first_tile;

  C10_HOST_DEVICE int32_t operator[](int64_t t) const { return starts[t - first_tile]; }
};

// The window's carried contributions: position q's D columns for q in [base, base + kWindowValues).
template <typename acc_t>
struct WindowValues {
  const acc_t* values;
  int32_t base;
};

template <typename acc_t, typename Op>
C10_HOST_DEVICE inline acc_t sorted_contribution(const Op& /*op*/, const WindowValues<acc_t>& window, int32_t q,
                                                 int64_t D, int64_t c) {
  return window.values[(int64_t{q} - window.base) * D + c];
}

// Thread t's share of loading the window from `base`: the keys at window indices t and t + kWindow, the carried
// contributions of the same positions where the window holds them, and tile start t. Positions outside [0, n)
// are left unwritten (level0_block never reads them); so are the tile starts without tree levels (tile_start
// null: n <= kBlock, and only the first tile, which reads none). NB: every load is independent of the others.
template <typename acc_t, typename KeyT>
C10_HOST_DEVICE inline void window_load(const KeyT* keys, const SortedValues<acc_t>& src, const int32_t* tile_start,
                                        int32_t n, int64_t D, int32_t base, int t, KeyT* wkeys, acc_t* wvalues,
                                        int32_t* wtiles) {
  for (int j = t; j < kWindowKeys; j += kWindow) {
    const int64_t p = int64_t{base} - 1 + j;
    if (p < 0 || p >= n) continue;
    wkeys[j] = keys[p];
    if (p >= base && p - base < kWindowValues) {
      for (int64_t c = 0; c < D; ++c) wvalues[(p - base) * D + c] = src.values[p * D + c];
    }
  }
  if (t < kWindowTiles && tile_start != nullptr && int64_t{base} + int64_t{t} * kBlock < n) {
    wtiles[t] = tile_start[base / kBlock + t];
  }
}

// Level 0 for sorted position p of the window from `base`, all columns, once window_load has run for all of the
// window's threads.
template <typename acc_t, typename KeyT, typename Op>
C10_HOST_DEVICE inline void window_level0_step(const Op& op, const KeyT* wkeys, const acc_t* wvalues,
                                               const int32_t* wtiles, const int32_t* seg_first, int32_t n,
                                               int64_t num_keys, int64_t D, int32_t base, acc_t* scratch,
                                               int32_t* slot_first, int32_t* slot_pos, int32_t p) {
  const Level0Block b = level0_block(WindowKeys<KeyT>{wkeys, base}, seg_first, WindowTiles{wtiles, base / kBlock},
                                     n, num_keys, p);
  if (b.count == 0) return;
  record_slot(b, p, slot_first, slot_pos);
  const WindowValues<acc_t> window{wvalues, base};
  for (int64_t c = 0; c < D; ++c) level0_fold<acc_t>(op, window, b, D, scratch, p, c);
}

// A level-L group led by scratch slot q: its item count, and the key it finishes (finish) if it covers a
// whole segment.
struct LevelGroup {
  int64_t key;
  int32_t count;
  bool finish;
};

// Level L >= 1 for scratch slot q and column c, items `stride` = kBlock^(L-1) slots apart: the leader of
// each group of kBlock items folds them in place; the group that covers a whole segment finishes it. The
// group's facts, the same for every column (level_group: count 0 where q leads no group with work left),
// are taken once; level_fold folds one column.
// NB: in place is safe: each item is read by one leader, which writes only its own slot. Slot arithmetic is
// 32-bit: slots < n / 16 + 1 <= 2^27 and stride <= kBlock^5 = 2^25 (tree_levels(2^31) = 6), so q + kBlock *
// stride < 2^31; stride is a power of two, so group membership is a mask.
template <typename KeyT>
C10_HOST_DEVICE inline LevelGroup level_group(const KeyT* keys, const int32_t* slot_first, const int32_t* slot_pos,
                                              int32_t total, int32_t stride, int32_t q) {
  if (q >= total) return {0, 0, false};
  const int32_t f = slot_first[q];
  const int32_t group = stride * kBlock;
  if (((q - f) & (group - 1)) != 0) return {0, 0, false};
  const auto in_segment = [&](int32_t x) { return x < total && slot_first[x] == f; };
  if (!in_segment(f + stride)) return {0, 0, false};  // a single item left: finished at an earlier level
  // The group's items are those of q, q + stride, ... in the segment's slots, a prefix (its slots are contiguous).
  // NB: as in block_count, the last possible item and the second are loaded together and settle a full group and
  // a single item; a group in between takes a binary search (at most 5 loads), not a walk of kBlock loads.
  int32_t count = 1;
  if (in_segment(q + (kBlock - 1) * stride)) {
    count = kBlock;
  } else if (in_segment(q + stride)) {
    // in_segment(q + stride) and not at q + (kBlock - 1) stride: the first item outside is in [2, kBlock - 1].
    int32_t lo = 2, hi = kBlock - 1;
    while (lo < hi) {
      const int32_t mid = (lo + hi) / 2;
      if (in_segment(q + mid * stride)) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    count = lo;
  }
  if (q == f && !in_segment(f + group)) {
    // Slots exist only for valid keys (long_segment_slots), so this key is in [0, num_keys).
    return {static_cast<int64_t>(keys[slot_pos[q]]), count, true};
  }
  return {0, count, false};
}

template <typename acc_t, typename Op>
C10_HOST_DEVICE inline void level_fold(const Op& op, const LevelGroup& g, int32_t stride, int64_t D, acc_t* scratch,
                                       int32_t q, int64_t c) {
  const acc_t s = grouped_fold<acc_t>([&](int i) { return scratch[int64_t{q + i * stride} * D + c]; }, g.count,
                                      combine_of_t<Op>());
  if (g.finish) {
    op.finalize(g.key, c, s);
  } else {
    scratch[int64_t{q} * D + c] = s;
  }
}

template <typename acc_t, typename KeyT, typename Op>
C10_HOST_DEVICE inline void level_step(const Op& op, const KeyT* keys, const int32_t* slot_first,
                                       const int32_t* slot_pos, int32_t total, int32_t stride, int64_t D,
                                       acc_t* scratch, int32_t q, int64_t c) {
  const LevelGroup g = level_group(keys, slot_first, slot_pos, total, stride, q);
  if (g.count > 0) level_fold<acc_t>(op, g, stride, D, scratch, q, c);
}

// The buckets (plan::buckets, docs/engine.md "Buckets"): where keys are about as many as contributions, each key's
// contributions are put in its own run of slots, without a sort, and folded from there. The steps, in order (each
// over its items in any order; the CUDA kernel runs them between grid-wide barriers, buckets_kernel):
//   1. bucket_key for each contribution; a valid one adds 1 to its key's count.
//   2. Each key's run: `cursor[k]` = the slots taken before it (a chunk of keys scans its counts and takes its runs
//      from a counter: runs lie in any order). A count above plan::kBucketMaxCount raises the flag, and steps 3 and
//      4 do nothing (the multi-block path runs instead).
//   3. Each valid contribution takes the next slot of its key's run (an atomic add on cursor[k]: any order) and
//      stores there its source position, and its columns where they fit in 8 bytes (bucket_store).
//   4. Each key with a count folds its run (bucket_fold), from cursor[k] - count, bucket_lanes(D) threads per key
//      over the columns.
// NB: a run's slots hold its contributions in the order their threads took them; bucket_fold takes them in
// increasing source position, so the order of steps 2 and 3 changes no bit.

// A contribution's key where it is valid (in [0, num_keys)), else -1: skipped (kSkipKey) or out of range (the kernel
// asserts on the latter, as the key kernel does).
C10_HOST_DEVICE inline int64_t bucket_key(int64_t key, int64_t num_keys) {
  return key != kSkipKey && key >= 0 && key < num_keys ? key : -1;
}

// Step 3's store: source position i in slot `slot`, and where the slots carry the contributions (values not null:
// D * sizeof(acc_t) of at most 8 bytes, plan::carries_values) its D columns.
template <typename acc_t, typename Op>
C10_HOST_DEVICE inline void bucket_store(const Op& op, int64_t i, int32_t slot, int64_t D, int32_t* positions,
                                         acc_t* values) {
  positions[slot] = static_cast<int32_t>(i);
  if (values != nullptr) {
    for (int64_t c = 0; c < D; ++c) values[int64_t{slot} * D + c] = op.contribution(i, c);
  }
}

// Step 4 for key `key` and column c: its `count` contributions (1 .. plan::kBucketMaxCount == kBlock) in slots first
// .. first + count - 1, taken in increasing source position (each time the smallest position above the last one
// taken: positions are distinct), their column c from the slots (values) or from the op (values null), folded left
// to right (grouped_fold's sequence: s = c_0, then s = s + c_j), then finished. NB: that is the contract's tree of a
// segment of at most kBlock contributions in source order (docs/order_contract.md), whatever the slots' order: the
// bits of the multi-block path.
template <typename acc_t, typename Op>
C10_HOST_DEVICE inline void bucket_fold(const Op& op, int64_t key, int32_t count, int32_t first,
                                        const int32_t* positions, const acc_t* values, int64_t D, int64_t c) {
  static_assert(plan::kBucketMaxCount == kBlock, "a bucket is one block of the tree");
  if (count == 1) {
    // NB: the loop's one step, without the wait on the position where the slot carries the contribution.
    op.finalize(key, c, values != nullptr ? values[int64_t{first} * D + c]
                                          : static_cast<acc_t>(op.contribution(positions[first], c)));
    return;
  }
  const combine_of_t<Op> combine{};
  acc_t s{};
  int32_t last = -1;
  for (int32_t j = 0; j < count; ++j) {
    int32_t best = INT32_MAX;
    int32_t at = first;
    for (int32_t q = first; q < first + count; ++q) {
      const int32_t p = positions[q];
      if (p > last && p < best) {
        best = p;
        at = q;
      }
    }
    const acc_t v = values != nullptr ? values[int64_t{at} * D + c] : static_cast<acc_t>(op.contribution(best, c));
    s = j == 0 ? v : combine(s, v);
    last = best;
  }
  op.finalize(key, c, s);
}

// Threads per key in step 4: one per column up to 32 (a power of two), each taking columns c, c + lanes, ...
C10_HOST_DEVICE inline int32_t bucket_lanes(int64_t D) {
  int32_t lanes = 1;
  while (lanes < D && lanes < 32) lanes *= 2;
  return lanes;
}

}  // namespace detops::engine
