// Upsample backwards, linear family (upsample_linear1d_backward, upsample_bilinear2d_backward,
// upsample_bicubic2d_backward, upsample_trilinear3d_backward): the per-element arithmetic shared by the CPU
// path (ops/upsample.cpp) and the CUDA kernel (cuda/upsample.cu), docs/order_contract.md and docs/upsample.md.
//
// The forward reads, for each output position o of an axis, a few input positions (taps) with weights:
// - linear: i0 = min(floor(src(o)), in - 1) and i1 = i0 + (i0 < in - 1), weights 1 - l and l;
// - cubic: i0 - 1 .. i0 + 2, each clamped to [0, in - 1], with the A = -0.75 convolution weights;
// - identity (a linear axis whose sizes are equal, or a bicubic call whose two axes are): i0 = o, weight 1.
// src(o) and the weights are stock's (aten/src/ATen/native/UpSample.h: area_pixel_compute_scale,
// area_pixel_compute_source_index, guard_index_and_lambda, get_cubic_upsample_coefficients) in the
// accumulate type, each operation rounded on its own. The lowest and highest taps of o never decrease as o
// grows, so the outputs that read input i form one run of consecutive positions, found by binary search.
// An input element's gradient is the sum, over the outputs that read it in ascending output linear position
// (row-major over (d, h, w)), of w_d * w_h * w_w * grad_output, where w_k is the sum of the weights of the
// taps of that output landing on the element along axis k (several at a border). The contributions are
// folded by the contract's tree; the starting value is 0, so an element read by no output gets 0.
#pragma once

#include <cmath>
#include <cstdint>

#include "ops/contract.h"
#include "ops/ctc_loss_math.h"

namespace detops {

enum class UpsampleMap : int { Identity = 0, Linear = 1, Cubic = 2 };

// One axis of one call: sizes, map and stock's scale (input positions per output position).
template <typename acc_t>
struct UpsampleAxis {
  int64_t in;
  int64_t out;
  acc_t scale;
  UpsampleMap map;
  bool align_corners;

  // area_pixel_compute_source_index: linear maps clamp negative positions to 0, the cubic map does not.
  C10_HOST_DEVICE acc_t source(int64_t o) const {
    if (align_corners) return mul_rn(scale, static_cast<acc_t>(o));
    const acc_t half = static_cast<acc_t>(0.5);
    const acc_t r = add_rn(mul_rn(scale, add_rn(static_cast<acc_t>(o), half)), -half);
    return (map == UpsampleMap::Linear && r < acc_t(0)) ? acc_t(0) : r;
  }

  // guard_index_and_lambda. NB: stock floors in float (floorf) for double too; so does this.
  C10_HOST_DEVICE void guard(acc_t r, int64_t& i0, acc_t& lambda) const {
    const int64_t f = static_cast<int64_t>(floorf(static_cast<float>(r)));
    i0 = f < in - 1 ? f : in - 1;
    const acc_t l = add_rn(r, -static_cast<acc_t>(i0));
    lambda = l < acc_t(0) ? acc_t(0) : (l > acc_t(1) ? acc_t(1) : l);
  }

  C10_HOST_DEVICE int64_t clamp(int64_t i) const { return i < 0 ? 0 : (i > in - 1 ? in - 1 : i); }

  // The taps of output o: count (1, 2 or 4), their input positions and weights, in stock's order.
  C10_HOST_DEVICE int taps(int64_t o, int64_t* pos, acc_t* w) const {
    if (map == UpsampleMap::Identity) {
      pos[0] = o;
      w[0] = acc_t(1);
      return 1;
    }
    int64_t i0;
    acc_t t;
    guard(source(o), i0, t);
    if (map == UpsampleMap::Linear) {
      pos[0] = i0;
      pos[1] = i0 + (i0 < in - 1 ? 1 : 0);
      w[0] = add_rn(acc_t(1), -t);
      w[1] = t;
      return 2;
    }
    cubic_coefficients(t, w);
    for (int k = 0; k < 4; ++k) pos[k] = clamp(i0 - 1 + k);
    return 4;
  }

  // get_cubic_upsample_coefficients with A = -0.75: ((A + 2) x - (A + 3)) x x + 1 for |x| <= 1 and
  // ((A x - 5 A) x + 8 A) x - 4 A for 1 < |x| < 2 (5 A, 8 A, 4 A, A + 2, A + 3 are exact).
  C10_HOST_DEVICE static acc_t cubic1(acc_t x) {
    const acc_t a2 = static_cast<acc_t>(1.25), a3 = static_cast<acc_t>(2.25);
    return add_rn(mul_rn(mul_rn(add_rn(mul_rn(a2, x), -a3), x), x), acc_t(1));
  }
  C10_HOST_DEVICE static acc_t cubic2(acc_t x) {
    const acc_t a = static_cast<acc_t>(-0.75), a5 = static_cast<acc_t>(-3.75), a8 = static_cast<acc_t>(-6),
                a4 = static_cast<acc_t>(-3);
    return add_rn(mul_rn(add_rn(mul_rn(add_rn(mul_rn(a, x), -a5), x), a8), x), -a4);
  }
  C10_HOST_DEVICE static void cubic_coefficients(acc_t t, acc_t* w) {
    const acc_t x2 = add_rn(acc_t(1), -t);
    w[0] = cubic2(add_rn(t, acc_t(1)));
    w[1] = cubic1(t);
    w[2] = cubic1(x2);
    w[3] = cubic2(add_rn(x2, acc_t(1)));
  }

  // The weight of input i in output o: the sum of the weights of o's taps at i, in tap order.
  C10_HOST_DEVICE acc_t weight(int64_t i, int64_t o) const {
    int64_t pos[4];
    acc_t w[4];
    const int n = taps(o, pos, w);
    acc_t s = acc_t(0);
    bool any = false;
    for (int k = 0; k < n; ++k) {
      if (pos[k] != i) continue;
      s = any ? add_rn(s, w[k]) : w[k];
      any = true;
    }
    return s;
  }

  // Lowest and highest input position output o reads (both non-decreasing in o): the first and last of
  // taps()'s positions, without the weights.
  C10_HOST_DEVICE void span(int64_t o, int64_t& lo, int64_t& hi) const {
    int64_t i0;
    acc_t t;
    guard(source(o), i0, t);
    if (map == UpsampleMap::Linear) {
      lo = i0;
      hi = i0 + (i0 < in - 1 ? 1 : 0);
    } else {
      lo = clamp(i0 - 1);
      hi = clamp(i0 + 2);
    }
  }

  // The outputs that read input i: [first, first + count), by binary search over the monotone spans.
  C10_HOST_DEVICE void readers(int64_t i, int64_t& first, int64_t& count) const {
    if (map == UpsampleMap::Identity) {
      first = i;
      count = i < out ? 1 : 0;
      return;
    }
    int64_t lo_o = 0, hi_o = out;  // first o with span.hi >= i
    while (lo_o < hi_o) {
      const int64_t mid = lo_o + (hi_o - lo_o) / 2;
      int64_t lo, hi;
      span(mid, lo, hi);
      if (hi >= i) {
        hi_o = mid;
      } else {
        lo_o = mid + 1;
      }
    }
    first = lo_o;
    int64_t a = lo_o, b = out;  // first o with span.lo > i
    while (a < b) {
      const int64_t mid = a + (b - a) / 2;
      int64_t lo, hi;
      span(mid, lo, hi);
      if (lo > i) {
        b = mid;
      } else {
        a = mid + 1;
      }
    }
    count = a - first;
  }
};

// One thread (CUDA) or loop iteration (CPU) per grad_input element: the outputs that read it along each
// axis, then their grad_output values times the weights in ascending output position, folded by the
// contract's tree. Axes are (D, H, W); the 1-D and 2-D ops use identity axes of size 1 for the others.
template <typename scalar_t>
struct UpsampleBackwardOp {
  using acc_t = acc_type<scalar_t>;
  const scalar_t* grad_out;  // [N, C, OD, OH, OW] with strides go_stride
  scalar_t* grad_in;         // [N, C, ID, IH, IW], contiguous, or channels-last contiguous when channels_last
  int64_t go_stride[5];
  int64_t channels;
  UpsampleAxis<acc_t> axis[3];
  bool channels_last;

  template <typename Acc>
  C10_HOST_DEVICE void visit(const int64_t* i, const int64_t* first, const int64_t* count, const scalar_t* plane,
                             Acc& acc) const {
    for (int64_t od = first[0]; od < first[0] + count[0]; ++od) {
      const acc_t wd = axis[0].weight(i[0], od);
      for (int64_t oh = first[1]; oh < first[1] + count[1]; ++oh) {
        const acc_t wdh = mul_rn(wd, axis[1].weight(i[1], oh));
        const scalar_t* row = plane + od * go_stride[2] + oh * go_stride[3];
        for (int64_t ow = first[2]; ow < first[2] + count[2]; ++ow) {
          const acc_t w = mul_rn(wdh, axis[2].weight(i[2], ow));
          acc.push(mul_rn(w, to_acc(row[ow * go_stride[4]])));
        }
      }
    }
  }

  C10_HOST_DEVICE void operator()(int64_t idx) const {
    int64_t i[3];
    int64_t c = 0;
    int64_t rest = idx;
    if (channels_last) {
      c = rest % channels;
      rest /= channels;
    }
    i[2] = rest % axis[2].in;
    rest /= axis[2].in;
    i[1] = rest % axis[1].in;
    rest /= axis[1].in;
    i[0] = rest % axis[0].in;
    rest /= axis[0].in;
    if (!channels_last) {
      c = rest % channels;
      rest /= channels;
    }
    const int64_t n = rest;
    int64_t first[3], count[3];
    for (int k = 0; k < 3; ++k) axis[k].readers(i[k], first[k], count[k]);
    const int64_t total = count[0] * count[1] * count[2];
    if (total == 0) {
      grad_in[idx] = round_to<scalar_t>(acc_t(0));
      return;
    }
    const scalar_t* plane = grad_out + n * go_stride[0] + c * go_stride[1];
    acc_t sum;
    // NB: up to kBlock contributions are one block of the contract's tree, a plain left fold; longer
    // sequences (upsampling by more than about 2.8 per axis in 3-D) go through StreamingTree. Both give
    // tree_reduce's bits for the same sequence.
    if (total <= kBlock) {
      BlockFold<acc_t> fold;
      visit(i, first, count, plane, fold);
      sum = fold.finish();
    } else {
      StreamingTree<acc_t> tree;
      visit(i, first, count, plane, tree);
      sum = tree.finish();
    }
    // NB: NaN results are written as the positive quiet NaN (x86 and CUDA propagate NaNs with different bits).
    grad_in[idx] = round_to<scalar_t>(ctc::canonicalize_nan(add_rn(acc_t(0), sum)));
  }
};

// One call, before the dtype is known: per axis (D, H, W) sizes, map, and the optional scale argument
// (stock's scales_*: the forward's output/input ratio; has_scale false for None).
struct UpsampleSpec {
  int64_t in[3];
  int64_t out[3];
  UpsampleMap map[3];
  bool has_scale[3];
  double scale[3];
  bool align_corners;
};

// area_pixel_compute_scale / compute_scales_value in the accumulate type (host).
template <typename acc_t>
inline acc_t upsample_axis_scale(int64_t in, int64_t out, bool align_corners, bool has_scale, double scale) {
  if (align_corners) {
    return out > 1 ? static_cast<acc_t>(in - 1) / static_cast<acc_t>(out - 1) : acc_t(0);
  }
  if (has_scale && scale > 0.) return static_cast<acc_t>(1.0 / scale);
  return static_cast<acc_t>(in) / static_cast<acc_t>(out);
}

}  // namespace detops

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>

namespace detops {

// The builder: grad_in is the result ([N, C, spatial...], contiguous in its format), grad_out any strides.
template <typename scalar_t>
UpsampleBackwardOp<scalar_t> make_upsample_backward_op(at::Tensor& grad_in, const at::Tensor& grad_out,
                                                       const UpsampleSpec& spec, bool channels_last) {
  using acc_t = acc_type<scalar_t>;
  UpsampleBackwardOp<scalar_t> op;
  op.grad_out = grad_out.const_data_ptr<scalar_t>();
  op.grad_in = grad_in.data_ptr<scalar_t>();
  const int64_t spatial = grad_out.dim() - 2;
  op.go_stride[0] = grad_out.stride(0);
  op.go_stride[1] = grad_out.stride(1);
  for (int k = 0; k < 3; ++k) {
    const int64_t dim = 2 + k - (3 - spatial);  // the tensor dimension of axis k, or < 2 for an unused axis
    op.go_stride[2 + k] = dim >= 2 ? grad_out.stride(dim) : 0;
    op.axis[k].in = spec.in[k];
    op.axis[k].out = spec.out[k];
    op.axis[k].map = spec.map[k];
    op.axis[k].align_corners = spec.align_corners;
    op.axis[k].scale = upsample_axis_scale<acc_t>(spec.in[k], spec.out[k], spec.align_corners, spec.has_scale[k],
                                                  spec.scale[k]);
  }
  op.channels = grad_in.size(1);
  op.channels_last = channels_last;
  return op;
}

// On an engine (cpu::Engine or cuda::Engine): every element of grad_in gathers from grad_out.
template <typename Engine>
void upsample_backward_compute(at::Tensor& grad_in, const at::Tensor& grad_out, const UpsampleSpec& spec,
                               bool channels_last) {
  const int64_t n = grad_in.numel();
  if (n == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_in.scalar_type(), "detops_upsample_backward", [&] {
    Engine::for_each(make_upsample_backward_op<scalar_t>(grad_in, grad_out, spec, channels_last), n);
  });
}

namespace cuda {
// The computation on the CUDA engine (cuda/upsample.cu). Both tensors on one device.
void upsample_backward_kernel(at::Tensor& grad_in, const at::Tensor& grad_out, const UpsampleSpec& spec,
                              bool channels_last);
}  // namespace cuda

}  // namespace detops
