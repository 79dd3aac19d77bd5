// The sort-reduce engine, CPU path. Same plan as the CUDA engine (cuda/sort_reduce.cuh): stable sort of
// (destination key, source position), segments of equal keys, the contract's fixed tree per segment and
// column (docs/order_contract.md). Parallel over segments only, so the bits do not depend on the number
// of threads.
#pragma once

#include "ops/contract.h"
#include "ops/plan.h"

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace detops::cpu {

// Positions 0..n-1 stably sorted by keys[i]: source order kept within equal keys.
std::vector<int64_t> stable_sort_by_key(const std::vector<int64_t>& keys, int64_t num_keys);

// Start offsets of runs of equal keys in `sorted` (plus a final n).
std::vector<int64_t> segment_starts(const std::vector<int64_t>& keys, const std::vector<int64_t>& perm);

// Op provides: key(i) -> destination in [0, num_keys) (already validated by the front end) or kSkipKey
// (dropped), contribution(i, c) -> acc_t, finalize(key, c, acc_t), and optionally a Combine type (default
// AddRn, combine_of_t in ops/contract.h). i is the source position, c a column of D.
template <typename acc_t, typename Op>
void sort_reduce(const Op& op, int64_t n, int64_t num_keys, int64_t D) {
  if (n == 0 || D == 0) return;
  std::vector<int64_t> keys(n);
  bool any_skipped = false;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = op.key(i);
    // A skipped contribution takes key num_keys: sorted after every real key, its segment is never reduced.
    any_skipped = any_skipped || k == kSkipKey;
    keys[i] = k == kSkipKey ? num_keys : k;
  }
  const std::vector<int64_t> perm = stable_sort_by_key(keys, any_skipped ? num_keys + 1 : num_keys);
  const std::vector<int64_t> starts = segment_starts(keys, perm);
  int64_t num_segments = static_cast<int64_t>(starts.size()) - 1;
  if (any_skipped) --num_segments;  // the last segment holds the skipped contributions
  const int64_t grain = std::max<int64_t>(1, 2048 / D);
  at::parallel_for(0, num_segments, grain, [&](int64_t begin, int64_t end) {
    std::vector<acc_t> buf;
    for (int64_t s = begin; s < end; ++s) {
      const int64_t first = starts[s];
      const int64_t count = starts[s + 1] - first;
      const int64_t key = keys[perm[first]];
      buf.resize(static_cast<size_t>((count + kBlock - 1) / kBlock));
      for (int64_t c = 0; c < D; ++c) {
        const acc_t total = tree_reduce<acc_t>(
            count, [&](int64_t j) { return op.contribution(perm[first + j], c); }, buf.data(),
            combine_of_t<Op>());
        op.finalize(key, c, total);
      }
    }
  });
}

// The CPU engine: what the op computations (ops/*_op.h, `*_compute<Engine>`) call; cuda::Engine
// (cuda/sort_reduce.cuh) has the same members.
struct Engine {
  // The sort-reduce engine above. `name` and `like` serve the CUDA engine (errors, allocations).
  template <typename acc_t, typename Op>
  static void sort_reduce(const char* /*name*/, const Op& op, int64_t n, int64_t num_keys, int64_t D,
                          const at::Tensor& /*like*/) {
    if (plan::record({plan::Kind::kSortReduce, n, num_keys, D, sizeof(acc_t), plan::key_bytes_for(num_keys)})) return;
    cpu::sort_reduce<acc_t>(op, n, num_keys, D);
  }

  // op(i) for every i in [0, n). NB: each i is computed whole by one call, so the bits do not depend on
  // the number of threads.
  template <typename Op>
  static void for_each(const Op& op, int64_t n) {
    plan::record({plan::Kind::kForEach, n, 0, 1, 0, 0});  // runs in plan-only mode: host code may read it
    at::parallel_for(0, n, 2048, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) op(i);
    });
  }

  // counts[v] += occurrences of v among values[0, n) (integers: exact in any order); values outside
  // [0, bins) are skipped.
  template <typename index_t>
  static void count(const index_t* values, int64_t n, int64_t bins, int64_t* counts) {
    if (plan::record({plan::Kind::kCount, n, bins, 1, 0, sizeof(index_t)})) return;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = static_cast<int64_t>(values[i]);
      if (v >= 0 && v < bins) ++counts[v];
    }
  }
};

}  // namespace detops::cpu
