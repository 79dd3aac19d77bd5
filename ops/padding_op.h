// Padding backwards (reflection_pad{1,2,3}d_backward, replication_pad{1,2,3}d_backward): the per-element
// arithmetic shared by the CPU path (ops/padding.cpp) and the CUDA kernel (cuda/padding.cu),
// docs/order_contract.md and docs/padding.md.
//
// The forward copies input element r(o - before) of each axis to output o (r: reflect or clamp), so an
// input element's gradient is the sum of the grad_output elements that read it. The axes are separable:
// along one axis, input i is read by
// - reflect: at most three outputs, before - i (left mirror, i > 0), before + i (itself) and
//   before + 2 (n - 1) - i (right mirror, i < n - 1), since stock requires padding < n;
// - replicate: one run of consecutive outputs, longer than one at the borders (i = 0, i = n - 1);
// each kept where it lies in [0, output size). The contributions of an element are the product of its
// three axes' lists, enumerated in ascending output linear position (row-major over (d, h, w)): the
// source order of the contract, folded with its tree. The starting value is 0, so an element with
// contributions gets round_to(0 + S) and one without (cropped away by negative padding) gets 0.
#pragma once

#include <cstdint>

#include "ops/contract.h"
#include "ops/index_math.h"

namespace detops {

// One call's shapes per axis (D, H, W); the 1-D and 2-D ops use size 1 and padding 0 on the unused axes.
struct PadDims {
  int64_t isize[3];   // input plane
  int64_t osize[3];   // grad_output plane: isize + before + after
  int64_t before[3];  // padding before the input (front, top, left); negative crops
};

// The outputs of one axis that read one input position: three runs of consecutive output positions, each
// possibly empty, in ascending order and disjoint. Fixed slots (no run counter): the CUDA kernels keep them
// in registers.
template <typename index_t>
struct AxisSources {
  index_t first[3];
  index_t count[3];

  // Slot r: outputs [lo, hi] clipped to [0, size).
  C10_HOST_DEVICE void set(int r, index_t lo, index_t hi, index_t size) {
    lo = lo < 0 ? 0 : lo;
    hi = hi > size - 1 ? size - 1 : hi;
    first[r] = lo;
    count[r] = lo > hi ? index_t{0} : hi - lo + 1;
  }
  C10_HOST_DEVICE index_t total() const { return count[0] + count[1] + count[2]; }
  // The one output of a position with total() == 1.
  C10_HOST_DEVICE index_t only() const { return count[0] != 0 ? first[0] : count[1] != 0 ? first[1] : first[2]; }
};

// One grad_input element per call: its sources along each axis, then their grad_output values in
// ascending output position, folded by the contract's tree. index_t is int32_t where every size and
// position of the call fits (the host decides), else int64_t. kBounded: the host knows every element has
// at most kBlock contributions (always for reflect: 27 at most), so only BlockFold is compiled in.
template <typename scalar_t, typename index_t, bool kBounded>
struct PadBackwardOp {
  using acc_t = acc_type<scalar_t>;
  using Sources = AxisSources<index_t>;
  using index_type = index_t;
  static constexpr bool kBoundedSources = kBounded;
  const scalar_t* grad_out;  // contiguous [planes, OD, OH, OW]
  scalar_t* grad_in;         // contiguous [planes, ID, IH, IW]
  index_t isize[3];
  index_t osize[3];
  index_t before[3];
  index_t oplane;  // OD * OH * OW
  Divider<index_t> div[3];  // by isize[k]
  bool reflect;

  C10_HOST_DEVICE Sources sources(int k, index_t i) const {
    const index_t n = isize[k];
    const index_t b = before[k];
    const index_t size = osize[k];
    Sources s;
    if (reflect) {
      const index_t right = b + 2 * (n - 1) - i;
      s.set(0, b - i, i > 0 ? b - i : b - i - 1, size);
      s.set(1, b + i, b + i, size);
      s.set(2, right, i < n - 1 ? right : right - 1, size);
    } else {
      // Outputs o with clamp(o - b, 0, n - 1) == i.
      s.set(0, i == 0 ? index_t{0} : b + i, i == n - 1 ? size - 1 : b + i, size);
      s.set(1, 0, -1, size);
      s.set(2, 0, -1, size);
    }
    return s;
  }

  // Feeds acc the sources' grad_output values in ascending (d, h, w) output order.
  template <typename Acc>
  C10_HOST_DEVICE void visit(const Sources& sd, const Sources& sh, const Sources& sw, const scalar_t* plane,
                             Acc& acc) const {
DETOPS_UNROLL
    for (int rd = 0; rd < 3; ++rd) {
      for (index_t od = sd.first[rd]; od < sd.first[rd] + sd.count[rd]; ++od) {
DETOPS_UNROLL
        for (int rh = 0; rh < 3; ++rh) {
          for (index_t oh = sh.first[rh]; oh < sh.first[rh] + sh.count[rh]; ++oh) {
            const scalar_t* row = plane + (od * osize[1] + oh) * osize[2];
DETOPS_UNROLL
            for (int rw = 0; rw < 3; ++rw) {
              for (index_t ow = sw.first[rw]; ow < sw.first[rw] + sw.count[rw]; ++ow) {
                acc.push(to_acc(row[ow]));
              }
            }
          }
        }
      }
    }
  }

  // The value of an element from its contributions' tree: the starting value 0 plus the tree, rounded once.
  C10_HOST_DEVICE static scalar_t finish(acc_t sum) { return round_to<scalar_t>(add_rn(acc_t(0), sum)); }
  // The value of an element with one contribution v: one block of one, v itself.
  C10_HOST_DEVICE static scalar_t single(scalar_t v) { return finish(to_acc(v)); }

  // The value of the grad_input element with these sources, `plane` its (N, C) plane of grad_output.
  C10_HOST_DEVICE scalar_t gather(const Sources& sd, const Sources& sh, const Sources& sw,
                                  const scalar_t* plane) const {
    const index_t total = sd.total() * sh.total() * sw.total();
    if (total == 0) return round_to<scalar_t>(acc_t(0));
    if (total == 1) return single(plane[(sd.only() * osize[1] + sh.only()) * osize[2] + sw.only()]);
    acc_t sum;
    // NB: at most kBlock contributions are one block of the contract's tree, a plain left fold; longer
    // sequences (replicate borders) go through StreamingTree. Both give tree_reduce's bits for the same
    // sequence.
    if (kBounded || total <= kBlock) {
      BlockFold<acc_t> fold;
      visit(sd, sh, sw, plane, fold);
      sum = fold.finish();
    } else {
      StreamingTree<acc_t> tree;
      visit(sd, sh, sw, plane, tree);
      sum = tree.finish();
    }
    return finish(sum);
  }

  // Output position of source x (0 <= x < s.total()) of one axis: the runs taken in order.
  C10_HOST_DEVICE static index_t source_at(const Sources& s, index_t x) {
    if (x < s.count[0]) return s.first[0] + x;
    x -= s.count[0];
    if (x < s.count[1]) return s.first[1] + x;
    return s.first[2] + (x - s.count[1]);
  }

  // Block b of an element's contributions, those at positions [kBlock b, kBlock b + kBlock) of its sequence in
  // ascending output order, folded left to right (fold_block's order and combine): one item of level 0 of the
  // contract's tree. The values are loaded 8 at a time before they are folded, so 8 loads are in flight
  // together. For the CUDA kernel's warp form (an element with more than kBlock contributions, a lane per
  // block); then BlockTree takes the sums up.
  C10_HOST_DEVICE acc_t block_sum(const Sources& sd, const Sources& sh, const Sources& sw, const scalar_t* plane,
                                  index_t b) const {
    constexpr int kGroup = 8;
    const index_t tw = sw.total();
    const index_t th = sh.total();
    const index_t total = sd.total() * th * tw;
    const index_t j0 = b * kBlock;
    const int count = total - j0 < kBlock ? static_cast<int>(total - j0) : kBlock;
    index_t jw = j0 % tw;
    const index_t jr = j0 / tw;
    index_t jh = jr % th;
    index_t jd = jr / th;
    acc_t sum{};
    for (int k0 = 0; k0 < count; k0 += kGroup) {
      acc_t v[kGroup];
DETOPS_UNROLL
      for (int k = 0; k < kGroup; ++k) {
        if (k0 + k < count) {
          v[k] = to_acc(plane[(source_at(sd, jd) * osize[1] + source_at(sh, jh)) * osize[2] + source_at(sw, jw)]);
          if (++jw == tw) {
            jw = 0;
            if (++jh == th) {
              jh = 0;
              ++jd;
            }
          }
        }
      }
DETOPS_UNROLL
      for (int k = 0; k < kGroup; ++k) {
        if (k0 + k < count) sum = k0 + k == 0 ? v[k] : AddRn()(sum, v[k]);
      }
    }
    return sum;
  }

  // The tree above level 0 of an element with more than kBlock contributions: push() its block sums in block
  // order (StreamingTree from level 1, as if it had folded the blocks itself), then value(), rounded once.
  // NB: the blocks and the tree above them are gather()'s, so the bits are too.
  struct BlockTree {
    StreamingTree<acc_t> tree;
    C10_HOST_DEVICE void push(acc_t block) { tree.push(block, 1); }
    C10_HOST_DEVICE scalar_t value() { return PadBackwardOp::finish(tree.finish()); }
  };

  // Element idx, linear in [planes, ID, IH, IW]: its (N, C) plane and its sources along each axis.
  C10_HOST_DEVICE void element(index_t idx, index_t& p, Sources& sd, Sources& sh, Sources& sw) const {
    index_t rest, iw, ih, it;
    div[2].divmod(idx, rest, iw);
    div[1].divmod(rest, rest, ih);
    div[0].divmod(rest, p, it);
    sd = sources(0, it);
    sh = sources(1, ih);
    sw = sources(2, iw);
  }

  C10_HOST_DEVICE void operator()(index_t idx) const {
    index_t p;
    Sources sd, sh, sw;
    element(idx, p, sd, sh, sw);
    grad_in[idx] = gather(sd, sh, sw, grad_out + p * oplane);
  }
};

}  // namespace detops

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

namespace detops {

// True when every position of the call fits 32-bit index math (with room for a grid stride and for the
// mirrored positions, before + 2 (n - 1) - i).
inline bool pad_fits_int32(const at::Tensor& grad_in, const at::Tensor& grad_out, const PadDims& d) {
  constexpr int64_t kLimit = int64_t{1} << 30;
  bool fits = grad_in.numel() < kLimit && grad_out.numel() < kLimit;
  for (int k = 0; k < 3; ++k) fits = fits && d.osize[k] + 2 * d.isize[k] + std::abs(d.before[k]) < kLimit;
  return fits;
}

// The most contributions one element along axis k can have: the borders and one interior position
// (reflect: at most three per axis; replicate: the whole padding at a border).
template <typename Op>
int64_t pad_axis_max_sources(const Op& op, int k) {
  const int64_t n = op.isize[k];
  int64_t most = 0;
  for (const int64_t i : {int64_t{0}, std::min<int64_t>(1, n - 1), n / 2, std::max<int64_t>(n - 2, 0), n - 1}) {
    most = std::max<int64_t>(most, op.sources(k, static_cast<typename Op::index_type>(i)).total());
  }
  return most;
}

// The builder over contiguous tensors: grad_in is the result, grad_out its input.
template <typename scalar_t, typename index_t, bool kBounded>
PadBackwardOp<scalar_t, index_t, kBounded> make_pad_backward_op(at::Tensor& grad_in, const at::Tensor& grad_out,
                                                                const PadDims& dims, bool reflect) {
  PadBackwardOp<scalar_t, index_t, kBounded> op;
  op.grad_out = grad_out.const_data_ptr<scalar_t>();
  op.grad_in = grad_in.data_ptr<scalar_t>();
  for (int k = 0; k < 3; ++k) {
    op.isize[k] = static_cast<index_t>(dims.isize[k]);
    op.osize[k] = static_cast<index_t>(dims.osize[k]);
    op.before[k] = static_cast<index_t>(dims.before[k]);
    op.div[k] = Divider<index_t>(op.isize[k]);
  }
  op.oplane = static_cast<index_t>(dims.osize[0] * dims.osize[1] * dims.osize[2]);
  op.reflect = reflect;
  return op;
}

// Calls f(op) with the op the call needs: 32-bit index math where it fits (unless force_general), and the
// BlockFold-only op where the host knows every element has at most kBlock contributions.
template <typename scalar_t, typename F>
void with_pad_backward_op(at::Tensor& grad_in, const at::Tensor& grad_out, const PadDims& dims, bool reflect,
                          bool force_general, const F& f) {
  const auto general = make_pad_backward_op<scalar_t, int64_t, false>(grad_in, grad_out, dims, reflect);
  const int64_t most =
      pad_axis_max_sources(general, 0) * pad_axis_max_sources(general, 1) * pad_axis_max_sources(general, 2);
  if (force_general) {
    f(general);
  } else if (pad_fits_int32(grad_in, grad_out, dims)) {
    if (most <= kBlock) {
      f(make_pad_backward_op<scalar_t, int32_t, true>(grad_in, grad_out, dims, reflect));
    } else {
      f(make_pad_backward_op<scalar_t, int32_t, false>(grad_in, grad_out, dims, reflect));
    }
  } else if (most <= kBlock) {
    f(make_pad_backward_op<scalar_t, int64_t, true>(grad_in, grad_out, dims, reflect));
  } else {
    f(general);
  }
}

// One element per op call on an engine (cuda::Engine's kernels; cpu::Engine::for_each reaches the same
// code, with force_general the 64-bit, StreamingTree-capable op): every element of grad_in (contiguous,
// self's shape) gathers its sources from grad_out (contiguous).
template <typename Engine>
void pad_backward_compute(at::Tensor& grad_in, const at::Tensor& grad_out, const PadDims& dims, bool reflect,
                          bool force_general = false) {
  const int64_t n = grad_in.numel();
  if (n == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_in.scalar_type(), "detops_padding_backward", [&] {
    with_pad_backward_op<scalar_t>(grad_in, grad_out, dims, reflect, force_general,
                                   [&](const auto& op) { Engine::for_each(op, n); });
  });
}

// The positions i of axis k whose one output is before + i, a run [lo, hi) (possibly empty): reflect leaves
// out the positions a mirror reads too (0 < i <= before, n - 1 - after <= i < n - 1), replicate the borders;
// both leave out the positions cropped away. Checked at both ends against the op's sources().
template <typename Op>
void pad_single_run(const Op& op, int k, int64_t& lo, int64_t& hi) {
  const int64_t n = op.isize[k];
  const int64_t b = op.before[k];
  const int64_t a = op.osize[k] - n - b;
  lo = std::max<int64_t>({op.reflect ? (b >= 1 ? b + 1 : 0) : 1, -b, 0});
  hi = std::min<int64_t>({op.reflect ? (a >= 1 ? n - 1 - a : n) : n - 1, n + a, n});
  const auto single = [&](int64_t i) {
    const auto s = op.sources(k, i);
    return s.total() == 1 && s.only() == b + i;
  };
  if (lo >= hi || !single(lo) || !single(hi - 1)) lo = hi = 0;
}

// The CPU path: rows of grad_in in parallel. The sources along D and H, and along W outside the run of single
// outputs (pad_single_run), are computed once per call, so no element divides or clips. Each element runs the
// op's gather(), or the same fold over the row's grad_output rows taken in ascending (d, h) order, each row's W
// outputs ascending: in the run, eight elements at a time in registers; outside it, from the W table. The bits
// of pad_backward_compute.
template <typename scalar_t>
void pad_backward_rows_cpu(at::Tensor& grad_in, const at::Tensor& grad_out, const PadDims& dims, bool reflect) {
  using Op = PadBackwardOp<scalar_t, int64_t, false>;
  using acc_t = acc_type<scalar_t>;
  using Sources = AxisSources<int64_t>;
  const Op op = make_pad_backward_op<scalar_t, int64_t, false>(grad_in, grad_out, dims, reflect);
  std::vector<Sources> axis[2];  // D and H
  for (int k = 0; k < 2; ++k) {
    axis[k].resize(static_cast<size_t>(dims.isize[k]));
    for (int64_t i = 0; i < dims.isize[k]; ++i) axis[k][i] = op.sources(k, i);
  }
  const int64_t iw_size = dims.isize[2];
  int64_t w_lo, w_hi;
  pad_single_run(op, 2, w_lo, w_hi);
  w_hi = std::max(w_lo, w_hi);
  // The W positions outside [w_lo, w_hi), b = iw below w_lo and w_lo + iw - w_hi above: their outputs in ascending
  // order, w_outputs[w_first[b], w_first[b + 1]).
  std::vector<int64_t> w_first, w_outputs;
  w_first.reserve(static_cast<size_t>(w_lo + iw_size - w_hi + 1));
  w_outputs.reserve(static_cast<size_t>(3 * (w_lo + iw_size - w_hi)));
  const auto add_outputs = [&](int64_t iw) {
    w_first.push_back(static_cast<int64_t>(w_outputs.size()));
    const Sources sw = op.sources(2, iw);
    for (int rw = 0; rw < 3; ++rw) {
      for (int64_t ow = sw.first[rw]; ow < sw.first[rw] + sw.count[rw]; ++ow) w_outputs.push_back(ow);
    }
  };
  for (int64_t iw = 0; iw < w_lo; ++iw) add_outputs(iw);
  for (int64_t iw = w_hi; iw < iw_size; ++iw) add_outputs(iw);
  w_first.push_back(static_cast<int64_t>(w_outputs.size()));
  const int64_t rows = grad_in.numel() / iw_size;
  const int64_t grain = std::max<int64_t>(1, 32768 / iw_size);
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    int64_t ih = begin % dims.isize[1];  // row r = (p, it, ih), stepped without dividing
    int64_t it = (begin / dims.isize[1]) % dims.isize[0];
    int64_t p = begin / (dims.isize[1] * dims.isize[0]);
    for (int64_t r = begin; r < end; ++r, ++ih) {
      if (ih == dims.isize[1]) {
        ih = 0;
        if (++it == dims.isize[0]) {
          it = 0;
          ++p;
        }
      }
      const Sources& sd = axis[0][it];
      const Sources& sh = axis[1][ih];
      const scalar_t* plane = op.grad_out + p * op.oplane;
      scalar_t* out = op.grad_in + r * iw_size;
      // The grad_output rows this row reads, in ascending (d, h) order.
      const scalar_t* src[kBlock];
      int m = 0;
      if (sd.total() * sh.total() <= kBlock) {
        for (int rd = 0; rd < 3; ++rd) {
          for (int64_t od = sd.first[rd]; od < sd.first[rd] + sd.count[rd]; ++od) {
            for (int rh = 0; rh < 3; ++rh) {
              for (int64_t oh = sh.first[rh]; oh < sh.first[rh] + sh.count[rh]; ++oh) {
                src[m++] = plane + (od * dims.osize[1] + oh) * dims.osize[2];
              }
            }
          }
        }
      }
      if (m == 0) {  // cropped away, or more than a block along D and H
        for (int64_t iw = 0; iw < iw_size; ++iw) out[iw] = op.gather(sd, sh, op.sources(2, iw), plane);
        continue;
      }
      // A W position's contributions: each row in turn, its outputs along W in ascending order.
      const auto fold_rows = [&](int64_t iw) {
        const int64_t b = iw < w_lo ? iw : w_lo + iw - w_hi;
        const int64_t* ow0 = w_outputs.data() + w_first[b];
        const int64_t count = w_first[b + 1] - w_first[b];
        if (count == 0 || m * count > kBlock) return op.gather(sd, sh, op.sources(2, iw), plane);
        BlockFold<acc_t> fold;
        for (int j = 0; j < m; ++j) {
          for (int64_t x = 0; x < count; ++x) fold.push(to_acc(src[j][ow0[x]]));
        }
        return Op::finish(fold.finish());
      };
      for (int64_t iw = 0; iw < w_lo; ++iw) out[iw] = fold_rows(iw);
      // The W positions with one output, before + iw. NB: up to kBlock contributions: one block of the tree, the
      // left fold from the first row's value, as BlockFold in gather().
      const int64_t shift = dims.before[2];
      constexpr int64_t kChunk = 8;
      int64_t iw = w_lo;
      if (m == 1) {
        const scalar_t* s0 = src[0] + shift;
        for (; iw < w_hi; ++iw) out[iw] = Op::single(s0[iw]);
      }
      for (; iw + kChunk <= w_hi; iw += kChunk) {
        acc_t sum[kChunk];
        for (int64_t c = 0; c < kChunk; ++c) sum[c] = to_acc(src[0][shift + iw + c]);
        for (int j = 1; j < m; ++j) {
          for (int64_t c = 0; c < kChunk; ++c) sum[c] = add_rn(sum[c], to_acc(src[j][shift + iw + c]));
        }
        for (int64_t c = 0; c < kChunk; ++c) out[iw + c] = Op::finish(sum[c]);
      }
      for (; iw < w_hi; ++iw) {
        acc_t sum = to_acc(src[0][shift + iw]);
        for (int j = 1; j < m; ++j) sum = add_rn(sum, to_acc(src[j][shift + iw]));
        out[iw] = Op::finish(sum);
      }
      for (iw = w_hi; iw < iw_size; ++iw) out[iw] = fold_rows(iw);
    }
  });
}

inline void pad_backward_cpu(at::Tensor& grad_in, const at::Tensor& grad_out, const PadDims& dims, bool reflect) {
  if (grad_in.numel() == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_in.scalar_type(), "detops_padding_backward", [&] {
    pad_backward_rows_cpu<scalar_t>(grad_in, grad_out, dims, reflect);
  });
}

namespace cuda {
// The computation on the CUDA engine (cuda/padding.cu). Both tensors contiguous and on one device.
void pad_backward_kernel(at::Tensor& grad_in, const at::Tensor& grad_out, const PadDims& dims, bool reflect);
}  // namespace cuda

}  // namespace detops
