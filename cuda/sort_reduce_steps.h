// The per-thread steps of the CUDA sort-reduce engine, as __host__ __device__ functions: the kernels in
// cuda/sort_reduce.cu and cuda/sort_reduce.cuh call them once per (position or slot, column), and
// tests/cpp/test_engine_schedule.cpp runs them on the CPU in shuffled orders to show that the parallel
// schedule gives the contract's bits (docs/order_contract.md) whatever order the threads run in.
#pragma once

#include "ops/contract.h"

#include <cstdint>

namespace detops {

// The CUDA engine's positions (sorted positions, permutation, segment starts, slots) are int32: a call
// takes at most this many contributions. Sums that can pass it (s0 + kBlock) are formed in 64 bits below.
constexpr int64_t kMaxContributions = (int64_t{1} << 31) - 1;

}  // namespace detops

namespace detops::engine {

// The segment scan: one inclusive scan (CUB's, over a transform iterator) gives every sorted position its
// segment start and its scratch slot. An item summarises a range of sorted positions: its last segment head
// (-1 if none), the one segment tail it holds before any head (-1 if none; its segment starts to the left, so
// its slots are counted once the head is known), and the slots of the long segments whose head and tail it
// both holds. NB: combine() is associative (a range summary), so any grouping the scan picks gives the same
// items; tests/cpp/test_engine_schedule.cpp scans in random groupings.
struct SegItem {
  int32_t head;
  int32_t tail;
  int32_t tail_valid;
  int32_t slots;
};

// Scratch slots of a segment of `len` contributions: one per block if it is longer than one block, none
// otherwise. The segment of invalid contributions (key num_keys, sorted last) gets none: level 0 skips it,
// so no level above sees it. NB: blocks start at multiples of kBlock from the segment start.
C10_HOST_DEVICE inline int32_t segment_slots(int64_t len, bool valid) {
  return (valid && len > kBlock) ? static_cast<int32_t>((len + kBlock - 1) / kBlock) : 0;
}

template <typename KeyT>
C10_HOST_DEVICE inline bool is_tail(const KeyT* keys, int32_t n, int32_t p) {
  return p == n - 1 || keys[p + 1] != keys[p];
}

// The item of sorted position p alone.
template <typename KeyT>
C10_HOST_DEVICE inline SegItem seg_item(const KeyT* keys, int32_t n, int64_t num_keys, int32_t p) {
  const bool head = p == 0 || keys[p] != keys[p - 1];
  SegItem item{head ? p : -1, -1, 0, 0};
  if (!head && is_tail(keys, n, p)) {
    item.tail = p;
    item.tail_valid = static_cast<int64_t>(keys[p]) < num_keys ? 1 : 0;
  }
  return item;
}

// The item of range a followed by range b.
struct SegScan {
  C10_HOST_DEVICE SegItem operator()(const SegItem& a, const SegItem& b) const {
    SegItem r{b.head >= 0 ? b.head : a.head, a.tail, a.tail_valid, a.slots + b.slots};
    if (b.tail >= 0) {
      if (a.head >= 0) {
        r.slots += segment_slots(int64_t{b.tail} + 1 - a.head, b.tail_valid != 0);  // b's tail closes a's last segment
      } else {
        r.tail = b.tail;  // a holds neither a head nor, then, a tail
        r.tail_valid = b.tail_valid;
      }
    }
    return r;
  }
};

// Slots of the segments before sorted position p's segment, from p's inclusive scan item `inc`.
template <typename KeyT>
C10_HOST_DEVICE inline int32_t slots_before(const KeyT* keys, const SegItem& inc, int32_t n, int64_t num_keys,
                                            int32_t p) {
  const int32_t s0 = inc.head;
  if (!is_tail(keys, n, p)) return inc.slots;
  return inc.slots - segment_slots(int64_t{p} + 1 - s0, static_cast<int64_t>(keys[p]) < num_keys);
}

// 1 if sorted position p (segment start s0) leads a block of a segment longer than one block.
template <typename KeyT>
C10_HOST_DEVICE inline int32_t long_leader(const KeyT* keys, int32_t s0, int32_t n, int64_t num_keys, int32_t p) {
  const bool leader = (p - s0) % kBlock == 0;
  const bool is_long = int64_t{s0} + kBlock < n && keys[s0 + kBlock] == keys[p];
  const bool valid = static_cast<int64_t>(keys[p]) < num_keys;
  return (leader && is_long && valid) ? 1 : 0;
}

// Once per sorted position (level 0's first column): a long segment's block leader records its slot's
// segment-first slot and position; the last position records the number of slots. slot_first may be null
// when no segment can be long (n <= kBlock).
template <typename KeyT>
C10_HOST_DEVICE inline void slot_step(const KeyT* keys, const SegItem* seg, int32_t n, int64_t num_keys, int32_t p,
                                      int32_t* slot_first, int32_t* slot_pos, int32_t* num_slots) {
  if (slot_first == nullptr) return;
  if (p == n - 1) *num_slots = seg[p].slots;
  const int32_t s0 = seg[p].head;
  if (!long_leader(keys, s0, n, num_keys, p)) return;
  const int32_t first = slots_before(keys, seg[p], n, num_keys, p);
  const int32_t q = first + (p - s0) / kBlock;
  slot_first[q] = first;
  slot_pos[q] = p;
}

// Contributions a level-0 leader loads before folding them (kBlock is a multiple).
constexpr int kLoadGroup = 8;

// The block of up to kBlock contributions that sorted position p leads at level 0, the same for every column:
// count is 0 where p leads none (not at a multiple of kBlock from its segment start, or the invalid key);
// slot is the scratch slot of a block of a long segment, -1 where the block is the whole segment (finished
// at level 0).
struct Level0Block {
  int64_t key;
  int32_t count;
  int32_t slot;
};

// Contributions in the block that starts at sorted position p with key `key`: the positions from p on that
// hold key, at most kBlock of them (keys are sorted). NB: the block's last possible position and p + 1 are
// loaded together and settle a full block and a single contribution; a block in between takes a binary
// search (at most 5 loads), not a scan of kBlock keys.
template <typename KeyT>
C10_HOST_DEVICE inline int32_t block_count(const KeyT* keys, int32_t n, int32_t p, KeyT key) {
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

template <typename KeyT>
C10_HOST_DEVICE inline Level0Block level0_block(const KeyT* keys, const SegItem* seg, int32_t n, int64_t num_keys,
                                                int32_t p) {
  const int32_t s0 = seg[p].head;
  const KeyT key = keys[p];
  // Invalid contributions are sorted last and never written.
  if ((p - s0) % kBlock != 0 || static_cast<int64_t>(key) >= num_keys) return {0, 0, -1};
  const bool is_long = int64_t{s0} + kBlock < n && keys[s0 + kBlock] == key;
  const int32_t slot = is_long ? slots_before(keys, seg[p], n, num_keys, p) + (p - s0) / kBlock : -1;
  return {static_cast<int64_t>(key), block_count(keys, n, p, key), slot};
}

// Level 0's fold of block b (led by sorted position p) in column c: a segment of one block is finished here,
// longer ones leave their block sums in scratch. NB: the contributions are loaded kLoadGroup at a time
// before they are folded, so the loads are independent instead of one chain; the fold is still fold_block's
// left fold in source order.
template <typename acc_t, typename Op>
C10_HOST_DEVICE inline void level0_fold(const Op& op, const int32_t* perm, const Level0Block& b, int64_t D,
                                        acc_t* scratch, int32_t p, int64_t c) {
  static_assert(kBlock % kLoadGroup == 0, "level0_fold loads whole groups");
  const auto combine = combine_of_t<Op>();
  acc_t s{};
  for (int g = 0; g < b.count; g += kLoadGroup) {
    acc_t v[kLoadGroup];
#pragma unroll
    for (int j = 0; j < kLoadGroup; ++j) {
      if (g + j < b.count) v[j] = op.contribution(perm[p + g + j], c);
    }
#pragma unroll
    for (int j = 0; j < kLoadGroup; ++j) {
      if (g + j < b.count) s = g + j == 0 ? v[j] : combine(s, v[j]);
    }
  }
  if (b.slot >= 0) {
    scratch[int64_t{b.slot} * D + c] = s;
  } else {
    op.finalize(b.key, c, s);
  }
}

// Level 0 for sorted position p and column c: the leader of each block folds it. The kernels that run many
// columns per position take level0_block once and level0_fold per column instead.
template <typename acc_t, typename KeyT, typename Op>
C10_HOST_DEVICE inline void level0_step(const Op& op, const KeyT* keys, const int32_t* perm, const SegItem* seg,
                                        int32_t n, int64_t num_keys, int64_t D, acc_t* scratch, int32_t p,
                                        int64_t c) {
  const Level0Block b = level0_block(keys, seg, n, num_keys, p);
  if (b.count > 0) level0_fold<acc_t>(op, perm, b, D, scratch, p, c);
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
  int32_t count = 1;
  while (count < kBlock && in_segment(q + count * stride)) ++count;
  if (q == f && !in_segment(f + group)) {
    // Slots exist only for valid keys (long_leader), so this key is in [0, num_keys).
    return {static_cast<int64_t>(keys[slot_pos[q]]), count, true};
  }
  return {0, count, false};
}

template <typename acc_t, typename Op>
C10_HOST_DEVICE inline void level_fold(const Op& op, const LevelGroup& g, int32_t stride, int64_t D, acc_t* scratch,
                                       int32_t q, int64_t c) {
  const acc_t s = fold_block<acc_t>([&](int i) { return scratch[int64_t{q + i * stride} * D + c]; }, g.count,
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

}  // namespace detops::engine
