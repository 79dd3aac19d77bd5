// Recording an op's CUDA plan from its CPU twin (ops/plan.h, docs/engine.md): the calls as the engines record
// them, for the CPU paths that stand for engine calls without making them; an op's own kernels outside the
// engine; and plan-only mode.
#pragma once

#include "ops/plan.h"

#include <cstdint>
#include <vector>

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
inline EngineCall sort_reduce_call(int64_t n, int64_t num_keys, int64_t D, int64_t acc_bytes, bool gated = false) {
  return {Kind::kSortReduce, n, num_keys, D, acc_bytes, key_bytes_for(num_keys), gated ? 1 : 0};
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

// The last writer (Engine::last_writer: combine Last over source positions) keeps a winner table, one int32
// position per key, where the keys are few against the elements the contributions write (n rows of D
// columns); otherwise, and for calls of 2^31 or more contributions, it is a sort-reduce call. NB: decided by
// sizes alone, the same on both engines.
constexpr int64_t kLastWriterKeysPerContribution = 4;
inline bool last_writer_table(int64_t n, int64_t num_keys, int64_t D) {
  // n * D is the source's element count, far below 2^61.
  return n > 0 && n <= INT32_MAX && num_keys <= kLastWriterKeysPerContribution * n * D;
}
// The copy after the table runs over the smaller side: the keys (each key with a winner copies its row) where
// they number at most the contributions, else the contributions (each winner copies its row). Either way each
// written element is written once, by its key's winner.
inline bool last_writer_over_keys(int64_t n, int64_t num_keys) {
  return num_keys <= n;
}
// The copy takes this many consecutive pairs per call of its for_each (ops/last_writer_op.h).
constexpr int kLastWriterPairs = 4;
// The table's fill (a memset), the winner kernel and the table (docs/engine.md); the copy is a for_each.
inline EngineCall last_writer_kernels(int64_t n, int64_t num_keys) {
  // Traffic: the table filled; each contribution's key read and its winner raised.
  return kernel_call(/*launches=*/1, /*copies=*/1, /*allocations=*/1, num_keys * 4, num_keys * 4 + n * (8 + 2 * 4));
}
// What Engine::last_writer(name, op, n, num_keys, D, like) records.
inline std::vector<EngineCall> last_writer_calls(int64_t n, int64_t num_keys, int64_t D) {
  if (!last_writer_table(n, num_keys, D)) return {sort_reduce_call(n, num_keys, D, sizeof(int64_t))};
  const int64_t pairs = (last_writer_over_keys(n, num_keys) ? num_keys : n) * D;
  return {last_writer_kernels(n, num_keys), for_each_call((pairs + kLastWriterPairs - 1) / kLastWriterPairs)};
}

// Whether this thread records in plan-only mode: a CPU path that stands for a CUDA engine call records it and
// returns without computing (its checks still run).
bool plan_only();

}  // namespace detops::plan
