// The last writer (combine Last over source positions: scatter_, index_copy_, index_put_ and put_ without
// accumulation) by a winner table instead of the sort, the steps shared by the CUDA kernels
// (cuda/sort_reduce.cuh) and the CPU test that runs them in shuffled orders (tests/cpp/test_cpu_engine.cpp).
// Each key's winner is its largest contributing source position, the position the Last fold of the key's
// contributions in source order ends on (docs/order_contract.md, "Last writer wins"), so the results are the
// sort's, bit for bit.
#pragma once

#include "ops/contract.h"

#include <c10/macros/Macros.h>

#include <cstdint>

namespace detops::engine {

// A contribution's key (op.key) for the winner table: kSkipKey where it writes nothing (skipped, or an invalid
// key, which the CUDA kernel also asserts on, as the sort's key kernel does).
C10_HOST_DEVICE inline int64_t last_writer_key(int64_t key, int64_t num_keys) {
  return (key >= 0 && key < num_keys) ? key : kSkipKey;
}

// (key, column) pair w = k * D + c of the gather: the key's winner (-1: none) copied by the op's finalize.
// NB: every pair is written by one call, from the winner alone, so the schedule cannot show.
template <typename Op>
struct LastWriterGatherOp {
  Op op;
  const int32_t* winner;
  int64_t D;

  C10_HOST_DEVICE void operator()(int64_t w) const {
    const int64_t k = D == 1 ? w : w / D;
    const int64_t c = w - k * D;
    const int32_t pos = winner[k];
    if (pos >= 0) op.finalize(k, c, op.contribution(pos, c));
  }
};

}  // namespace detops::engine
