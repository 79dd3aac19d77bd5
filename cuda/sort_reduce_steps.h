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

// The sorted position p if it starts a segment, else 0 (max-scanned into segment starts).
template <typename KeyT>
C10_HOST_DEVICE inline int32_t head_value(const KeyT* keys, int32_t p) {
  return (p == 0 || keys[p] != keys[p - 1]) ? p : 0;
}

// 1 if sorted position p leads a block of a segment longer than one block. The segment of invalid
// contributions (key num_keys, sorted last) gets no slots: level 0 skips it, so no level above sees it.
// NB: blocks start at multiples of kBlock from the segment start, never from a grid boundary.
template <typename KeyT>
C10_HOST_DEVICE inline int32_t long_leader(const KeyT* keys, const int32_t* segstart, int32_t n, int64_t num_keys,
                                           int32_t p) {
  const int32_t s0 = segstart[p];
  const bool leader = (p - s0) % kBlock == 0;
  const bool is_long = int64_t{s0} + kBlock < n && keys[s0 + kBlock] == keys[p];
  const bool valid = static_cast<int64_t>(keys[p]) < num_keys;
  return (leader && is_long && valid) ? 1 : 0;
}

// Records the slot of each long-segment leader, its segment's first slot, and the number of slots.
C10_HOST_DEVICE inline void fill_slot(const int32_t* segstart, const int32_t* lead, const int32_t* slot, int32_t n,
                                      int32_t p, int32_t* slot_first, int32_t* slot_pos, int32_t* num_slots) {
  if (lead[p]) {
    slot_first[slot[p]] = slot[segstart[p]];
    slot_pos[slot[p]] = p;
  }
  if (p == n - 1) *num_slots = slot[p] + lead[p];
}

// Level 0 for sorted position p and column c: the leader of each block folds it; a segment of one block
// is finished here, longer ones leave their block sums in scratch.
template <typename acc_t, typename KeyT, typename Op>
C10_HOST_DEVICE inline void level0_step(const Op& op, const KeyT* keys, const int32_t* perm, const int32_t* segstart,
                                        const int32_t* slot, int32_t n, int64_t num_keys, int64_t D, acc_t* scratch,
                                        int32_t p, int64_t c) {
  const int32_t s0 = segstart[p];
  if ((p - s0) % kBlock != 0) return;
  const KeyT key = keys[p];
  if (static_cast<int64_t>(key) >= num_keys) return;  // invalid contributions are sorted last, never written
  int count = 1;
  while (count < kBlock && int64_t{p} + count < n && keys[p + count] == key) ++count;
  const bool is_long = int64_t{s0} + kBlock < n && keys[s0 + kBlock] == key;
  const acc_t s = fold_block<acc_t>([&](int i) { return op.contribution(perm[p + i], c); }, count,
                                    combine_of_t<Op>());
  if (is_long) {
    scratch[int64_t{slot[p]} * D + c] = s;
  } else {
    op.finalize(static_cast<int64_t>(key), c, s);
  }
}

// Level L >= 1 for scratch slot q and column c, items `stride` = kBlock^(L-1) slots apart: the leader of
// each group of kBlock items folds them in place; the group that covers a whole segment finishes it.
// NB: in place is safe: each item is read by one leader, which writes only its own slot.
template <typename acc_t, typename KeyT, typename Op>
C10_HOST_DEVICE inline void level_step(const Op& op, const KeyT* keys, const int32_t* slot_first,
                                       const int32_t* slot_pos, int32_t total, int64_t stride, int64_t D,
                                       acc_t* scratch, int32_t q, int64_t c) {
  if (q >= total) return;
  const int32_t f = slot_first[q];
  if ((q - f) % (stride * kBlock) != 0) return;
  const auto in_segment = [&](int64_t x) { return x < total && slot_first[x] == f; };
  if (!in_segment(f + stride)) return;  // a single item left: finished at an earlier level
  int count = 1;
  while (count < kBlock && in_segment(q + count * stride)) ++count;
  const acc_t s = fold_block<acc_t>([&](int i) { return scratch[(q + i * stride) * D + c]; }, count,
                                    combine_of_t<Op>());
  if (q == f && !in_segment(f + stride * kBlock)) {
    // Slots exist only for valid keys (long_leader), so this key is in [0, num_keys).
    op.finalize(static_cast<int64_t>(keys[slot_pos[q]]), c, s);
  } else {
    scratch[int64_t{q} * D + c] = s;
  }
}

}  // namespace detops::engine
