// Engine calls too large for one plan, in chunks of destination keys (the CUDA plan's positions are 32-bit).
// A histogram of the keys over coarse buckets decides consecutive key ranges of at most `limit`
// contributions (a bucket that alone holds more is split again with finer buckets), and each range runs the
// engine over the positions of its contributions, compacted stably (PositionsOp). NB: every destination lies
// in one range and sees all its contributions, in source order, so the contract's tree and the bits are those
// of one call (docs/order_contract.md). A single destination with more contributions than the limit cannot be
// split by key: it is rejected.
#pragma once

#include "ops/contract.h"

#include <c10/util/Exception.h>

#include <cstdint>
#include <vector>

namespace detops {

// Keys [lo, hi) and how many contributions go there.
struct KeyChunk {
  int64_t lo;
  int64_t hi;
  int64_t count;
};

// Buckets per histogram.
constexpr int64_t kChunkBuckets = int64_t{1} << 16;

// The host planner. counts[b] is the number of contributions with a key in [lo + b * width,
// lo + (b + 1) * width) ∩ [lo, hi). Returns consecutive ranges in key order, each of at most `limit`
// contributions, grouping buckets greedily; ranges with no contribution are left out. A bucket holding more
// than `limit` on its own comes back alone, its count above the limit: the caller splits it further (width
// > 1) or rejects it (one key).
std::vector<KeyChunk> plan_key_chunks(const std::vector<int64_t>& counts, int64_t lo, int64_t hi, int64_t width,
                                      int64_t limit);

// Splits [lo, hi) into ranges of at most `limit` contributions and calls run(chunk) for each in key order.
// histogram(lo, hi, width) gives the counts of plan_key_chunks over at most `buckets` buckets. `name` is the
// op, for the error of a single key holding more than `limit` contributions.
template <typename Histogram, typename Run>
void for_each_key_chunk(const char* name, int64_t lo, int64_t hi, int64_t limit, int64_t buckets,
                        const Histogram& histogram, const Run& run) {
  const int64_t width = (hi - lo + buckets - 1) / buckets;
  const std::vector<int64_t> counts = histogram(lo, hi, width);
  for (const KeyChunk& chunk : plan_key_chunks(counts, lo, hi, width, limit)) {
    if (chunk.count <= limit) {
      run(chunk);
      continue;
    }
    TORCH_CHECK(chunk.hi - chunk.lo > 1, name, "(): destination ", chunk.lo, " receives ", chunk.count,
                " contributions; detops' sort-reduce engine takes at most ", limit,
                " per destination (the contract's tree of one destination is not split)");
    for_each_key_chunk(name, chunk.lo, chunk.hi, limit, buckets, histogram, run);
  }
}

// The engine's op over one chunk: contribution j is the source position pos[j] of `op` (positions of the
// chunk's contributions in increasing order), keys rebased to the chunk's first key.
template <typename Op>
struct PositionsOp {
  using Combine = combine_of_t<Op>;
  Op op;
  const int64_t* pos;
  int64_t lo;

  C10_HOST_DEVICE int64_t key(int64_t j) const {
    return op.key(pos[j]) - lo;
  }
  C10_HOST_DEVICE auto contribution(int64_t j, int64_t c) const {
    return op.contribution(pos[j], c);
  }
  template <typename acc_t>
  C10_HOST_DEVICE void finalize(int64_t k, int64_t c, acc_t total) const {
    op.finalize(k + lo, c, total);
  }
};

}  // namespace detops
