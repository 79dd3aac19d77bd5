// scatter_reduce_: the per-element arithmetic shared by the CPU and CUDA engines (docs/order_contract.md,
// "Reductions"). The contributions are scatter_add_'s (ScatterElements, or ScatterRows for a broadcast
// index: ops/scatter_add_op.h); the reduction's combine folds a destination's contributions by the contract's tree, then
// self enters once, first: y = self (+) S with include_self, else y = identity (+) S, as stock's exclude-self
// fill does. The reduction arithmetic (Reduction, ReduceFinish) serves index_reduce_ too.
#pragma once

#include "ops/contract.h"
#include "ops/scatter_add_op.h"

#include <cstdint>
#include <limits>
#include <type_traits>

namespace detops {

enum class Reduction : int { Sum, Prod, Mean, Max, Min };

// The combine of each reduction: floating accumulate types round each operation on its own, integers
// (computed in int64) wrap exactly.
template <typename acc_t, Reduction R>
using reduce_combine_t = std::conditional_t<
    R == Reduction::Max, MaxNan,
    std::conditional_t<R == Reduction::Min, MinNan,
                       std::conditional_t<R == Reduction::Prod,
                                          std::conditional_t<std::is_integral_v<acc_t>, WrapMul, MulRn>,
                                          std::conditional_t<std::is_integral_v<acc_t>, WrapAdd, AddRn>>>>;

// v as an integer of `bits` bits (two's complement, or unsigned), held in int64.
C10_HOST_DEVICE inline int64_t wrap_to_bits(int64_t v, int bits, bool is_unsigned) {
  if (bits >= 64) return v;
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  uint64_t u = static_cast<uint64_t>(v) & mask;
  if (!is_unsigned && ((u >> (bits - 1)) & 1u)) u |= ~mask;
  return static_cast<int64_t>(u);
}

// Stock's integer division with rounding mode "floor" (c10::div_floor_integer); b != 0.
C10_HOST_DEVICE inline int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) --q;
  return q;
}

// Step 4 of the contract for one destination of a reduction: `total` is the contract's fold of its
// `count` (>= 1) contributions.
template <typename scalar_t, Reduction R>
struct ReduceFinish {
  using acc_t = acc_type<scalar_t>;
  bool include_self;
  int int_bits;       // integer dtypes (computed in int64): the width of the tensor's dtype, for mean
  bool int_unsigned;

  C10_HOST_DEVICE scalar_t operator()(scalar_t self, acc_t total, int64_t count) const {
    using Combine = reduce_combine_t<acc_t, R>;
    acc_t y;
    if (include_self) {
      y = Combine()(to_acc(self), total);
    } else if constexpr (R == Reduction::Sum || R == Reduction::Mean) {
      // NB: stock fills the destination with +0 first, so a sum of -0.0 alone is +0.0.
      y = Combine()(acc_t(0), total);
    } else {
      y = total;  // 1 * S, max(-inf, S) and min(inf, S) are S
    }
    const int64_t n = count + (include_self ? 1 : 0);
    if constexpr (std::is_integral_v<acc_t>) {
      if constexpr (R == Reduction::Mean) {
        // Stock sums and counts in the tensor's dtype, then divides with rounding mode "floor".
        const int64_t c = wrap_to_bits(n, int_bits, int_unsigned);
        y = floor_div(wrap_to_bits(y, int_bits, int_unsigned), c == 0 ? 1 : c);
      }
      return static_cast<scalar_t>(y);
    } else {
      if constexpr (R == Reduction::Mean) y = div_rn(y, static_cast<acc_t>(n));
      // NB: x86 keeps a NaN operand's sign and payload, CUDA gives its canonical NaN; every NaN result is
      // written as the positive quiet NaN so that the CPU and CUDA bits agree.
      if (y != y) y = std::numeric_limits<acc_t>::quiet_NaN();
      return round_to<scalar_t>(y);
    }
  }
};

template <typename scalar_t, Reduction R, typename Layout>
struct ScatterReduceOp {
  using acc_t = acc_type<scalar_t>;
  using Combine = reduce_combine_t<acc_t, R>;
  scalar_t* out;          // contiguous
  const scalar_t* src;    // strided
  Layout layout;              // ScatterElements or ScatterRows (ops/scatter_add_op.h)
  const int64_t* counts;  // reduce='mean' only: per key
  ReduceFinish<scalar_t, R> finish;

  C10_HOST_DEVICE int64_t key(int64_t i) const {
    return layout.key(i);
  }
  C10_HOST_DEVICE acc_t contribution(int64_t i, int64_t c) const {
    return to_acc(src[layout.src_offset(i, c)]);
  }
  C10_HOST_DEVICE void finalize(int64_t k, int64_t c, acc_t total) const {
    const int64_t o = layout.out_offset(k, c);
    out[o] = finalized(out[o], total, k);
  }
  C10_HOST_DEVICE scalar_t finalized(scalar_t old, acc_t total, int64_t k) const {
    return finish(old, total, counts == nullptr ? 0 : counts[k]);
  }
  // finalize() of key k's columns [c0, c0 + cols) (the CPU engine's rows: has_finalize_columns,
  // ops/sort_reduce_cpu.h): mean's count read once, so that the loop vectorises (reading it per column, as
  // finalized() does, kept the loop scalar).
  void finalize_columns(int64_t k, int64_t c0, int64_t cols, const acc_t* total) const {
    const int64_t count = counts == nullptr ? 0 : counts[k];
    const ReduceFinish<scalar_t, R> f = finish;
    const Layout l = layout;
    scalar_t* const o = out;
    for (int64_t c = 0; c < cols; ++c) {
      scalar_t& d = o[l.out_offset(k, c0 + c)];
      d = f(d, total[c], count);
    }
  }
  // The CPU engine's dense destinations (has_dense_out, ops/sort_reduce_cpu.h): key k's is out[k].
  scalar_t* dense_out() const {
    return Layout::kKeysAreOffsets ? out : nullptr;
  }
};

}  // namespace detops

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>

#include <vector>

namespace detops {

// The integer dtype facts ReduceFinish needs for mean (integers are computed in int64).
struct IntDtype {
  int bits = 64;
  bool is_unsigned = false;
};

// Stock's dispatch of one reduction name: f(std::integral_constant<Reduction, R>{}).
template <typename F>
void dispatch_reduction(Reduction reduce, F&& f) {
  switch (reduce) {
    case Reduction::Sum:
      return f(std::integral_constant<Reduction, Reduction::Sum>{});
    case Reduction::Prod:
      return f(std::integral_constant<Reduction, Reduction::Prod>{});
    case Reduction::Mean:
      return f(std::integral_constant<Reduction, Reduction::Mean>{});
    case Reduction::Max:
      return f(std::integral_constant<Reduction, Reduction::Max>{});
    case Reduction::Min:
      return f(std::integral_constant<Reduction, Reduction::Min>{});
  }
}

// The reduction over one layout of with_scatter_layout (n contributions, num_keys keys, D columns) on an
// engine; the CPU path reaches it with its own layouts too (ops/scatter_cpu.h).
template <typename Engine, typename Layout>
void scatter_reduce_on_layout(const Layout& layout, int64_t n, int64_t num_keys, int64_t D, at::Tensor& result,
                              const at::Tensor& src, Reduction reduce, bool include_self, IntDtype ints) {
  at::Tensor counts;
  if (reduce == Reduction::Mean) {
    // NB: a destination's count is the same for every column, and an integer count is exact in any order.
    counts = at::zeros({num_keys}, result.options().dtype(at::kLong));
    Engine::count_keys(layout, n, num_keys, counts.data_ptr<int64_t>());
  }
  AT_DISPATCH_FLOATING_TYPES_AND3(at::kHalf, at::kBFloat16, at::kLong, result.scalar_type(),
                                  "detops_scatter_reduce", [&] {
    dispatch_reduction(reduce, [&](auto r) {
      ScatterReduceOp<scalar_t, decltype(r)::value, Layout> op;
      op.out = result.data_ptr<scalar_t>();
      op.src = src.const_data_ptr<scalar_t>();
      op.layout = layout;
      op.counts = counts.defined() ? counts.const_data_ptr<int64_t>() : nullptr;
      op.finish = {include_self, ints.bits, ints.is_unsigned};
      Engine::template sort_reduce<acc_type<scalar_t>>("scatter_reduce_", op, n, num_keys, D, result);
    });
  });
}

// result (contiguous, holding self; a floating dtype, or int64 holding an integer tensor of dtype `ints`)
// gets the scatter_reduce of `src` (result's dtype) on an engine (cpu::Engine or cuda::Engine); index is
// int64 and the arguments are checked by the front end.
template <typename Engine>
void scatter_reduce_compute(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                            Reduction reduce, bool include_self, IntDtype ints) {
  if (index.numel() == 0 || result.numel() == 0) return;
  with_scatter_layout<int64_t>("scatter_reduce_", result, dim, index, src,
                               [&](const auto& layout, int64_t n, int64_t num_keys, int64_t D) {
    scatter_reduce_on_layout<Engine>(layout, n, num_keys, D, result, src, reduce, include_self, ints);
  });
}

namespace cuda {
// scatter_reduce_compute on the CUDA engine (cuda/scatter_reduce.cu).
void scatter_reduce_kernel(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                           Reduction reduce, bool include_self, IntDtype ints);
}  // namespace cuda

}  // namespace detops
