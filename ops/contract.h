// The order contract in code (docs/order_contract.md). Everything here is __host__ __device__ and is
// the only arithmetic the sort-reduce engine performs, on the CPU and on the GPU alike.
#pragma once

#include <ATen/OpMathType.h>
#include <c10/macros/Macros.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

namespace detops {

// Block length of the fixed reduction tree. NB: part of the contract; changing it changes the bits.
constexpr int kBlock = 32;

// A sort-reduce op's key(i) for a contribution that goes nowhere (a grid sampler tap outside the input with
// zeros padding): both engines drop it without error, unlike an invalid key, which is an index error.
constexpr int64_t kSkipKey = INT64_MIN;

template <typename scalar_t>
using acc_type = at::opmath_type<scalar_t>;

// A sort-reduce op may carry a gate, a member `const int32_t* gate`: its engine call then does nothing while
// *gate is 0, read on the device by every kernel of the call (no host synchronisation). The max pools' gather
// (ops/pooling_op.h) sets it where the engine must recompute. gate_of(op) is the gate, or null.
template <typename Op, typename = void>
struct HasGate : std::false_type {};
template <typename Op>
struct HasGate<Op, std::void_t<decltype(std::declval<const Op&>().gate)>> : std::true_type {};
template <typename Op>
C10_HOST_DEVICE inline const int32_t* gate_of(const Op& op) {
  if constexpr (HasGate<Op>::value) {
    return op.gate;
  } else {
    return nullptr;
  }
}
C10_HOST_DEVICE inline bool gated_off(const int32_t* gate) {
  return gate != nullptr && *gate == 0;
}

// Floating-point operations rounded on their own. NB: on the device the _rn intrinsics are never
// contracted into FMA; on the host the files are compiled with -ffp-contract=off.
C10_HOST_DEVICE inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
C10_HOST_DEVICE inline double add_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
C10_HOST_DEVICE inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
C10_HOST_DEVICE inline double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

C10_HOST_DEVICE inline float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
C10_HOST_DEVICE inline double div_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

C10_HOST_DEVICE inline uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

// float -> half bits, round to nearest even; NaN -> quiet NaN with the input's sign.
C10_HOST_DEVICE inline uint16_t half_bits_rne(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (a >= 0x38800000u) {                                             // normal half
    uint32_t h = (a >> 13) - (112u << 10);
    const uint32_t rem = a & 0x1fffu;
    h += (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ? 1u : 0u;
    return static_cast<uint16_t>(sign | h);
  }
  const uint32_t e = a >> 23;  // subnormal half or zero
  if (e < 102u) return static_cast<uint16_t>(sign);
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t s = 126u - e;  // 14..24
  uint32_t h = m >> s;
  const uint32_t rem = m & ((1u << s) - 1u);
  const uint32_t halfway = 1u << (s - 1u);
  h += (rem > halfway || (rem == halfway && (h & 1u))) ? 1u : 0u;
  return static_cast<uint16_t>(sign | h);
}

// float -> bfloat16 bits, round to nearest even; NaN -> quiet NaN with the input's sign.
C10_HOST_DEVICE inline uint16_t bfloat16_bits_rne(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// The one rounding to the output type (step 4 of the contract).
template <typename scalar_t>
C10_HOST_DEVICE inline scalar_t round_to(acc_type<scalar_t> v) {
  if constexpr (std::is_same_v<scalar_t, c10::Half>) {
    return c10::Half(half_bits_rne(v), c10::Half::from_bits());
  } else if constexpr (std::is_same_v<scalar_t, c10::BFloat16>) {
    return c10::BFloat16(bfloat16_bits_rne(v), c10::BFloat16::from_bits());
  } else {
    return static_cast<scalar_t>(v);
  }
}

template <typename scalar_t>
C10_HOST_DEVICE inline acc_type<scalar_t> to_acc(scalar_t v) {
  return static_cast<acc_type<scalar_t>>(v);
}

// The combine of the sum family: one rounded addition. Other ops pass their own stateless combine
// (for example LogAddExp in ops/ctc_loss_math.h); the tree's shape does not depend on it.
struct AddRn {
  template <typename acc_t>
  C10_HOST_DEVICE acc_t operator()(acc_t a, acc_t b) const {
    return add_rn(a, b);
  }
};

// The right operand: folded by the contract's tree over a segment in source order, it gives the segment's
// last contribution (last writer wins: put_ with accumulate=False, index_copy_). The tree's shape does not
// change the result, which is exact.
struct Last {
  template <typename T>
  C10_HOST_DEVICE T operator()(T, T b) const {
    return b;
  }
};

// The combine of the product family (scatter_reduce / index_reduce with reduce='prod'): one rounded
// multiplication, never fused.
struct MulRn {
  template <typename acc_t>
  C10_HOST_DEVICE acc_t operator()(acc_t a, acc_t b) const {
    return mul_rn(a, b);
  }
};

// The combines of reduce='amax' / 'amin', stock's serial rule `v is NaN ? v : max(acc, v)` made associative:
// the last NaN in source order wins, else the first of the largest (smallest) values, so -0.0 and +0.0 tie
// and the earlier one stays. NB: both rules are selections, so the tree's shape does not change the bits
// (docs/order_contract.md, "Reductions"). Written as selections without a branch, so that a loop over a row's
// columns vectorises; the value is the rule's in every case.
struct MaxNan {
  template <typename T>
  C10_HOST_DEVICE T operator()(T a, T b) const {
    T r = b > a ? b : a;
    if constexpr (std::is_floating_point_v<T>) {
      r = a != a ? a : r;
      r = b != b ? b : r;
    }
    return r;
  }
};
struct MinNan {
  template <typename T>
  C10_HOST_DEVICE T operator()(T a, T b) const {
    T r = b < a ? b : a;
    if constexpr (std::is_floating_point_v<T>) {
      r = a != a ? a : r;
      r = b != b ? b : r;
    }
    return r;
  }
};

// Two's complement addition and multiplication in 64 bits: exact and order-free, so an integer sum or product
// truncated to its dtype is the one stock's integer arithmetic gives.
struct WrapAdd {
  C10_HOST_DEVICE int64_t operator()(int64_t a, int64_t b) const {
    return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  }
};
struct WrapMul {
  C10_HOST_DEVICE int64_t operator()(int64_t a, int64_t b) const {
    return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  }
};

// The combine a sort-reduce op folds with: Op::Combine where the op names one, else AddRn.
template <typename Op, typename = void>
struct combine_of {
  using type = AddRn;
};
template <typename Op>
struct combine_of<Op, std::void_t<typename Op::Combine>> {
  using type = typename Op::Combine;
};
template <typename Op>
using combine_of_t = typename combine_of<Op>::type;

// Step 2 of the contract: fold `count` (1..kBlock) values left to right.
template <typename acc_t, typename Get, typename Combine = AddRn>
C10_HOST_DEVICE inline acc_t fold_block(const Get& get, int count, const Combine& combine = Combine()) {
  acc_t s = get(0);
  for (int i = 1; i < count; ++i) s = combine(s, get(i));
  return s;
}

// Number of tree levels above level 0 that a segment of up to `n` contributions can need.
C10_HOST_DEVICE inline int tree_levels(int64_t n) {
  int levels = 0;
  int64_t m = (n + kBlock - 1) / kBlock;  // items after level 0
  while (m > 1) {
    m = (m + kBlock - 1) / kBlock;
    ++levels;
  }
  return levels;
}

// The whole tree for one segment, sequentially (the CPU engine). `buf` must hold ceil(n / kBlock)
// values. The GPU engine computes the same tree level by level (cuda/sort_reduce.cuh).
template <typename acc_t, typename Get, typename Combine = AddRn>
inline acc_t tree_reduce(int64_t n, const Get& get, acc_t* buf, const Combine& combine = Combine()) {
  if (n <= kBlock) return fold_block<acc_t>(get, static_cast<int>(n), combine);
  int64_t m = 0;
  for (int64_t b = 0; b * kBlock < n; ++b, ++m) {
    const int64_t base = b * kBlock;
    const int count = static_cast<int>(n - base < kBlock ? n - base : kBlock);
    buf[b] = fold_block<acc_t>([&](int i) { return get(base + i); }, count, combine);
  }
  while (m > 1) {
    int64_t next = 0;
    for (int64_t b = 0; b * kBlock < m; ++b, ++next) {
      const int64_t base = b * kBlock;
      const int count = static_cast<int>(m - base < kBlock ? m - base : kBlock);
      // NB: in place is safe: block b reads buf[b*kBlock..] and writes buf[b] <= b*kBlock.
      buf[b] = fold_block<acc_t>([&](int i) { return buf[base + i]; }, count, combine);
    }
    m = next;
  }
  return buf[0];
}

// The same tree, fed one contribution at a time in source order, for gather kernels that enumerate an
// output element's contributions themselves (pooling windows) and do not know their count up front.
// push() every contribution, then finish(); gives the bits of tree_reduce over the same sequence.
template <typename acc_t, int kLevels = 7, typename Combine = AddRn>  // 32^7 contributions at most
struct StreamingTree {
  acc_t sum[kLevels];
  int count[kLevels] = {};    // items in the open block of each level
  int64_t pushed[kLevels] = {};  // items ever pushed to each level

  C10_HOST_DEVICE void push(acc_t v, int level = 0) {
    while (true) {
      sum[level] = count[level] == 0 ? v : Combine()(sum[level], v);
      ++pushed[level];
      if (++count[level] < kBlock) return;
      count[level] = 0;  // a full block: its sum is one item of the next level
      v = sum[level];
      ++level;
    }
  }
  C10_HOST_DEVICE bool empty() const { return pushed[0] == 0; }
  // Requires !empty().
  C10_HOST_DEVICE acc_t finish() {
    for (int level = 0;; ++level) {
      if (count[level] > 0) {
        if (pushed[level] <= kBlock) return sum[level];  // the whole level was one block
        count[level] = 0;
        push(sum[level], level + 1);  // the last, partial block
      }
    }
  }
};

// The tree of a sequence known to hold at most kBlock contributions: one block, a left fold (fold_block).
// Same push()/finish() as StreamingTree, for gathers whose host-side plan bounds every count by kBlock.
template <typename acc_t>
struct BlockFold {
  acc_t sum{};
  bool any = false;

  C10_HOST_DEVICE void push(acc_t v) {
    sum = any ? add_rn(sum, v) : v;
    any = true;
  }
  C10_HOST_DEVICE acc_t finish() const { return sum; }
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
