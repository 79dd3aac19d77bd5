// The last writer (combine Last over source positions: scatter_, index_copy_, index_put_ and put_ without
// accumulation) by a winner table instead of the sort, the steps shared by the CUDA kernels
// (cuda/sort_reduce.cuh) and the CPU test that runs them in shuffled orders (tests/cpp/test_cpu_engine.cpp).
// Each key's winner is its largest contributing source position, the position the Last fold of the key's
// contributions in source order ends on (docs/order_contract.md, "Last writer wins"), so the results are the
// sort's, bit for bit.
#pragma once

#include "ops/contract.h"
#include "ops/index_math.h"
#include "ops/plan_record.h"

#include <c10/macros/Macros.h>

#include <cstdint>

namespace detops::engine {

// A contribution's key (op.key) for the winner table: kSkipKey where it writes nothing (skipped, or an invalid
// key, which the CUDA kernel also asserts on, as the sort's key kernel does).
C10_HOST_DEVICE inline int64_t last_writer_key(int64_t key, int64_t num_keys) {
  return (key >= 0 && key < num_keys) ? key : kSkipKey;
}

// The copy after the table takes kLastWriterPairs consecutive (key or position, column) pairs per call: it
// reads their elements (op.read) before it writes any (op.write), so a thread keeps that many loads in flight
// instead of waiting on each (one element per thread measured load-latency bound on an H200,
// docs/engine.md). The for_each runs over ceil(pairs / kLastWriterPairs) calls (plan::last_writer_calls).
using plan::kLastWriterPairs;

// The copy over keys (plan::last_writer_over_keys): pair w = k * D + c copies the key's winner's element (-1:
// none). index_t: int32_t where the pairs number at most 2^31 - 1 - kLastWriterPairs (a multiply for the
// division), else int64_t.
// NB: every pair is written by one call, from the winner alone, so the schedule cannot show.
template <typename Op, typename index_t>
struct LastWriterGatherOp {
  Op op;
  const int32_t* winner;
  Divider<index_t> by_columns;  // D
  index_t D;
  index_t pairs;

  C10_HOST_DEVICE void operator()(int64_t call) const {
    const index_t w0 = static_cast<index_t>(call) * kLastWriterPairs;
    index_t k, c;
    by_columns.divmod(w0, k, c);
    typename Op::value_type v[kLastWriterPairs];
    index_t ks[kLastWriterPairs], cs[kLastWriterPairs];
    bool copy[kLastWriterPairs];
    int32_t pos = winner[k];
#pragma unroll
    for (int j = 0; j < kLastWriterPairs; ++j) {
      copy[j] = w0 + j < pairs && pos >= 0;
      ks[j] = k;
      cs[j] = c;
      if (copy[j]) v[j] = op.read(pos, c);
      if (++c == D) {
        c = 0;
        ++k;
        if (w0 + j + 1 < pairs) pos = winner[k];
      }
    }
#pragma unroll
    for (int j = 0; j < kLastWriterPairs; ++j) {
      if (copy[j]) op.write(ks[j], cs[j], v[j]);
    }
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
  index_t D;
  index_t pairs;

  C10_HOST_DEVICE bool wins(index_t p, int64_t& k) const {
    k = last_writer_key(op.key(p), num_keys);
    return k != kSkipKey && winner[k] == p;
  }

  C10_HOST_DEVICE void operator()(int64_t call) const {
    const index_t w0 = static_cast<index_t>(call) * kLastWriterPairs;
    index_t p, c;
    by_columns.divmod(w0, p, c);
    typename Op::value_type v[kLastWriterPairs];
    int64_t ks[kLastWriterPairs];
    index_t cs[kLastWriterPairs];
    bool copy[kLastWriterPairs];
    int64_t k = 0;
    bool won = wins(p, k);
#pragma unroll
    for (int j = 0; j < kLastWriterPairs; ++j) {
      copy[j] = w0 + j < pairs && won;
      ks[j] = k;
      cs[j] = c;
      if (copy[j]) v[j] = op.read(p, c);
      if (++c == D) {
        c = 0;
        ++p;
        won = w0 + j + 1 < pairs && wins(p, k);
      }
    }
#pragma unroll
    for (int j = 0; j < kLastWriterPairs; ++j) {
      if (copy[j]) op.write(ks[j], cs[j], v[j]);
    }
  }
};

}  // namespace detops::engine
