// Pooling backwards: the per-element arithmetic shared by the CPU path (ops/pooling.cpp) and the CUDA
// kernels (cuda/pooling.cu), docs/order_contract.md.
//
// Source order for an input element is ascending output linear position within its (N, C) plane.
// - Average pools (avg_pool3d, adaptive avg 2d/3d) use a gather: one input element enumerates the output
//   elements whose window covers it, in ascending (t, h, w) order, and folds their contributions with
//   StreamingTree, the contract's tree fed one value at a time.
// - Max pools (adaptive max 2d/3d, fractional max 2d/3d, max_pool3d_with_indices) run the sort-reduce
//   engine: output element i sends grad_output[i] to key plane * input_plane_size + indices[i]; the stable
//   sort keeps ascending output position within each key, so it is the same order and the same tree. On CUDA a
//   gather comes first where it can (MaxPoolGatherOp): each input element walks the outputs whose box covers it
//   and folds those whose index selects it; the engine then runs gated, recomputing only where some index lies
//   outside its output's box.
// Planes are contiguous [planes, T, H, W] (2-D ops use T = 1). The starting value is 0, so an input
// element with contributions gets round_to(0 + S), one with none gets 0.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/contract.h"
#include "ops/index_math.h"
#include "ops/plan_record.h"

namespace detops {

// Stock's adaptive windows (aten/src/ATen/native/AdaptivePooling.h): output o of `out` covers inputs
// [start, end) of `in`. `by_out` divides by out.
template <typename index_t>
C10_HOST_DEVICE inline index_t adaptive_start(index_t o, const Divider<index_t>& by_out, index_t in) {
  index_t q, r;
  by_out.divmod(o, q, r);
  return q * in + by_out.div(r * in);
}
template <typename index_t>
C10_HOST_DEVICE inline index_t adaptive_end(index_t o, const Divider<index_t>& by_out, index_t in) {
  return 1 + by_out.div((o + 1) * in - 1);
}

struct PoolDims {
  int64_t isize[3];   // T, H, W of the input plane
  int64_t osize[3];   // T, H, W of the output plane
  int64_t kernel[3];  // regular windows only
  int64_t stride[3];
  int64_t pad[3];
};

// Input element idx (linear in [planes, IT, IH, IW], by_in dividing by IT, IH, IW) as its plane and (t, h, w).
template <typename index_t>
C10_HOST_DEVICE inline void pool_element(const Divider<index_t> (&by_in)[3], index_t idx, index_t& plane,
                                         index_t (&i)[3]) {
  index_t rest;
  by_in[2].divmod(idx, rest, i[2]);
  by_in[1].divmod(rest, rest, i[1]);
  by_in[0].divmod(rest, plane, i[0]);
}

// One grad_input element per call. index_t is int32_t where every size and position of the call fits (the
// host decides), else int64_t. kBounded: the host knows no element is covered by more than kBlock
// windows, so only BlockFold is compiled in.
template <typename scalar_t, typename index_t, bool kBounded_>
struct AvgPoolBackwardOp {
  using acc_t = acc_type<scalar_t>;
  using index_type = index_t;
  static constexpr bool kBounded = kBounded_;
  const scalar_t* grad_out;  // contiguous [planes, OT, OH, OW]
  scalar_t* grad_in;         // contiguous [planes, IT, IH, IW]
  index_t isize[3];
  index_t osize[3];
  index_t kernel[3];
  index_t stride[3];
  index_t pad[3];
  Divider<index_t> by_in[3];      // isize[k]
  Divider<index_t> by_out[3];     // osize[k]
  Divider<index_t> by_stride[3];  // stride[k]
  bool adaptive;
  bool count_include_pad;
  int64_t divisor_override;  // 0: none

  // Stock's window of output o along dimension k, unclipped.
  C10_HOST_DEVICE void window(int k, index_t o, index_t& start, index_t& end) const {
    if (adaptive) {
      start = adaptive_start(o, by_out[k], isize[k]);
      end = adaptive_end(o, by_out[k], isize[k]);
    } else {
      start = o * stride[k] - pad[k];
      end = start + kernel[k];
    }
  }

  C10_HOST_DEVICE bool covers(int k, index_t o, index_t i) const {
    index_t start, end;
    window(k, o, start, end);
    return start <= i && i < end;
  }

  // The outputs along dimension k whose window covers input i: [lo, hi). Windows' starts and ends both
  // grow with o, so they are consecutive: a superset of candidates, narrowed from both sides.
  C10_HOST_DEVICE void range(int k, index_t i, index_t& lo, index_t& hi) const {
    const index_t out = osize[k];
    if (adaptive) {
      lo = adaptive_start(i, by_in[k], out) - 1;
      hi = adaptive_end(i, by_in[k], out) + 1;
    } else {
      const index_t num = i + pad[k] - kernel[k] + 1;  // o * stride >= num
      lo = num <= 0 ? index_t{0} : by_stride[k].div(num + stride[k] - 1);
      hi = by_stride[k].div(i + pad[k]) + 1;
    }
    lo = lo < 0 ? index_t{0} : lo;
    hi = hi > out ? out : hi;
    while (lo < hi && !covers(k, lo, i)) ++lo;
    while (hi > lo && !covers(k, hi - 1, i)) --hi;
  }

  // Output o's window along dimension k: the size stock divides by (adaptive: end - start; avg_pool3d: the
  // window clipped to the padded input) and, for avg_pool3d, the part inside the input.
  C10_HOST_DEVICE void window_sizes(int k, index_t o, index_t& size, index_t& inside) const {
    index_t start, end;
    window(k, o, start, end);
    if (adaptive) {
      size = end - start;
      inside = size;
      return;
    }
    end = end < isize[k] + pad[k] ? end : isize[k] + pad[k];
    size = end - start;
    start = start > 0 ? start : index_t{0};
    end = end < isize[k] ? end : isize[k];
    inside = end - start;
  }

  // An output's contribution to each input it covers, from its gradient g and its window_sizes(), computed
  // as stock computes it: adaptive: g / kT / kH / kW (kT = 1 for the 2-D op, an exact division);
  // avg_pool3d: g / divide_factor with stock's ceil_mode / count_include_pad / divisor_override rules.
  C10_HOST_DEVICE acc_t scaled(acc_t g, const index_t* size, const index_t* inside) const {
    if (adaptive) {
      acc_t v = g;
      DETOPS_UNROLL
      for (int k = 0; k < 3; ++k) v = div_rn(v, static_cast<acc_t>(size[k]));
      return v;
    }
    const int64_t pool_size = int64_t{size[0]} * size[1] * size[2];
    const int64_t clipped = int64_t{inside[0]} * inside[1] * inside[2];
    const int64_t divide_factor = divisor_override != 0 ? divisor_override : count_include_pad ? pool_size : clipped;
    return div_rn(g, static_cast<acc_t>(divide_factor));
  }

  C10_HOST_DEVICE acc_t contribution(index_t plane, index_t ot, index_t oh, index_t ow) const {
    const acc_t g = to_acc(grad_out[((plane * osize[0] + ot) * osize[1] + oh) * osize[2] + ow]);
    const index_t o[3] = {ot, oh, ow};
    index_t size[3], inside[3];
    DETOPS_UNROLL
    for (int k = 0; k < 3; ++k) window_sizes(k, o[k], size[k], inside[k]);
    return scaled(g, size, inside);
  }

  // The value of an element with one contribution v: one block of one, v itself.
  C10_HOST_DEVICE static scalar_t single(acc_t v) { return round_to<scalar_t>(add_rn(acc_t(0), v)); }

  // The value of an input element covered by the outputs [lo, hi) of each dimension: get(ot, oh, ow), the
  // outputs' contributions, in ascending output position, folded by the contract's tree.
  template <typename Get>
  C10_HOST_DEVICE scalar_t gather(const index_t* lo, const index_t* hi, const Get& get) const {
    const index_t total = (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]);
    if (total == 0) return round_to<scalar_t>(acc_t(0));
    if (total == 1) return single(get(lo[0], lo[1], lo[2]));
    acc_t sum;
    // NB: at most kBlock contributions are one block of the contract's tree, a plain left fold; more go
    // through StreamingTree. Both give tree_reduce's bits for the same sequence.
    if (kBounded || total <= kBlock) {
      BlockFold<acc_t> fold;
      visit(lo, hi, get, fold);
      sum = fold.finish();
    } else {
      StreamingTree<acc_t> tree;
      visit(lo, hi, get, tree);
      sum = tree.finish();
    }
    return round_to<scalar_t>(add_rn(acc_t(0), sum));
  }

  template <typename Get, typename Acc>
  C10_HOST_DEVICE void visit(const index_t* lo, const index_t* hi, const Get& get, Acc& acc) const {
    for (index_t ot = lo[0]; ot < hi[0]; ++ot) {
      for (index_t oh = lo[1]; oh < hi[1]; ++oh) {
        for (index_t ow = lo[2]; ow < hi[2]; ++ow) acc.push(get(ot, oh, ow));
      }
    }
  }

  // Input element `idx` (linear in [planes, IT, IH, IW]).
  C10_HOST_DEVICE void operator()(index_t idx) const {
    index_t plane, i[3];
    pool_element(by_in, idx, plane, i);
    index_t lo[3], hi[3];
DETOPS_UNROLL
    for (int k = 0; k < 3; ++k) range(k, i[k], lo[k], hi[k]);
    grad_in[idx] = gather(lo, hi, [&](index_t ot, index_t oh, index_t ow) { return contribution(plane, ot, oh, ow); });
  }
};

// The average pools in two steps (avg_pool_backward_run): AvgPoolScaleOp computes each output's contribution
// once, and each axis position's covering outputs, into a scratch buffer; AvgPoolScaledGatherOp then gathers
// from there. NB: the same contribution() and range() of the same op, so each element folds the same values in
// the same order as the one-step op, and gets its bits; the one-step op recomputes each contribution (window
// sizes, a division) for every input it covers, and each range for every element.
template <typename scalar_t, typename index_t, bool kBounded>
struct AvgPoolScaleOp {
  using acc_t = acc_type<scalar_t>;
  using index_type = index_t;
  AvgPoolBackwardOp<scalar_t, index_t, kBounded> op;
  acc_t* scaled;    // [planes, OT, OH, OW]: contribution() of each output
  index_t* ranges;  // axis k, position i: range() at 2 * (at[k] + i) (lo) and the next word (hi)
  index_t at[3];    // 0, IT, IT + IH
  index_t outputs;  // planes * OT * OH * OW

  // Item j: output j while j < outputs, then the axes' positions in order.
  C10_HOST_DEVICE void operator()(index_t j) const {
    if (j < outputs) {
      index_t plane, o[3];
      pool_element(op.by_out, j, plane, o);
      scaled[j] = op.contribution(plane, o[0], o[1], o[2]);
      return;
    }
    const index_t p = j - outputs;
    const int k = p < at[1] ? 0 : p < at[2] ? 1 : 2;
    op.range(k, p - at[k], ranges[2 * p], ranges[2 * p + 1]);
  }
};

template <typename scalar_t, typename index_t, bool kBounded>
struct AvgPoolScaledGatherOp {
  using acc_t = acc_type<scalar_t>;
  using index_type = index_t;
  AvgPoolBackwardOp<scalar_t, index_t, kBounded> op;
  const acc_t* scaled;
  const index_t* ranges;
  index_t at[3];

  // Input element `idx` (linear in [planes, IT, IH, IW]).
  C10_HOST_DEVICE void operator()(index_t idx) const {
    index_t plane, i[3];
    pool_element(op.by_in, idx, plane, i);
    index_t lo[3], hi[3];
    DETOPS_UNROLL
    for (int k = 0; k < 3; ++k) {
      lo[k] = ranges[2 * (at[k] + i[k])];
      hi[k] = ranges[2 * (at[k] + i[k]) + 1];
    }
    const acc_t* c = scaled + plane * (op.osize[0] * op.osize[1] * op.osize[2]);
    op.grad_in[idx] = op.gather(lo, hi, [&](index_t ot, index_t oh, index_t ow) {
      return c[(ot * op.osize[1] + oh) * op.osize[2] + ow];
    });
  }
};

// Max pools over the sort-reduce engine: one contribution per output element, one column.
template <typename scalar_t>
struct MaxPoolBackwardOp {
  using acc_t = acc_type<scalar_t>;
  const scalar_t* grad_out;  // contiguous [planes, output_plane]
  const int64_t* indices;    // contiguous, same shape
  scalar_t* grad_in;         // contiguous [planes, input_plane], zero-filled or written by MaxPoolGatherOp
  int64_t output_plane;
  int64_t input_plane;
  const int32_t* gate = nullptr;  // after MaxPoolGatherOp: its flag (the call does nothing while it is 0)

  C10_HOST_DEVICE int64_t key(int64_t i) const {
    const int64_t k = indices[i];
    return (k >= 0 && k < input_plane) ? (i / output_plane) * input_plane + k : -1;
  }
  C10_HOST_DEVICE acc_t contribution(int64_t i, int64_t) const { return to_acc(grad_out[i]); }
  C10_HOST_DEVICE void finalize(int64_t key, int64_t, acc_t total) const {
    grad_in[key] = round_to<scalar_t>(add_rn(acc_t(0), total));
  }
};

// Max pools as a gather. The box of output o along dimension k is the range of inputs [lo, hi) its index may
// select there, both bounds non-decreasing in o: stock's window for the adaptive pools, the dilated window's extent
// for max_pool3d, and for the fractional pools, whose windows follow the forward's random samples (unknown to the
// backward), the windows the forward picks: stock's start floor((o + u) * a) - floor(u * a), a = (I - P) / (O - 1),
// u in [0, 1), is q = floor(o * a) or q + 1 in exact arithmetic, so the box is [q, q + P + 1). Float rounding moves
// a start one further only where (o + u) * a or u * a and o * a all lie within a rounding of an integer (never in 2M
// planes of uniform samples, docs/pooling.md); an index in such a window opens the gate (MaxPoolGatherOp): the
// engine's bits, at its cost. Clipped to the input.
enum class MaxBox : int { kAdaptive = 0, kWindow = 1, kFractional = 2 };

// dims: isize, osize; kWindow: kernel (the dilated extent (K - 1) * dilation + 1), stride, pad; kFractional:
// kernel (the pool size).
inline void max_pool_box(MaxBox kind, const PoolDims& d, int k, int64_t o, int64_t& lo, int64_t& hi) {
  const int64_t in = d.isize[k];
  const int64_t out = d.osize[k];
  if (kind == MaxBox::kAdaptive) {
    lo = o * in / out;
    hi = ((o + 1) * in + out - 1) / out;
  } else if (kind == MaxBox::kWindow) {
    lo = o * d.stride[k] - d.pad[k];
    hi = lo + d.kernel[k];
  } else {
    const int64_t q = out > 1 ? o * (in - d.kernel[k]) / (out - 1) : in - d.kernel[k];
    lo = q;
    hi = q + 1 + d.kernel[k];
  }
  lo = lo < 0 ? 0 : lo;
  hi = hi > in ? in : hi;
}

// The gather's tables, host side: word 0 the gate (0; MaxPoolGatherOp sets it), then per dimension k the boxes of
// the outputs (box_lo, box_hi: osize[k] words each) and, for each input position, the outputs whose boxes cover it
// (run_lo, run_hi: isize[k] words each; consecutive, as both box bounds grow with o).
struct MaxPoolTables {
  std::vector<int64_t> words;
  int64_t box_at[3] = {0, 0, 0};
  int64_t run_at[3] = {0, 0, 0};
  int64_t most = 1;     // the most outputs whose boxes cover one input element (the per-dimension maxima's product)
  bool usable = true;   // every box holds an input (else an index of that output selects nothing the gather sees)
};

inline MaxPoolTables build_max_pool_tables(MaxBox kind, const PoolDims& d) {
  MaxPoolTables t;
  t.words.push_back(0);
  for (int k = 0; k < 3; ++k) {
    const int64_t out = d.osize[k];
    const int64_t in = d.isize[k];
    // NB: stock's fractional backward never reads kernel_size, so any value may come: one outside [1, in] (or an
    // empty side) places no box.
    if (out < 1 || in < 1 || (kind == MaxBox::kFractional && (d.kernel[k] < 1 || d.kernel[k] > in))) {
      t.usable = false;
      return t;
    }
    t.box_at[k] = static_cast<int64_t>(t.words.size());
    t.words.resize(static_cast<size_t>(t.box_at[k] + 2 * out));
    int64_t* box_lo = t.words.data() + t.box_at[k];
    int64_t* box_hi = box_lo + out;
    for (int64_t o = 0; o < out; ++o) {
      max_pool_box(kind, d, k, o, box_lo[o], box_hi[o]);
      t.usable = t.usable && box_lo[o] < box_hi[o];
    }
    t.run_at[k] = static_cast<int64_t>(t.words.size());
    t.words.resize(static_cast<size_t>(t.run_at[k] + 2 * in));
    box_lo = t.words.data() + t.box_at[k];
    box_hi = box_lo + out;
    int64_t* run_lo = t.words.data() + t.run_at[k];
    int64_t* run_hi = run_lo + in;
    int64_t first = 0, end = 0, widest = 0;
    for (int64_t i = 0; i < in; ++i) {
      while (first < out && box_hi[first] <= i) ++first;
      while (end < out && box_lo[end] <= i) ++end;
      run_lo[i] = first;
      run_hi[i] = end > first ? end : first;
      widest = std::max(widest, run_hi[i] - run_lo[i]);
    }
    t.most *= widest;
  }
  return t;
}

// Sets a gate: one thread or many, the same word.
C10_HOST_DEVICE inline void raise_gate(int32_t* gate) {
#if defined(__CUDA_ARCH__)
  atomicExch(gate, 1);
#else
  __atomic_store_n(gate, 1, __ATOMIC_RELAXED);
#endif
}

// One grad_input element per call (docs/pooling.md): the outputs whose boxes cover it, in ascending position,
// those whose index selects it folded with the contract's tree (BlockFold, or StreamingTree where more than kBlock
// select it: a second walk; kBounded: the host knows no element has more than kBlock candidates), rounded once. Where
// every index lies in its output's box, that is the engine's sequence for the element, so its bits. The element at
// the first corner of an output's box checks that output's index against the box and raises the gate if it lies
// outside, or outside the plane: the engine's gated call then recomputes every selected element (those nobody
// selects are 0 either way). index_t: int32_t where every size and position fits.
template <typename scalar_t, typename index_t, bool kBounded>
struct MaxPoolGatherOp {
  using acc_t = acc_type<scalar_t>;
  using index_type = index_t;
  const scalar_t* grad_out;  // contiguous [planes, OT, OH, OW]
  const int64_t* indices;    // contiguous, the same shape
  scalar_t* grad_in;         // contiguous [planes, IT, IH, IW]
  const int64_t* box_lo[3];
  const int64_t* box_hi[3];
  const int64_t* run_lo[3];
  const int64_t* run_hi[3];
  index_t isize[3];
  index_t osize[3];
  index_t input_plane;
  index_t output_plane;
  Divider<index_t> by_in[3];  // isize[k]
  int32_t* gate;

  // Whether index v of output (ot, oh, ow) lies in the plane and in the output's box.
  C10_HOST_DEVICE bool in_box(int64_t v, index_t ot, index_t oh, index_t ow) const {
    if (v < 0 || v >= input_plane) return false;
    index_t rest, j[3];
    by_in[2].divmod(static_cast<index_t>(v), rest, j[2]);
    by_in[1].divmod(rest, j[0], j[1]);
    const index_t o[3] = {ot, oh, ow};
    bool in = true;
    DETOPS_UNROLL
    for (int k = 0; k < 3; ++k) in = in && j[k] >= box_lo[k][o[k]] && j[k] < box_hi[k][o[k]];
    return in;
  }

  template <typename Acc>
  C10_HOST_DEVICE void fold(const index_t* lo, const index_t* hi, const int64_t* ind, const scalar_t* g, index_t self,
                            Acc& acc) const {
    for (index_t ot = lo[0]; ot < hi[0]; ++ot) {
      for (index_t oh = lo[1]; oh < hi[1]; ++oh) {
        const index_t row = (ot * osize[1] + oh) * osize[2];
        for (index_t ow = lo[2]; ow < hi[2]; ++ow) {
          if (ind[row + ow] == self) acc.push(to_acc(g[row + ow]));
        }
      }
    }
  }

  C10_HOST_DEVICE void operator()(index_t idx) const {
    index_t plane, i[3];
    pool_element(by_in, idx, plane, i);
    index_t lo[3], hi[3];
    DETOPS_UNROLL
    for (int k = 0; k < 3; ++k) {
      lo[k] = static_cast<index_t>(run_lo[k][i[k]]);
      hi[k] = static_cast<index_t>(run_hi[k][i[k]]);
    }
    const index_t self = idx - plane * input_plane;
    const int64_t* ind = indices + int64_t{plane} * output_plane;
    const scalar_t* g = grad_out + int64_t{plane} * output_plane;
    BlockFold<acc_t> first;
    index_t selected = 0;
    bool outside = false;
    for (index_t ot = lo[0]; ot < hi[0]; ++ot) {
      const bool own_t = box_lo[0][ot] == i[0];
      for (index_t oh = lo[1]; oh < hi[1]; ++oh) {
        const bool own_th = own_t && box_lo[1][oh] == i[1];
        const index_t row = (ot * osize[1] + oh) * osize[2];
        for (index_t ow = lo[2]; ow < hi[2]; ++ow) {
          const int64_t v = ind[row + ow];
          if (v == self) {
            if (kBounded || selected < kBlock) first.push(to_acc(g[row + ow]));
            ++selected;
          }
          if (own_th && box_lo[2][ow] == i[2] && !in_box(v, ot, oh, ow)) outside = true;
        }
      }
    }
    if (outside) raise_gate(gate);
    if (selected == 0) {
      grad_in[idx] = round_to<scalar_t>(acc_t(0));
      return;
    }
    acc_t sum = first.finish();
    if constexpr (!kBounded) {
      // NB: more than kBlock: the whole sequence again through StreamingTree, the same tree's bits.
      if (selected > kBlock) {
        StreamingTree<acc_t> tree;
        fold(lo, hi, ind, g, self, tree);
        sum = tree.finish();
      }
    }
    grad_in[idx] = round_to<scalar_t>(add_rn(acc_t(0), sum));
  }
};

}  // namespace detops

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <type_traits>
#include <vector>

namespace detops {

// Builders over contiguous tensors; grad_in is the result, grad_out and indices its inputs.
template <typename scalar_t, typename index_t, bool kBounded>
AvgPoolBackwardOp<scalar_t, index_t, kBounded> make_avg_pool_op(at::Tensor& grad_in, const at::Tensor& grad_out,
                                                                const PoolDims& dims, bool adaptive,
                                                                bool count_include_pad, int64_t divisor_override) {
  AvgPoolBackwardOp<scalar_t, index_t, kBounded> op;
  op.grad_out = grad_out.const_data_ptr<scalar_t>();
  op.grad_in = grad_in.data_ptr<scalar_t>();
  for (int k = 0; k < 3; ++k) {
    op.isize[k] = static_cast<index_t>(dims.isize[k]);
    op.osize[k] = static_cast<index_t>(dims.osize[k]);
    op.kernel[k] = static_cast<index_t>(dims.kernel[k]);
    op.stride[k] = static_cast<index_t>(dims.stride[k]);
    op.pad[k] = static_cast<index_t>(dims.pad[k]);
    op.by_in[k] = Divider<index_t>(op.isize[k]);
    op.by_out[k] = Divider<index_t>(std::max<index_t>(op.osize[k], 1));  // an empty output divides nothing
    op.by_stride[k] = Divider<index_t>(op.stride[k]);
  }
  op.adaptive = adaptive;
  op.count_include_pad = count_include_pad;
  op.divisor_override = divisor_override;
  return op;
}

template <typename scalar_t>
MaxPoolBackwardOp<scalar_t> make_max_pool_op(at::Tensor& grad_in, const at::Tensor& grad_out, const at::Tensor& indices,
                                             int64_t output_plane, int64_t input_plane) {
  MaxPoolBackwardOp<scalar_t> op;
  op.grad_out = grad_out.const_data_ptr<scalar_t>();
  op.indices = indices.const_data_ptr<int64_t>();
  op.grad_in = grad_in.data_ptr<scalar_t>();
  op.output_plane = output_plane;
  op.input_plane = input_plane;
  return op;
}

// The outputs covering each input position along dimension k: lo[i], hi[i] (the op's range()).
template <typename Op>
void pool_axis_ranges(const Op& op, int k, std::vector<int64_t>& lo, std::vector<int64_t>& hi) {
  const int64_t n = op.isize[k];
  lo.resize(static_cast<size_t>(n));
  hi.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) op.range(k, i, lo[i], hi[i]);
}

// The most windows covering one input element (a bound: the product of the per-dimension maxima).
template <typename Op>
int64_t pool_max_windows(const Op& op) {
  int64_t most = 1;
  std::vector<int64_t> lo, hi;
  for (int k = 0; k < 3; ++k) {
    pool_axis_ranges(op, k, lo, hi);
    int64_t m = 0;
    for (size_t i = 0; i < lo.size(); ++i) m = std::max(m, hi[i] - lo[i]);
    most *= m;
  }
  return most;
}

// True when every position and intermediate of the call fits 32-bit index math (with room for a grid
// stride; adaptive windows multiply a position by a size).
inline bool pool_fits_int32(const at::Tensor& grad_in, const at::Tensor& grad_out, const PoolDims& d) {
  constexpr int64_t kLimit = int64_t{1} << 30;
  bool fits = grad_in.numel() < kLimit && grad_out.numel() < kLimit;
  for (int k = 0; k < 3; ++k) {
    fits = fits && (d.isize[k] + 1) * (d.osize[k] + 1) < kLimit &&
           d.isize[k] + 2 * (d.pad[k] + d.kernel[k] + d.stride[k]) < kLimit;
  }
  return fits;
}

// Calls f(op) with the op the call needs: 32-bit index math where it fits (unless force_general), and the
// BlockFold-only op where the host knows no element has more than kBlock windows.
template <typename scalar_t, typename F>
void with_avg_pool_op(at::Tensor& grad_in, const at::Tensor& grad_out, const PoolDims& dims, bool adaptive,
                      bool count_include_pad, int64_t divisor_override, bool force_general, const F& f) {
  const auto general = make_avg_pool_op<scalar_t, int64_t, false>(grad_in, grad_out, dims, adaptive, count_include_pad,
                                                                  divisor_override);
  if (force_general) return f(general);
  const bool bounded = pool_max_windows(general) <= kBlock;
  if (pool_fits_int32(grad_in, grad_out, dims)) {
    if (bounded) {
      return f(make_avg_pool_op<scalar_t, int32_t, true>(grad_in, grad_out, dims, adaptive, count_include_pad,
                                                         divisor_override));
    }
    return f(make_avg_pool_op<scalar_t, int32_t, false>(grad_in, grad_out, dims, adaptive, count_include_pad,
                                                        divisor_override));
  }
  if (bounded) {
    return f(make_avg_pool_op<scalar_t, int64_t, true>(grad_in, grad_out, dims, adaptive, count_include_pad,
                                                       divisor_override));
  }
  f(general);
}

// How the average pools run on an engine: one step (AvgPoolBackwardOp per element) or two (AvgPoolScaleOp over
// the outputs and the axes' positions, then AvgPoolScaledGatherOp per element). kAuto: two from
// kAvgPoolTwoSteps elements on; below, the second launch and the scratch cost more than the recomputation saves.
enum class AvgPoolSteps { kAuto, kOne, kTwo };
constexpr int64_t kAvgPoolTwoSteps = int64_t{1} << 16;

inline bool avg_pool_two_steps(AvgPoolSteps steps, int64_t n) {
  return steps == AvgPoolSteps::kTwo || (steps == AvgPoolSteps::kAuto && n >= kAvgPoolTwoSteps);
}

// The two steps' scratch: acc_t per output, then two index_t per axis position (avg_pool_backward_run).
inline int64_t avg_pool_scratch_bytes(const at::Tensor& grad_out, const PoolDims& d, int64_t acc_bytes,
                                      int64_t index_bytes) {
  const int64_t positions = d.isize[0] + d.isize[1] + d.isize[2];
  return grad_out.numel() * acc_bytes + 2 * positions * index_bytes;
}

// What the CUDA path of the average pools launches (ops/plan.h): one gather over grad_in; or the scale step
// (one launch, one allocation: the scratch) and then the gather. The CPU path, which computes otherwise, records
// these in its place.
inline std::vector<plan::EngineCall> avg_pool_backward_calls(const at::Tensor& grad_in, const at::Tensor& grad_out,
                                                             const PoolDims& d) {
  const int64_t n = grad_in.numel();
  if (!avg_pool_two_steps(AvgPoolSteps::kAuto, n)) return {plan::for_each_call(n)};
  const int64_t acc_bytes = grad_in.scalar_type() == at::kDouble ? 8 : 4;
  const int64_t index_bytes = pool_fits_int32(grad_in, grad_out, d) ? 4 : 8;
  const int64_t scratch = avg_pool_scratch_bytes(grad_out, d, acc_bytes, index_bytes);
  const int64_t element = static_cast<int64_t>(grad_in.element_size());
  // Traffic: grad_out read and the scratch written; then the scratch read and grad_in written.
  return {plan::kernel_call(/*launches=*/1, /*copies=*/0, /*allocations=*/1, scratch,
                            grad_out.numel() * element + scratch),
          plan::for_each_call(n)};
}

// Records avg_pool_backward_calls; true in plan-only mode (the caller then skips its work).
inline bool record_avg_pool_backward(const at::Tensor& grad_in, const at::Tensor& grad_out, const PoolDims& d) {
  bool skip = false;
  for (const plan::EngineCall& call : avg_pool_backward_calls(grad_in, grad_out, d)) skip = plan::record(call);
  return skip;
}

// Average pools on an engine: every element of grad_in (contiguous, the input's shape) gathers its windows from
// grad_out (contiguous); for_each(op, n) runs op(i) for i in [0, n) (cuda: launch_gather; the CPU engine's
// for_each in tests). steps (kAuto on CUDA) and force_general (the 64-bit, StreamingTree-capable op) change no
// bit. Nothing is recorded here: the caller records avg_pool_backward_calls.
template <typename scalar_t, typename ForEach>
void avg_pool_backward_run(at::Tensor& grad_in, const at::Tensor& grad_out, const PoolDims& d, bool adaptive,
                           bool count_include_pad, int64_t divisor_override, AvgPoolSteps steps, bool force_general,
                           const ForEach& for_each) {
  using acc_t = acc_type<scalar_t>;
  const int64_t n = grad_in.numel();
  if (n == 0) return;
  with_avg_pool_op<scalar_t>(grad_in, grad_out, d, adaptive, count_include_pad, divisor_override, force_general,
                             [&](const auto& op) {
    if (!avg_pool_two_steps(steps, n)) return for_each(op, n);
    using Op = std::decay_t<decltype(op)>;
    using index_t = typename Op::index_type;
    const int64_t outputs = grad_out.numel();
    const int64_t positions = d.isize[0] + d.isize[1] + d.isize[2];
    // The ranges first (a multiple of 8 bytes), then the contributions.
    const at::Tensor scratch = at::empty({avg_pool_scratch_bytes(grad_out, d, sizeof(acc_t), sizeof(index_t))},
                                         grad_in.options().dtype(at::kByte));
    auto* const base = static_cast<uint8_t*>(scratch.data_ptr());
    AvgPoolScaleOp<scalar_t, index_t, Op::kBounded> scale;
    scale.op = op;
    scale.ranges = reinterpret_cast<index_t*>(base);
    scale.scaled = reinterpret_cast<acc_t*>(base + 2 * positions * static_cast<int64_t>(sizeof(index_t)));
    scale.at[0] = 0;
    scale.at[1] = static_cast<index_t>(d.isize[0]);
    scale.at[2] = static_cast<index_t>(d.isize[0] + d.isize[1]);
    scale.outputs = static_cast<index_t>(outputs);
    for_each(scale, outputs + positions);
    AvgPoolScaledGatherOp<scalar_t, index_t, Op::kBounded> gather;
    gather.op = op;
    gather.scaled = scale.scaled;
    gather.ranges = scale.ranges;
    for (int k = 0; k < 3; ++k) gather.at[k] = scale.at[k];
    for_each(gather, n);
  });
}

// The most acc_t values avg_pool_backward_planes_cpu tabulates per thread for a plane's padded W rows; above
// it the rows are padded per use.
constexpr int64_t kAvgPoolRowTable = int64_t{1} << 18;

// Average pools, the CPU path: (N, C) planes in parallel. The covering outputs of each input position are
// tabulated once per call and each output's contribution once per plane, so no element divides; each
// element's value is the op's gather() over the same sequence (docs/order_contract.md), the bits of
// avg_pool_backward_run. row_table bounds the padded W rows' table (kAvgPoolRowTable; tests lower it).
template <typename scalar_t>
void avg_pool_backward_planes_cpu(at::Tensor& grad_in, const at::Tensor& grad_out, const PoolDims& d, bool adaptive,
                                  bool count_include_pad, int64_t divisor_override, int64_t row_table) {
  using acc_t = acc_type<scalar_t>;
  const auto op =
      make_avg_pool_op<scalar_t, int64_t, false>(grad_in, grad_out, d, adaptive, count_include_pad, divisor_override);
  std::vector<int64_t> lo[3], hi[3], size[3], inside[3];
  for (int k = 0; k < 3; ++k) {
    pool_axis_ranges(op, k, lo[k], hi[k]);
    size[k].resize(static_cast<size_t>(d.osize[k]));
    inside[k].resize(static_cast<size_t>(d.osize[k]));
    for (int64_t o = 0; o < d.osize[k]; ++o) op.window_sizes(k, o, size[k][o], inside[k][o]);
  }
  const int64_t width = d.isize[2];
  const int64_t iplane = d.isize[0] * d.isize[1] * width;
  const int64_t oplane = d.osize[0] * d.osize[1] * d.osize[2];
  const int64_t pairs = d.osize[0] * d.osize[1];  // (ot, oh) rows of outputs
  int64_t singles = 1;  // input positions of a plane covered by exactly one output
  int64_t most = 1;     // the most outputs covering one input position
  int64_t kw = 0;       // the most outputs covering one W position
  for (int k = 0; k < 3; ++k) {
    int64_t n = 0, m = 0;
    for (size_t i = 0; i < lo[k].size(); ++i) {
      n += hi[k][i] - lo[k][i] == 1;
      m = std::max(m, hi[k][i] - lo[k][i]);
    }
    singles *= n;
    most *= m;
    if (k == 2) kw = m;
  }
  // Many planes, mostly single (pooling heads): per input position of a plane, the one output covering it (0 if none
  // or several), and the others with the runs gather() walks. Else, where every element is one block of at most
  // kBlock, per row of W positions (padded rows, below); else per element.
  const int64_t planes = grad_in.numel() / iplane;
  const bool by_table = planes >= 8 && 4 * singles >= 3 * iplane;
  const bool by_rows = !by_table && most <= kBlock;
  std::vector<int64_t> only(by_table ? static_cast<size_t>(iplane) : 0);
  struct Multi {
    int64_t at, lo[3], hi[3];
  };
  std::vector<Multi> multi;
  if (by_table) {
    int64_t e = 0;
    for (int64_t it = 0; it < d.isize[0]; ++it) {
      for (int64_t ih = 0; ih < d.isize[1]; ++ih, e += width) {
        const int64_t l[3] = {lo[0][it], lo[1][ih], 0};
        const int64_t h[3] = {hi[0][it], hi[1][ih], 0};
        const bool one_row = h[0] - l[0] == 1 && h[1] - l[1] == 1;
        const int64_t base = (l[0] * d.osize[1] + l[1]) * d.osize[2];
        for (int64_t iw = 0; iw < width; ++iw) {
          const bool one = one_row && hi[2][iw] - lo[2][iw] == 1;
          only[e + iw] = one ? base + lo[2][iw] : 0;
          if (!one) multi.push_back(Multi{e + iw, {l[0], l[1], lo[2][iw]}, {h[0], h[1], hi[2][iw]}});
        }
      }
    }
  }
  // A padded row of output row (ot, oh): kw lines of `line` >= W values, line k holding at iw the contribution of
  // output ow = lo[iw] + k where k < hi[iw] - lo[iw], else -0. NB: -0 is the identity of round-to-nearest addition
  // (v + -0 is v, bit for bit, for every v: +0, -0 and NaN included), so adding a row's lines to running sums
  // started at -0, in (ot, oh) order, adds per element exactly gather()'s sequence in its order: the left fold of
  // one block. The filled slots are (slot_at, slot_from): position in the row and ow.
  constexpr int64_t kChunk = 8;  // W positions summed at once, in registers
  const int64_t line = (width + kChunk - 1) / kChunk * kChunk;
  std::vector<int64_t> slot_at, slot_from;
  if (by_rows) {
    for (int64_t k = 0; k < kw; ++k) {
      for (int64_t iw = 0; iw < width; ++iw) {
        if (k >= hi[2][iw] - lo[2][iw]) continue;
        slot_at.push_back(k * line + iw);
        slot_from.push_back(lo[2][iw] + k);
      }
    }
  }
  const int64_t row_len = kw * line;
  // Every padded row of a plane tabulated at once, where they fit row_table.
  const bool whole = by_rows && (row_len == 0 || pairs <= row_table / row_len);
  const size_t slots = slot_at.size();
  const int64_t grain = std::max<int64_t>(1, 32768 / (iplane + oplane));
  at::parallel_for(0, planes, grain, [&](int64_t begin, int64_t end) {
    std::vector<acc_t> c(static_cast<size_t>(oplane));
    std::vector<acc_t> rows(by_rows ? static_cast<size_t>((whole ? pairs : 1) * row_len) : 0, acc_t(-0.0));
    std::vector<acc_t> sums(by_rows && !whole ? static_cast<size_t>(width) : 0);
    for (int64_t p = begin; p < end; ++p) {
      const scalar_t* g = op.grad_out + p * oplane;
      acc_t* cp = c.data();
      for (int64_t ot = 0; ot < d.osize[0]; ++ot) {
        for (int64_t oh = 0; oh < d.osize[1]; ++oh) {
          for (int64_t ow = 0; ow < d.osize[2]; ++ow) {
            const int64_t s[3] = {size[0][ot], size[1][oh], size[2][ow]};
            const int64_t in[3] = {inside[0][ot], inside[1][oh], inside[2][ow]};
            *cp++ = op.scaled(to_acc(*g++), s, in);
          }
        }
      }
      const acc_t* cc = c.data();
      const auto get = [cc, &d](int64_t ot, int64_t oh, int64_t ow) {
        return cc[(ot * d.osize[1] + oh) * d.osize[2] + ow];
      };
      scalar_t* out = op.grad_in + p * iplane;
      if (by_table) {
        // gather()'s one contribution for every position, then the others overwritten.
        for (int64_t i = 0; i < iplane; ++i) out[i] = op.single(cc[only[i]]);
        for (const Multi& m : multi) out[m.at] = op.gather(m.lo, m.hi, get);
        continue;
      }
      if (!by_rows) {
        for (int64_t it = 0; it < d.isize[0]; ++it) {
          for (int64_t ih = 0; ih < d.isize[1]; ++ih, out += width) {
            for (int64_t iw = 0; iw < width; ++iw) {
              const int64_t l[3] = {lo[0][it], lo[1][ih], lo[2][iw]};
              const int64_t h[3] = {hi[0][it], hi[1][ih], hi[2][iw]};
              out[iw] = op.gather(l, h, get);
            }
          }
        }
        continue;
      }
      const auto fill = [&](int64_t pair, acc_t* row) {
        const acc_t* crow = cc + pair * d.osize[2];
        for (size_t s = 0; s < slots; ++s) row[slot_at[s]] = crow[slot_from[s]];
      };
      if (whole) {
        for (int64_t pair = 0; pair < pairs; ++pair) fill(pair, rows.data() + pair * row_len);
      }
      for (int64_t it = 0; it < d.isize[0]; ++it) {
        for (int64_t ih = 0; ih < d.isize[1]; ++ih, out += width) {
          const int64_t ot0 = lo[0][it], ot1 = hi[0][it], oh0 = lo[1][ih], oh1 = hi[1][ih];
          if (!whole) {
            // Each (ot, oh) row padded as it is used, its lines added to the W sums.
            acc_t* __restrict sum = sums.data();
            std::fill(sum, sum + width, acc_t(-0.0));
            for (int64_t ot = ot0; ot < ot1; ++ot) {
              for (int64_t oh = oh0; oh < oh1; ++oh) {
                fill(ot * d.osize[1] + oh, rows.data());
                for (int64_t k = 0; k < kw; ++k) {
                  const acc_t* __restrict x = rows.data() + k * line;
                  for (int64_t iw = 0; iw < width; ++iw) sum[iw] = add_rn(sum[iw], x[iw]);
                }
              }
            }
            for (int64_t iw = 0; iw < width; ++iw) out[iw] = op.single(sum[iw]);
            continue;
          }
          // kChunk positions at a time, their sums in registers over every line of the rows.
          for (int64_t c0 = 0; c0 < width; c0 += kChunk) {
            acc_t sum[kChunk];
            for (int64_t j = 0; j < kChunk; ++j) sum[j] = acc_t(-0.0);
            for (int64_t ot = ot0; ot < ot1; ++ot) {
              for (int64_t oh = oh0; oh < oh1; ++oh) {
                const acc_t* row = rows.data() + (ot * d.osize[1] + oh) * row_len + c0;
                for (int64_t k = 0; k < kw; ++k) {
                  for (int64_t j = 0; j < kChunk; ++j) sum[j] = add_rn(sum[j], row[k * line + j]);
                }
              }
            }
            // An element with no contribution keeps -0: single() gives +0, as gather() does.
            if (c0 + kChunk <= width) {
              for (int64_t j = 0; j < kChunk; ++j) out[c0 + j] = op.single(sum[j]);
            } else {
              scalar_t last[kChunk];
              for (int64_t j = 0; j < kChunk; ++j) last[j] = op.single(sum[j]);
              std::copy(last, last + (width - c0), out + c0);
            }
          }
        }
      }
    }
  });
}

inline void avg_pool_backward_cpu(at::Tensor& grad_in, const at::Tensor& grad_out, const PoolDims& dims,
                                  bool adaptive, bool count_include_pad, int64_t divisor_override,
                                  int64_t row_table = kAvgPoolRowTable) {
  if (grad_in.numel() == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_in.scalar_type(), "detops_avg_pool_backward", [&] {
    avg_pool_backward_planes_cpu<scalar_t>(grad_in, grad_out, dims, adaptive, count_include_pad, divisor_override,
                                           row_table);
  });
}

// The engine call of max_pool_backward_compute (ops/plan.h): every output sends its gradient to the input
// element its index selects. The CPU path, which folds without the engine, records it in its place.
// gated: after the gather (max_pool_backward_gathered), whose flag gates it.
template <typename scalar_t>
plan::EngineCall max_pool_backward_call(const at::Tensor& grad_in, const at::Tensor& grad_out, bool gated = false) {
  return plan::sort_reduce_call(grad_out.numel(), grad_in.numel(), 1, sizeof(acc_type<scalar_t>), gated);
}

// A max pool's boxes (MaxBox, max_pool_box): the call's dims and how its windows are placed.
struct MaxPoolBoxes {
  MaxBox kind = MaxBox::kAdaptive;
  PoolDims dims{};
};

// Whether a max pool's CUDA path gathers first (docs/pooling.md): every box holds an input, and the engine call
// takes the counting sort (a gated call runs only kernels of ours; a small call's single block is one launch
// already).
template <typename scalar_t>
bool max_pool_gathers(const MaxPoolTables& t, const at::Tensor& grad_in, const at::Tensor& grad_out) {
  return t.usable && plan::counting_sort(max_pool_backward_call<scalar_t>(grad_in, grad_out));
}

// What the gather issues besides the engine's call: the tables' one allocation and copy (pinned, asynchronous), the
// gather's launch. Traffic: the tables; each element's candidates' indices (a bound: the widest runs), their
// gradients where selected, the result.
template <typename scalar_t>
plan::EngineCall max_pool_gather_call(const MaxPoolTables& t, const at::Tensor& grad_in, const at::Tensor& grad_out) {
  const auto bytes = static_cast<int64_t>(t.words.size() * sizeof(int64_t));
  return plan::kernel_call(/*launches=*/1, /*copies=*/1, /*allocations=*/1, bytes,
                           bytes + grad_in.numel() * (t.most * 8 + sizeof(scalar_t)) +
                               grad_out.numel() * static_cast<int64_t>(sizeof(scalar_t)));
}

// The gather's op over the tables (words: where they are, host or device; the gate is word 0).
template <typename scalar_t, typename index_t, bool kBounded>
MaxPoolGatherOp<scalar_t, index_t, kBounded> make_max_gather_op(at::Tensor& grad_in, const at::Tensor& grad_out,
                                                                const at::Tensor& indices, const PoolDims& d,
                                                                const MaxPoolTables& t, int64_t* words) {
  MaxPoolGatherOp<scalar_t, index_t, kBounded> op;
  op.grad_out = grad_out.const_data_ptr<scalar_t>();
  op.indices = indices.const_data_ptr<int64_t>();
  op.grad_in = grad_in.data_ptr<scalar_t>();
  for (int k = 0; k < 3; ++k) {
    op.box_lo[k] = words + t.box_at[k];
    op.box_hi[k] = words + t.box_at[k] + d.osize[k];
    op.run_lo[k] = words + t.run_at[k];
    op.run_hi[k] = words + t.run_at[k] + d.isize[k];
    op.isize[k] = static_cast<index_t>(d.isize[k]);
    op.osize[k] = static_cast<index_t>(d.osize[k]);
    op.by_in[k] = Divider<index_t>(op.isize[k]);
  }
  op.input_plane = static_cast<index_t>(d.isize[0] * d.isize[1] * d.isize[2]);
  op.output_plane = static_cast<index_t>(d.osize[0] * d.osize[1] * d.osize[2]);
  op.gate = reinterpret_cast<int32_t*>(words);
  return op;
}

// Calls f(op) with the gather's op for the call: 32-bit index math where every size and position fits, the
// BlockFold-only op where no element has more than kBlock candidates.
template <typename scalar_t, typename F>
void with_max_gather_op(at::Tensor& grad_in, const at::Tensor& grad_out, const at::Tensor& indices, const PoolDims& d,
                        const MaxPoolTables& t, int64_t* words, const F& f) {
  constexpr int64_t kLimit = int64_t{1} << 30;
  const bool fits = grad_in.numel() < kLimit && grad_out.numel() < kLimit;
  const bool bounded = t.most <= kBlock;
  if (fits && bounded) return f(make_max_gather_op<scalar_t, int32_t, true>(grad_in, grad_out, indices, d, t, words));
  if (fits) return f(make_max_gather_op<scalar_t, int32_t, false>(grad_in, grad_out, indices, d, t, words));
  if (bounded) return f(make_max_gather_op<scalar_t, int64_t, true>(grad_in, grad_out, indices, d, t, words));
  f(make_max_gather_op<scalar_t, int64_t, false>(grad_in, grad_out, indices, d, t, words));
}

// Max pools on an engine: grad_in zero-filled (or gathered, with the gather's gate); the elements some index selects
// are written.
template <typename Engine>
void max_pool_backward_compute(const char* name, at::Tensor& grad_in, const at::Tensor& grad_out,
                               const at::Tensor& indices, int64_t output_plane, int64_t input_plane,
                               const int32_t* gate = nullptr) {
  if (grad_out.numel() == 0 || grad_in.numel() == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_in.scalar_type(), "detops_max_pool_backward", [&] {
    auto op = make_max_pool_op<scalar_t>(grad_in, grad_out, indices, output_plane, input_plane);
    op.gate = gate;
    const plan::EngineCall call = max_pool_backward_call<scalar_t>(grad_in, grad_out);
    Engine::template sort_reduce<acc_type<scalar_t>>(name, op, call.n, call.num_keys, call.D, grad_in);
  });
}

// Max pools, the gather first (max_pool_gathers; the CUDA path, and tests on the CPU): the tables at `words` (host
// or device as the tensors; word 0, the gate, 0), every element of grad_in computed by gather(op, n), then the
// engine's call gated on what the gather found. grad_in need not be zeroed: the gather writes every element.
template <typename Engine, typename Gather>
void max_pool_backward_gathered(const char* name, at::Tensor& grad_in, const at::Tensor& grad_out,
                                const at::Tensor& indices, const MaxPoolBoxes& boxes, const MaxPoolTables& t,
                                int64_t* words, const Gather& gather) {
  if (grad_out.numel() == 0 || grad_in.numel() == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_in.scalar_type(), "detops_max_pool_gather", [&] {
    with_max_gather_op<scalar_t>(grad_in, grad_out, indices, boxes.dims, t, words,
                                 [&](const auto& op) { gather(op, grad_in.numel()); });
  });
  const PoolDims& d = boxes.dims;
  max_pool_backward_compute<Engine>(name, grad_in, grad_out, indices, d.osize[0] * d.osize[1] * d.osize[2],
                                    d.isize[0] * d.isize[1] * d.isize[2], reinterpret_cast<const int32_t*>(words));
}

// Max pools, the CPU path: (N, C) planes in parallel. A plane's outputs, in ascending position, send their
// gradient to the input element their index selects, which folds what it receives with BlockFold: one
// block of the contract's tree, the bits of the sort-reduce engine for up to kBlock contributions. Returns
// false, leaving grad_in partly written, where some element is selected more than kBlock times (a deeper
// tree: the caller takes the sort-reduce engine) or some index lies outside [0, input_plane).
template <typename scalar_t>
bool max_pool_backward_scatter_cpu(at::Tensor& grad_in, const at::Tensor& grad_out, const at::Tensor& indices,
                                   int64_t output_plane, int64_t input_plane) {
  using acc_t = acc_type<scalar_t>;
  const scalar_t* go = grad_out.const_data_ptr<scalar_t>();
  const int64_t* ind = indices.const_data_ptr<int64_t>();
  scalar_t* gi = grad_in.data_ptr<scalar_t>();
  const int64_t planes = grad_in.numel() / input_plane;
  const int64_t grain = std::max<int64_t>(1, 32768 / (input_plane + output_plane));
  std::atomic<bool> ok{true};
  at::parallel_for(0, planes, grain, [&](int64_t begin, int64_t end) {
    // The running sums: in grad_in itself where it holds acc_t (float, double).
    constexpr bool kInPlace = std::is_same_v<acc_t, scalar_t>;
    std::unique_ptr<acc_t[]> buffer(kInPlace ? nullptr : new acc_t[static_cast<size_t>(input_plane)]);
    std::vector<uint8_t> count(static_cast<size_t>(input_plane), uint8_t{0});  // zero again after each plane
    std::vector<int64_t> touched;
    touched.reserve(static_cast<size_t>(std::min(input_plane, output_plane)));
    for (int64_t p = begin; p < end && ok.load(std::memory_order_relaxed); ++p) {
      const scalar_t* g = go + p * output_plane;
      const int64_t* idx = ind + p * output_plane;
      scalar_t* out = gi + p * input_plane;
      acc_t* sum;
      if constexpr (kInPlace) {
        sum = out;
      } else {
        sum = buffer.get();
      }
      std::fill(out, out + input_plane, round_to<scalar_t>(acc_t(0)));  // the elements nobody selects
      touched.clear();
      for (int64_t i = 0; i < output_plane; ++i) {
        const int64_t k = idx[i];
        if (static_cast<uint64_t>(k) >= static_cast<uint64_t>(input_plane) || count[k] == kBlock) {
          ok.store(false, std::memory_order_relaxed);
          return;
        }
        const acc_t v = to_acc(g[i]);
        if (count[k] == 0) {
          sum[k] = v;
          touched.push_back(k);
        } else {
          sum[k] = add_rn(sum[k], v);
        }
        ++count[k];
      }
      for (const int64_t k : touched) {
        out[k] = round_to<scalar_t>(add_rn(acc_t(0), sum[k]));
        count[k] = 0;
      }
    }
  });
  return ok.load();
}

// While recording (ops/plan.h), the CPU path records in the CUDA path's place what that issues before its engine
// call: the gather's tables and launch where it gathers (max_pool_gathers over `boxes`; null: not known).
// Returns whether it gathers (the engine's call is then gated).
inline bool record_max_pool_gather(const MaxPoolBoxes* boxes, const at::Tensor& grad_in, const at::Tensor& grad_out) {
  if (boxes == nullptr || !plan::recording()) return false;
  bool gathers = false;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_in.scalar_type(), "detops_max_pool_backward", [&] {
    const MaxPoolTables t = build_max_pool_tables(boxes->kind, boxes->dims);
    gathers = max_pool_gathers<scalar_t>(t, grad_in, grad_out);
    if (gathers) plan::record(max_pool_gather_call<scalar_t>(t, grad_in, grad_out));
  });
  return gathers;
}

// Where it is done, it records the CUDA path's calls it stands for (record_max_pool_gather, max_pool_backward_call);
// in plan-only mode (ops/plan.h) it records them and returns true without computing.
inline bool max_pool_backward_cpu(at::Tensor& grad_in, const at::Tensor& grad_out, const at::Tensor& indices,
                                  int64_t output_plane, int64_t input_plane, const MaxPoolBoxes* boxes = nullptr) {
  bool done = false;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_in.scalar_type(), "detops_max_pool_backward", [&] {
    done = plan::plan_only() ||
           max_pool_backward_scatter_cpu<scalar_t>(grad_in, grad_out, indices, output_plane, input_plane);
  });
  if (done) {
    const bool gated = record_max_pool_gather(boxes, grad_in, grad_out);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_in.scalar_type(), "detops_max_pool_backward",
                                    [&] { plan::record(max_pool_backward_call<scalar_t>(grad_in, grad_out, gated)); });
  }
  return done;
}

namespace cuda {
// The two computations on the CUDA engine (cuda/pooling.cu). All tensors contiguous and on one device.
void avg_pool_backward_kernel(at::Tensor& grad_in, const at::Tensor& grad_out, const PoolDims& dims, bool adaptive,
                              bool count_include_pad, int64_t divisor_override);
void max_pool_backward_kernel(const char* name, at::Tensor& grad_in, const at::Tensor& grad_out,
                              const at::Tensor& indices, int64_t output_plane, int64_t input_plane);
// Where max_pool_gathers: the tables copied to the device, the gather, the gated engine (grad_in need not be zeroed).
void max_pool_gather_backward_kernel(const char* name, at::Tensor& grad_in, const at::Tensor& grad_out,
                                     const at::Tensor& indices, const MaxPoolBoxes& boxes, const MaxPoolTables& t);
}  // namespace cuda

}  // namespace detops
