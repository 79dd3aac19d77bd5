// The sort-reduce engine, CUDA path: the plan (sort + segments), computed once per call and independent
// of dtype. See cuda/sort_reduce.cuh for the reduction over the plan, docs/order_contract.md for the why.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace detops::cuda {

struct SegmentPlan {
  int64_t n = 0;          // contributions
  bool wide_keys = false;  // keys are 64-bit
  at::Tensor keys;        // [n] destination keys, sorted (int32 storage of uint32, or int64)
  at::Tensor perm;        // [n] int32 source positions in sorted order
  at::Tensor segstart;    // [n] int32 first sorted position of each position's segment
  // The rest is defined only when levels > 0 (more than one block of contributions).
  at::Tensor slot;        // [n] int32 scratch slot of each block leader of a long segment
  at::Tensor slot_first;  // [max_slots] int32 first slot of the slot's segment
  at::Tensor slot_pos;    // [max_slots] int32 sorted position of the slot's block leader
  at::Tensor num_slots;   // [1] int32 slots in use (device side: no host sync)
  int64_t max_slots = 0;  // static bound on slots: n / 16 + 1
  int levels = 0;         // tree levels above level 0 in the worst case for n
};

// keys: [n] unsorted destination keys (int32 storage read as uint32, or int64), values in
// [0, num_keys]; num_keys marks an invalid contribution that is sorted last and never written.
// Runs on the current stream; no host synchronisation.
SegmentPlan plan_segments(const at::Tensor& keys, int64_t num_keys);

}  // namespace detops::cuda
