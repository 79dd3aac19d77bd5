// Index and tree helpers of the resampling gathers (upsample, antialiased upsample): division by a divisor
// fixed for a whole call, and the contract's tree for a sequence whose length the host bounds by
// kBlock * kBlock (docs/order_contract.md). Everything is __host__ __device__.
#pragma once

#include <c10/macros/Macros.h>

#include <cstdint>

#include "ops/contract.h"

namespace detops {

// n / d and n % d for a d fixed per call. The 64-bit form divides; the 32-bit form (every n and d below
// 2^31) multiplies by a magic number instead (Granlund and Montgomery, as ATen's IntDivider): exact for
// those ranges, and a multiply-high and a shift on the GPU in place of a long division.
template <typename index_t>
struct FastDivider {
  index_t divisor = 1;
  FastDivider() = default;
  explicit FastDivider(int64_t d) : divisor(static_cast<index_t>(d)) {}
  C10_HOST_DEVICE index_t div(index_t n) const { return n / divisor; }
  C10_HOST_DEVICE index_t mod(index_t n) const { return n - div(n) * divisor; }
};

template <>
struct FastDivider<int32_t> {
  uint32_t divisor = 1;
  uint32_t magic = 0;
  uint32_t shift = 0;
  FastDivider() = default;
  explicit FastDivider(int64_t d) : divisor(static_cast<uint32_t>(d)) {
    while (shift < 32 && (uint64_t{1} << shift) < divisor) ++shift;
    magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - divisor)) / divisor + 1);
  }
  C10_HOST_DEVICE int32_t div(int32_t n) const {
    const uint32_t u = static_cast<uint32_t>(n);
#if defined(__CUDA_ARCH__)
    const uint32_t t = __umulhi(u, magic);
#else
    const uint32_t t = static_cast<uint32_t>((static_cast<uint64_t>(u) * magic) >> 32);
#endif
    return static_cast<int32_t>((t + u) >> shift);
  }
  C10_HOST_DEVICE int32_t mod(int32_t n) const { return n - div(n) * static_cast<int32_t>(divisor); }
};

// The contract's tree for a sequence of at most kBlock * kBlock contributions, fed in source order: blocks
// of kBlock folded left to right, their sums folded left to right as they complete (the one level above
// level 0 that such a sequence has). push() every contribution (at least one), then finish(); gives
// tree_reduce's bits for the same sequence.
template <typename acc_t>
struct TwoLevelTree {
  acc_t block{};
  acc_t top{};
  int in_block = 0;
  bool any_top = false;

  C10_HOST_DEVICE void push(acc_t v) {
    block = in_block == 0 ? v : add_rn(block, v);
    if (++in_block == kBlock) {
      top = any_top ? add_rn(top, block) : block;
      any_top = true;
      in_block = 0;
    }
  }
  C10_HOST_DEVICE acc_t finish() const {
    if (in_block == 0) return top;
    return any_top ? add_rn(top, block) : block;
  }
};

}  // namespace detops
