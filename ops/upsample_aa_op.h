// Antialiased upsample backwards (_upsample_bilinear2d_aa_backward, _upsample_bicubic2d_aa_backward): the
// arithmetic shared by the CPU path (ops/upsample_aa.cpp) and the CUDA kernel (cuda/upsample_aa.cu),
// docs/order_contract.md and docs/upsample_aa.md.
//
// The forward is separable: along one axis, output o reads the input window [xmin(o), xmin(o) + xsize(o))
// with normalised filter weights w(o, j) (stock's rule: a support of interp_size / 2, widened by the scale
// when downsampling; a triangle for bilinear, Keys' cubic with a = -0.5 for bicubic). Output (oy, ox) gives
// input (iy, ix) the contribution wx(ox, ix) * wy(oy, iy) * grad_output[oy, ox] when both windows cover it.
// Per axis the windows are transposed once on the host into a table: for each input position, the outputs
// whose window covers it, in ascending order, with their weights (AaAxisTable). A grad_input element then
// walks its rows' list times its columns' list, which is ascending output linear position (row-major over
// (oy, ox)): the source order of the contract, folded with its tree.
#pragma once

#include <cstdint>

#include "ops/contract.h"

namespace detops {

// The two filters of stock's antialiased modes, with their support: interp_size / 2 at scale 1.
enum class AaFilter : int { kBilinear = 2, kBicubic = 4 };

// The filter's value at distance x, each operation rounded on its own (the order of stock's CUDA
// functors). NB: the weights are computed on the host only, once per call, so every device reads the same
// table; the _rn arithmetic keeps them independent of the host compiler's contraction choices too.
template <typename acc_t>
C10_HOST_DEVICE inline acc_t aa_filter(AaFilter filter, acc_t x) {
  if (x < acc_t(0)) x = -x;
  if (filter == AaFilter::kBilinear) {
    return x < acc_t(1) ? add_rn(acc_t(1), -x) : acc_t(0);
  }
  const acc_t a = acc_t(-0.5);
  if (x < acc_t(1)) {
    // ((a + 2) x - (a + 3)) x x + 1
    const acc_t t = add_rn(mul_rn(add_rn(a, acc_t(2)), x), -add_rn(a, acc_t(3)));
    return add_rn(mul_rn(mul_rn(t, x), x), acc_t(1));
  }
  if (x < acc_t(2)) {
    // (((x - 5) x + 8) x - 4) a
    const acc_t t = add_rn(mul_rn(add_rn(mul_rn(add_rn(x, acc_t(-5)), x), acc_t(8)), x), acc_t(-4));
    return mul_rn(t, a);
  }
  return acc_t(0);
}

// One axis of one call: stock's scale (input / output, or 1 / scale_factor, or (in - 1) / (out - 1) with
// align_corners), its support and the largest window it allows.
template <typename acc_t>
struct AaAxis {
  int64_t isize;
  int64_t osize;
  acc_t scale;
  acc_t support;
  acc_t invscale;
  int64_t max_window;
  AaFilter filter;

  C10_HOST_DEVICE AaAxis(int64_t in, int64_t out, acc_t s, AaFilter f)
      : isize(in), osize(out), scale(s), filter(f) {
    const acc_t half_size = acc_t(static_cast<int>(f) / 2);
    support = scale >= acc_t(1) ? mul_rn(half_size, scale) : half_size;
    invscale = scale >= acc_t(1) ? div_rn(acc_t(1), scale) : acc_t(1);
    int64_t c = static_cast<int64_t>(support);
    if (static_cast<acc_t>(c) < support) ++c;  // ceil of a non-negative value
    max_window = c * 2 + 1;
  }

  // Output o's window: its first input and its length (stock's xmin, xsize, clamped as its CPU kernel
  // clamps a rounding overshoot). Returns the window's centre.
  C10_HOST_DEVICE acc_t window(int64_t o, int64_t& xmin, int64_t& xsize) const {
    const acc_t center = mul_rn(scale, add_rn(static_cast<acc_t>(o), acc_t(0.5)));
    const int64_t lo = static_cast<int64_t>(add_rn(add_rn(center, -support), acc_t(0.5)));
    const int64_t hi = static_cast<int64_t>(add_rn(add_rn(center, support), acc_t(0.5)));
    xmin = lo > 0 ? lo : 0;
    xsize = (hi < isize ? hi : isize) - xmin;
    xsize = xsize < 0 ? 0 : (xsize > max_window ? max_window : xsize);
    return center;
  }

  // The unnormalised weight of input xmin + j in the window of centre `center`.
  C10_HOST_DEVICE acc_t raw_weight(acc_t center, int64_t xmin, int64_t j) const {
    const acc_t xmin_m_center = add_rn(static_cast<acc_t>(xmin), -center);
    const acc_t d = add_rn(add_rn(static_cast<acc_t>(j), xmin_m_center), acc_t(0.5));
    return aa_filter(filter, mul_rn(d, invscale));
  }
};

// One axis's transposed windows: input i is covered by outputs out[start[i] .. start[i + 1]) (ascending)
// with weights w[...] (normalised by their window's sum).
template <typename acc_t>
struct AaAxisTable {
  const int64_t* start;  // isize + 1 offsets
  const int64_t* out;
  const acc_t* w;
};

// Step 2 of the contract for a sequence known to hold at most kBlock contributions: one block, a left fold.
template <typename acc_t>
struct AaLeftFold {
  acc_t sum{};
  bool any = false;

  C10_HOST_DEVICE void push(acc_t v) {
    sum = any ? add_rn(sum, v) : v;
    any = true;
  }
};

// One thread (CUDA) or loop iteration (CPU) per grad_input element: its rows' outputs times its columns'
// outputs, in ascending (oy, ox), each contribution (wx * wy) * grad_output, folded by the contract's tree.
template <typename scalar_t>
struct UpsampleAaBackwardOp {
  using acc_t = acc_type<scalar_t>;
  const scalar_t* grad_out;  // contiguous [planes, OH, OW]
  scalar_t* grad_in;         // contiguous [planes, IH, IW]
  int64_t ih, iw, oh, ow;
  AaAxisTable<acc_t> rows;
  AaAxisTable<acc_t> cols;

  template <typename Acc>
  C10_HOST_DEVICE void visit(const scalar_t* plane, int64_t y, int64_t x, Acc& acc) const {
    for (int64_t a = rows.start[y]; a < rows.start[y + 1]; ++a) {
      const acc_t wy = rows.w[a];
      const scalar_t* row = plane + rows.out[a] * ow;
      for (int64_t b = cols.start[x]; b < cols.start[x + 1]; ++b) {
        acc.push(mul_rn(mul_rn(cols.w[b], wy), to_acc(row[cols.out[b]])));
      }
    }
  }

  C10_HOST_DEVICE void operator()(int64_t idx) const {
    const int64_t x = idx % iw;
    const int64_t rest = idx / iw;
    const int64_t y = rest % ih;
    const int64_t p = rest / ih;
    const int64_t total = (rows.start[y + 1] - rows.start[y]) * (cols.start[x + 1] - cols.start[x]);
    if (total == 0) {
      grad_in[idx] = round_to<scalar_t>(acc_t(0));
      return;
    }
    const scalar_t* plane = grad_out + p * (oh * ow);
    acc_t sum;
    // NB: up to kBlock contributions are one block of the contract's tree, a left fold; longer sequences
    // (upsampling by large factors) go through StreamingTree. Both give tree_reduce's bits.
    if (total <= kBlock) {
      AaLeftFold<acc_t> fold;
      visit(plane, y, x, fold);
      sum = fold.sum;
    } else {
      StreamingTree<acc_t> tree;
      visit(plane, y, x, tree);
      sum = tree.finish();
    }
    grad_in[idx] = round_to<scalar_t>(add_rn(acc_t(0), sum));
  }
};

}  // namespace detops

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>

namespace detops {

// The per-call tables, built on the host (ops/upsample_aa.cpp) and moved to grad_in's device in one copy:
// `blob` (int64) holds the rows' then the columns' offsets and outputs, then from `weights_at` their weights
// (acc_t of the dtype, rows' then columns', 8-byte aligned).
struct UpsampleAaTables {
  at::Tensor blob;
  int64_t row_start, row_out, col_start, col_out;  // int64 offsets into blob
  int64_t weights_at;                              // int64 offset of the weights in blob
  int64_t row_w, col_w;                            // acc_t offsets into the weights
};

template <typename scalar_t>
UpsampleAaBackwardOp<scalar_t> make_upsample_aa_backward_op(at::Tensor& grad_in, const at::Tensor& grad_out,
                                                           const UpsampleAaTables& t) {
  using acc_t = acc_type<scalar_t>;
  UpsampleAaBackwardOp<scalar_t> op;
  op.grad_out = grad_out.const_data_ptr<scalar_t>();
  op.grad_in = grad_in.data_ptr<scalar_t>();
  op.ih = grad_in.size(2);
  op.iw = grad_in.size(3);
  op.oh = grad_out.size(2);
  op.ow = grad_out.size(3);
  const int64_t* index = t.blob.const_data_ptr<int64_t>();
  const acc_t* weights = reinterpret_cast<const acc_t*>(index + t.weights_at);
  op.rows = {index + t.row_start, index + t.row_out, weights + t.row_w};
  op.cols = {index + t.col_start, index + t.col_out, weights + t.col_w};
  return op;
}

// On an engine (cpu::Engine or cuda::Engine): every element of grad_in (contiguous [N, C, IH, IW]) gathers
// its contributions from grad_out (contiguous [N, C, OH, OW]).
template <typename Engine>
void upsample_aa_backward_compute(at::Tensor& grad_in, const at::Tensor& grad_out, const UpsampleAaTables& t) {
  const int64_t n = grad_in.numel();
  if (n == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_in.scalar_type(), "detops_upsample_aa_backward", [&] {
    Engine::for_each(make_upsample_aa_backward_op<scalar_t>(grad_in, grad_out, t), n);
  });
}

namespace cuda {
// The computation on the CUDA engine (cuda/upsample_aa.cu). Tensors contiguous and on one device, the
// tables on it too.
void upsample_aa_backward_kernel(at::Tensor& grad_in, const at::Tensor& grad_out, const UpsampleAaTables& t);
}  // namespace cuda

}  // namespace detops
