// Recording an op's CUDA plan from its CPU twin (ops/plan.h, docs/engine.md): the calls as the engines record
// them, for the CPU paths that stand for engine calls without making them; an op's own kernels outside the
// engine; and plan-only mode.
#pragma once

#include "ops/plan.h"

#include <cstdint>

namespace detops::plan {

// An op's own kernels outside the engine (CTC's, median's segmented sort, max_unpool's winners): an entry of
// this kind holds launches (n), memsets and copies on the stream (num_keys), caching-allocator requests (D),
// the bytes they allocate (acc_bytes) and the predicted bytes moved (key_bytes); plan_for counts it as written,
// on the path kKernelPath.
inline constexpr Kind kKernel = static_cast<Kind>(3);
inline constexpr Path kKernelPath = static_cast<Path>(5);

// The calls as both engines record them: Engine::sort_reduce<acc_t>(name, op, n, num_keys, D, like) and
// Engine::for_each(op, n). An op whose CPU path does not go through the engine records the call its CUDA path
// makes with these, from the same host helper that gives the CUDA path its arguments.
inline EngineCall sort_reduce_call(int64_t n, int64_t num_keys, int64_t D, int64_t acc_bytes) {
  return {Kind::kSortReduce, n, num_keys, D, acc_bytes, key_bytes_for(num_keys)};
}
inline EngineCall for_each_call(int64_t n) {
  return {Kind::kForEach, n, 0, 1, 0, 0};
}
// The CUDA path records what it launches outside the engine, its CPU twin the same entry from the same host
// helper.
inline EngineCall kernel_call(int64_t launches, int64_t copies, int64_t allocations, int64_t allocated_bytes,
                              int64_t bytes_moved) {
  return {kKernel, launches, copies, allocations, allocated_bytes, bytes_moved};
}

// Whether this thread records in plan-only mode: a CPU path that stands for a CUDA engine call records it and
// returns without computing (its checks still run).
bool plan_only();

}  // namespace detops::plan
