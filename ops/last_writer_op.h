// The last writer (combine Last over source positions: scatter_, index_copy_, index_put_ and put_ without
// accumulation) by a winner table instead of the sort, the steps shared by the CUDA kernels
// (cuda/sort_reduce.cuh) and the CPU test that runs them in shuffled orders (tests/cpp/test_cpu_engine.cpp).
// Each key's winner is its largest contributing source position, the position the Last fold of the key's
// contributions in source order ends on (docs/order_contract.md, "Last writer wins"), so the results are the
// sort's, bit for bit.
#pragma once

#include "ops/contract.h"
#include "ops/index_math.h"

#include <c10/macros/Macros.h>

#include <cstdint>

namespace detops::engine {

// A contribution's key (op.key) for the winner table: kSkipKey where it writes nothing (skipped, or an invalid
// key, which the CUDA kernel also asserts on, as the sort's key kernel does).
C10_HOST_DEVICE inline int64_t last_writer_key(int64_t key, int64_t num_keys) {
  return (key >= 0 && key < num_keys) ? key : kSkipKey;
}

// The copy after the table, over keys (plan::last_writer_over_keys): pair w = k * D + c copies the key's
// winner's element (-1: none) by the op's finalize. index_t: int32_t where the pairs number below 2^31
// (a multiply for the division), else int64_t.
// NB: every pair is written by one call, from the winner alone, so the schedule cannot show.
template <typename Op, typename index_t>
struct LastWriterGatherOp {
  Op op;
  const int32_t* winner;
  Divider<index_t> by_columns;  // D

  C10_HOST_DEVICE void operator()(int64_t w) const {
    index_t k, c;
    by_columns.divmod(static_cast<index_t>(w), k, c);
    const int32_t pos = winner[k];
    if (pos >= 0) op.finalize(k, c, op.contribution(pos, c));
  }
};

// The copy over contributions (where the keys outnumber them): pair w = p * D + c copies position p's element
// where p is its key's winner. NB: one winner per key, so each written element is written once, as above.
template <typename Op, typename index_t>
struct LastWriterScatterOp {
  Op op;
  const int32_t* winner;
  int64_t num_keys;
  Divider<index_t> by_columns;  // D

  C10_HOST_DEVICE void operator()(int64_t w) const {
    index_t p, c;
    by_columns.divmod(static_cast<index_t>(w), p, c);
    const int64_t k = last_writer_key(op.key(p), num_keys);
    if (k != kSkipKey && winner[k] == p) op.finalize(k, c, op.contribution(p, c));
  }
};

}  // namespace detops::engine
