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
#include "ops/index_math.h"
#include "ops/tree_form.h"

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

  // The weight of input i in the output whose taps are (pos, w, n): the sum of the weights of the taps at
  // i, in tap order.
  C10_HOST_DEVICE static acc_t weight_of(int64_t i, const int64_t* pos, const acc_t* w, int n) {
    acc_t s = acc_t(0);
    bool any = false;
    for (int k = 0; k < n; ++k) {
      if (pos[k] != i) continue;
      s = any ? add_rn(s, w[k]) : w[k];
      any = true;
    }
    return s;
  }
};

// One axis's readers, built once per call on the host (build_upsample_readers): input i is read by the
// outputs first[i] + j for j in [0, start[i + 1] - start[i]), ascending, with weights w[start[i] + j].
template <typename acc_t>
struct UpsampleReaders {
  const int64_t* first;  // [in]
  const int64_t* start;  // [in + 1]
  const acc_t* w;        // [start[in]]
};

// The per-element arithmetic: grad_input element (n, c, i[0], i[1], i[2]) walks its readers along (D, H, W)
// in ascending output linear position, each contribution ((w_d * w_h) * w_w) * grad_output, folded by the
// contract's tree. The 1-D and 2-D ops use identity axes of size 1 for the others.
template <typename scalar_t>
struct UpsampleBackwardOp {
  using acc_t = acc_type<scalar_t>;
  const scalar_t* grad_out;  // [N, C, OD, OH, OW] with strides go_stride
  scalar_t* grad_in;         // [N, C, ID, IH, IW], contiguous, or channels-last contiguous when channels_last
  int64_t go_stride[5];
  int64_t channels;
  int64_t in[3];
  UpsampleReaders<acc_t> axis[3];
  TreeForm fold;  // NB: the smallest form that holds the product of the longest reader runs (ops/tree_form.h)
  bool channels_last;

  template <typename index_t>
  C10_HOST_DEVICE index_t runs(index_t k, index_t i) const {
    return static_cast<index_t>(axis[k].start[i + 1] - axis[k].start[i]);
  }

  // The contributions of element i of the plane at `plane`, in source order, pushed to acc.
  template <typename index_t, typename Acc>
  C10_HOST_DEVICE void visit(const index_t* i, const scalar_t* plane, Acc& acc) const {
    const index_t s2 = static_cast<index_t>(go_stride[2]), s3 = static_cast<index_t>(go_stride[3]),
                  s4 = static_cast<index_t>(go_stride[4]);
    const index_t fd = static_cast<index_t>(axis[0].first[i[0]]), fh = static_cast<index_t>(axis[1].first[i[1]]),
                  fw = static_cast<index_t>(axis[2].first[i[2]]);
    const acc_t* wd = axis[0].w + axis[0].start[i[0]];
    const acc_t* wh = axis[1].w + axis[1].start[i[1]];
    const acc_t* ww = axis[2].w + axis[2].start[i[2]];
    const index_t nd = runs<index_t>(0, i[0]), nh = runs<index_t>(1, i[1]), nw = runs<index_t>(2, i[2]);
    for (index_t a = 0; a < nd; ++a) {
      for (index_t b = 0; b < nh; ++b) {
        const acc_t wdh = mul_rn(wd[a], wh[b]);
        const scalar_t* row = plane + (fd + a) * s2 + (fh + b) * s3 + fw * s4;
        for (index_t c = 0; c < nw; ++c) {
          acc.push(mul_rn(mul_rn(wdh, ww[c]), to_acc(row[c * s4])));
        }
      }
    }
  }

  // grad_input element (n, c, i), written at offset `at`.
  template <typename index_t>
  C10_HOST_DEVICE void element(index_t n, index_t c, const index_t* i, index_t at) const {
    const index_t total = runs<index_t>(0, i[0]) * runs<index_t>(1, i[1]) * runs<index_t>(2, i[2]);
    if (total == 0) {
      grad_in[at] = round_to<scalar_t>(acc_t(0));
      return;
    }
    const scalar_t* plane =
        grad_out + n * static_cast<index_t>(go_stride[0]) + c * static_cast<index_t>(go_stride[1]);
    const acc_t sum = with_tree_form<acc_t>(fold, [&](auto f) {
      visit(i, plane, f);
      return f.finish();
    });
    // NB: NaN results are written as the positive quiet NaN (x86 and CUDA propagate NaNs with different bits).
    grad_in[at] = round_to<scalar_t>(ctc::canonicalize_nan(add_rn(acc_t(0), sum)));
  }
};

// One grad_input element per index (the CUDA kernel's thread, or the CPU's per-element path): the linear
// index in grad_input's layout split by dividers fixed per call. index_t is int32_t when every offset in
// grad_input and grad_output fits, else int64_t.
template <typename scalar_t, typename index_t>
struct UpsampleElementOp {
  using index_type = index_t;
  UpsampleBackwardOp<scalar_t> op;
  Divider<index_t> div_c, div_w, div_h, div_d;

  UpsampleElementOp(const UpsampleBackwardOp<scalar_t>& o)
      : op(o), div_c(static_cast<index_t>(o.channels)), div_w(static_cast<index_t>(o.in[2])), div_h(static_cast<index_t>(o.in[1])),
        div_d(static_cast<index_t>(o.in[0])) {}

  C10_HOST_DEVICE void operator()(index_t idx) const {
    index_t i[3];
    index_t c = 0;
    index_t rest = idx;
    if (op.channels_last) {
      const index_t q = div_c.div(rest);
      c = rest - q * static_cast<index_t>(op.channels);
      rest = q;
    }
    index_t q = div_w.div(rest);
    i[2] = rest - q * static_cast<index_t>(op.in[2]);
    rest = q;
    q = div_h.div(rest);
    i[1] = rest - q * static_cast<index_t>(op.in[1]);
    rest = q;
    q = div_d.div(rest);
    i[0] = rest - q * static_cast<index_t>(op.in[0]);
    rest = q;
    if (!op.channels_last) {
      q = div_c.div(rest);
      c = rest - q * static_cast<index_t>(op.channels);
      rest = q;
    }
    op.element(rest, c, i, idx);
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
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "ops/table_gather_plan.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

namespace detops {

// One axis's readers on the host: for each input the outputs whose taps land on it (a run of consecutive
// outputs, since the lowest and highest taps never decrease as the output grows), with the weight of the
// input in each (UpsampleAxis::weight_of over the output's taps). One sweep over the outputs.
template <typename acc_t>
void build_upsample_readers(const UpsampleAxis<acc_t>& ax, std::vector<int64_t>& first, std::vector<int64_t>& start,
                            std::vector<acc_t>& w) {
  first.assign(ax.in, 0);
  start.assign(ax.in + 1, 0);
  w.clear();
  std::vector<int64_t> pos(4 * ax.out);
  std::vector<acc_t> tw(4 * ax.out);
  std::vector<int> nt(ax.out);
  for (int64_t o = 0; o < ax.out; ++o) nt[o] = ax.taps(o, &pos[4 * o], &tw[4 * o]);
  int64_t a = 0, b = 0;
  for (int64_t i = 0; i < ax.in; ++i) {
    while (a < ax.out && pos[4 * a + nt[a] - 1] < i) ++a;  // first output whose highest tap is >= i
    b = std::max(a, b);
    while (b < ax.out && pos[4 * b] <= i) ++b;  // first output whose lowest tap is > i
    first[i] = a;
    // NB: ascending outputs: the source order of the contract along this axis (docs/order_contract.md).
    for (int64_t o = a; o < b; ++o) w.push_back(UpsampleAxis<acc_t>::weight_of(i, &pos[4 * o], &tw[4 * o], nt[o]));
    start[i + 1] = start[i] + (b - a);
  }
}

// One call's reader tables in one int64 blob on grad_in's device: per axis (D, H, W) `first` then `start`,
// then from `weights_at` the weights (acc_t, axis after axis). `longest`: the most contributions any element
// has (the product of the longest runs).
struct UpsampleTables {
  at::Tensor blob;
  int64_t first_at[3];
  int64_t start_at[3];
  int64_t weights_at;
  int64_t w_at[3];
  int64_t longest;
};

template <typename acc_t>
UpsampleTables build_upsample_tables(const UpsampleSpec& spec, const at::Device& device) {
  std::vector<int64_t> first[3], start[3];
  std::vector<acc_t> w[3];
  UpsampleTables t;
  int64_t words = 0, nweights = 0;
  t.longest = 1;
  for (int k = 0; k < 3; ++k) {
    UpsampleAxis<acc_t> ax;
    ax.in = spec.in[k];
    ax.out = spec.out[k];
    ax.map = spec.map[k];
    ax.align_corners = spec.align_corners;
    ax.scale = upsample_axis_scale<acc_t>(spec.in[k], spec.out[k], spec.align_corners, spec.has_scale[k],
                                          spec.scale[k]);
    build_upsample_readers(ax, first[k], start[k], w[k]);
    int64_t run = 0;
    for (int64_t i = 0; i < ax.in; ++i) run = std::max(run, start[k][i + 1] - start[k][i]);
    t.longest *= run;
    t.first_at[k] = words;
    words += ax.in;
    t.start_at[k] = words;
    words += ax.in + 1;
    t.w_at[k] = nweights;
    nweights += static_cast<int64_t>(w[k].size());
  }
  t.weights_at = words;
  words += (nweights * static_cast<int64_t>(sizeof(acc_t)) + 7) / 8;
  // Pinned for a CUDA call, so the one copy below is asynchronous on the current stream (the caching host
  // allocator keeps the buffer until the copy has run).
  at::Tensor blob = at::empty({words}, at::TensorOptions().dtype(at::kLong).pinned_memory(device.is_cuda()));
  int64_t* ip = blob.data_ptr<int64_t>();
  acc_t* wp = reinterpret_cast<acc_t*>(ip + t.weights_at);
  for (int k = 0; k < 3; ++k) {
    std::memcpy(ip + t.first_at[k], first[k].data(), first[k].size() * sizeof(int64_t));
    std::memcpy(ip + t.start_at[k], start[k].data(), start[k].size() * sizeof(int64_t));
    if (!w[k].empty()) std::memcpy(wp + t.w_at[k], w[k].data(), w[k].size() * sizeof(acc_t));
  }
  t.blob = device.is_cuda() ? blob.to(device, /*non_blocking=*/true) : blob;
  return t;
}

// The per-element op over the tables: grad_in is the result ([N, C, spatial...], contiguous in its format),
// grad_out any strides.
template <typename scalar_t>
UpsampleBackwardOp<scalar_t> make_upsample_backward_op(at::Tensor& grad_in, const at::Tensor& grad_out,
                                                       const UpsampleSpec& spec, const UpsampleTables& t,
                                                       bool channels_last) {
  using acc_t = acc_type<scalar_t>;
  UpsampleBackwardOp<scalar_t> op;
  op.grad_out = grad_out.const_data_ptr<scalar_t>();
  op.grad_in = grad_in.data_ptr<scalar_t>();
  const int64_t spatial = grad_out.dim() - 2;
  op.go_stride[0] = grad_out.stride(0);
  op.go_stride[1] = grad_out.stride(1);
  const int64_t* ip = t.blob.const_data_ptr<int64_t>();
  const acc_t* wp = reinterpret_cast<const acc_t*>(ip + t.weights_at);
  for (int k = 0; k < 3; ++k) {
    const int64_t dim = 2 + k - (3 - spatial);  // the tensor dimension of axis k, or < 2 for an unused axis
    op.go_stride[2 + k] = dim >= 2 ? grad_out.stride(dim) : 0;
    op.in[k] = spec.in[k];
    op.axis[k] = {ip + t.first_at[k], ip + t.start_at[k], wp + t.w_at[k]};
  }
  op.fold = tree_form_for(t.longest);
  op.channels = grad_in.size(1);
  op.channels_last = channels_last;
  return op;
}

// True when every offset into grad_in and grad_out fits the 32-bit index math.
inline bool upsample_fits_int32(const at::Tensor& grad_in, const at::Tensor& grad_out) {
  constexpr int64_t kMax = int64_t{1} << 31;
  int64_t span = 1;
  for (int64_t d = 0; d < grad_out.dim(); ++d) span += (grad_out.size(d) - 1) * grad_out.stride(d);
  return grad_in.numel() < kMax && span < kMax;
}

// The CPU's ways through one call: Auto (channels side by side as lanes, Pixels, with channels-last or
// enough channels; else Rows), Rows (one NCHW grad_input row per iteration, the index divisions hoisted out
// of it), Pixels, or the CUDA kernel's one element per index with 32-bit or 64-bit index math. All give
// the same bits (tests/cpp/test_cpu_paths.cpp).
enum class GatherPath : int { Auto = 0, Rows = 1, Pixels = 2, Elements32 = 3, Elements64 = 4 };

// Auto's lanes: at least this many channels (NCHW) make folding them side by side pay.
constexpr int64_t kLanesAtLeast = 4;

// NCHW rows: one (n, c, d, h) row of W elements per iteration.
template <typename scalar_t>
void upsample_backward_rows(const UpsampleBackwardOp<scalar_t>& op, int64_t rows, int64_t longest) {
  const int64_t iw = op.in[2], ih = op.in[1], id = op.in[0], C = op.channels;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, iw * longest));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t i[3];
      i[1] = r % ih;
      int64_t rest = r / ih;
      i[0] = rest % id;
      rest /= id;
      const int64_t c = rest % C, n = rest / C;
      for (i[2] = 0; i[2] < iw; ++i[2]) op.element(n, c, i, r * iw + i[2]);
    }
  });
}

// One (n, d, h, w) position per iteration, its C channels folded side by side as lanes (the same
// contributions in the same order for every channel; up to kBlock * kBlock of them, the two-level tree with
// shared counters), longer sequences element by element. Channels-last: the lanes are adjacent; otherwise
// a channel's plane apart.
template <typename scalar_t>
void upsample_backward_pixels(const UpsampleBackwardOp<scalar_t>& op, int64_t pixels, int64_t longest) {
  using acc_t = acc_type<scalar_t>;
  const int64_t iw = op.in[2], ih = op.in[1], id = op.in[0], C = op.channels;
  const int64_t S = iw * ih * id;
  const int64_t out_lane = op.channels_last ? 1 : S;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, C * longest));
  // One (n, d, h) row of positions per step, its w positions in the inner loop: no division per position.
  at::parallel_for(0, pixels / iw, std::max<int64_t>(1, grain / iw), [&](int64_t begin, int64_t end) {
    std::vector<acc_t> block(C), top(C);
    const int64_t s1 = op.go_stride[1];
    for (int64_t r = begin; r < end; ++r) {
      int64_t i[3];
      i[1] = r % ih;
      const int64_t rest = r / ih;
      i[0] = rest % id;
      const int64_t n = rest / id;
      for (i[2] = 0; i[2] < iw; ++i[2]) {
        const int64_t p = r * iw + i[2];
        const int64_t at = op.channels_last ? p * C : n * C * S + (p - n * S);
        scalar_t* out = op.grad_in + at;
        const int64_t nd = op.template runs<int64_t>(0, i[0]), nh = op.template runs<int64_t>(1, i[1]),
                      nw = op.template runs<int64_t>(2, i[2]);
        const int64_t total = nd * nh * nw;
        if (total > kBlock * kBlock) {
          for (int64_t c = 0; c < C; ++c) op.element(n, c, i, at + c * out_lane);
          continue;
        }
        if (total == 0) {
          for (int64_t c = 0; c < C; ++c) out[c * out_lane] = round_to<scalar_t>(acc_t(0));
          continue;
        }
        const scalar_t* plane = op.grad_out + n * op.go_stride[0];
        const int64_t fd = op.axis[0].first[i[0]], fh = op.axis[1].first[i[1]], fw = op.axis[2].first[i[2]];
        const acc_t* wd = op.axis[0].w + op.axis[0].start[i[0]];
        const acc_t* wh = op.axis[1].w + op.axis[1].start[i[1]];
        const acc_t* ww = op.axis[2].w + op.axis[2].start[i[2]];
        int in_block = 0;
        bool any_top = false;
        // NB: per channel, the pushes of TwoLevelTree (BlockFold's for up to kBlock), in source order.
        for (int64_t a = 0; a < nd; ++a) {
          for (int64_t b = 0; b < nh; ++b) {
            const acc_t wdh = mul_rn(wd[a], wh[b]);
            for (int64_t e = 0; e < nw; ++e) {
              const acc_t w = mul_rn(wdh, ww[e]);
              const scalar_t* src =
                  plane + (fd + a) * op.go_stride[2] + (fh + b) * op.go_stride[3] + (fw + e) * op.go_stride[4];
              if (in_block == 0) {
                for (int64_t c = 0; c < C; ++c) block[c] = mul_rn(w, to_acc(src[c * s1]));
              } else {
                for (int64_t c = 0; c < C; ++c) block[c] = add_rn(block[c], mul_rn(w, to_acc(src[c * s1])));
              }
              if (++in_block == kBlock) {
                for (int64_t c = 0; c < C; ++c) top[c] = any_top ? add_rn(top[c], block[c]) : block[c];
                any_top = true;
                in_block = 0;
              }
            }
          }
        }
        for (int64_t c = 0; c < C; ++c) {
          const acc_t sum = in_block == 0 ? top[c] : (any_top ? add_rn(top[c], block[c]) : block[c]);
          out[c * out_lane] = round_to<scalar_t>(ctc::canonicalize_nan(add_rn(acc_t(0), sum)));
        }
      }
    }
  });
}

template <typename scalar_t, typename index_t>
void upsample_backward_elements_cpu(const UpsampleBackwardOp<scalar_t>& op, int64_t n) {
  const UpsampleElementOp<scalar_t, index_t> e(op);
  at::parallel_for(0, n, 2048, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) e(static_cast<index_t>(i));
  });
}

// The reader tables of the dtype of grad_in (weights in its accumulate type) on `device`.
inline UpsampleTables build_upsample_tables_for(const UpsampleSpec& spec, at::ScalarType dtype,
                                               const at::Device& device) {
  return dtype == at::kDouble ? build_upsample_tables<double>(spec, device)
                              : build_upsample_tables<float>(spec, device);
}

// The CUDA path's work as a plan entry, recorded by it and by the CPU path in its place: its tables and
// one gather (plan::table_gather_call).
inline plan::EngineCall upsample_backward_kernels(const UpsampleTables& t, const at::Tensor& grad_in,
                                                  const at::Tensor& grad_out) {
  return plan::table_gather_call(static_cast<int64_t>(t.blob.nbytes()), static_cast<int64_t>(grad_in.nbytes()),
                                 static_cast<int64_t>(grad_out.nbytes()));
}

// The CPU computation: every element of grad_in gathers from grad_out, through the tables `t`
// (build_upsample_tables_for on the CPU).
inline void upsample_backward_cpu(at::Tensor& grad_in, const at::Tensor& grad_out, const UpsampleSpec& spec,
                                  const UpsampleTables& t, bool channels_last, GatherPath path = GatherPath::Auto) {
  const int64_t n = grad_in.numel();
  if (n == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_in.scalar_type(), "detops_upsample_backward", [&] {
    static_assert(std::is_same_v<acc_type<scalar_t>, float> || std::is_same_v<acc_type<scalar_t>, double>,
                  "build_upsample_tables_for packs float or double weights");
    const auto op = make_upsample_backward_op<scalar_t>(grad_in, grad_out, spec, t, channels_last);
    const bool lanes = channels_last || (path == GatherPath::Auto && op.channels >= kLanesAtLeast);
    if (path == GatherPath::Elements32 && upsample_fits_int32(grad_in, grad_out)) {
      upsample_backward_elements_cpu<scalar_t, int32_t>(op, n);
    } else if (path == GatherPath::Elements32 || path == GatherPath::Elements64) {
      upsample_backward_elements_cpu<scalar_t, int64_t>(op, n);
    } else if (path == GatherPath::Pixels || lanes) {
      upsample_backward_pixels(op, n / op.channels, t.longest);
    } else {
      upsample_backward_rows(op, n / op.in[2], t.longest);
    }
  });
}

inline void upsample_backward_cpu(at::Tensor& grad_in, const at::Tensor& grad_out, const UpsampleSpec& spec,
                                  bool channels_last, GatherPath path = GatherPath::Auto) {
  if (grad_in.numel() == 0) return;
  const UpsampleTables t = build_upsample_tables_for(spec, grad_in.scalar_type(), grad_in.device());
  upsample_backward_cpu(grad_in, grad_out, spec, t, channels_last, path);
}

namespace cuda {
// The computation on the CUDA engine (cuda/upsample.cu): one thread per grad_input element
// (UpsampleElementOp), 32-bit index math where every offset fits. Both tensors on one device.
void upsample_backward_kernel(at::Tensor& grad_in, const at::Tensor& grad_out, const UpsampleSpec& spec,
                              bool channels_last);
}  // namespace cuda

}  // namespace detops
