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

namespace detops {

// One call's shapes per axis (D, H, W); the 1-D and 2-D ops use size 1 and padding 0 on the unused axes.
struct PadDims {
  int64_t isize[3];   // input plane
  int64_t osize[3];   // grad_output plane: isize + before + after
  int64_t before[3];  // padding before the input (front, top, left); negative crops
};

// The outputs of one axis that read one input position: up to three runs of consecutive output positions,
// in ascending order and disjoint.
struct AxisSources {
  int64_t first[3];
  int64_t count[3];
  int runs = 0;

  C10_HOST_DEVICE void add(int64_t lo, int64_t hi, int64_t size) {  // outputs [lo, hi] clipped to [0, size)
    lo = lo < 0 ? 0 : lo;
    hi = hi > size - 1 ? size - 1 : hi;
    if (lo > hi) return;
    first[runs] = lo;
    count[runs] = hi - lo + 1;
    ++runs;
  }
  C10_HOST_DEVICE int64_t total() const {
    int64_t t = 0;
    for (int r = 0; r < runs; ++r) t += count[r];
    return t;
  }
};

// One thread (CUDA) or loop iteration (CPU) per grad_input element: its sources along each axis, then their
// grad_output values in ascending output position, folded by the contract's tree.
template <typename scalar_t>
struct PadBackwardOp {
  using acc_t = acc_type<scalar_t>;
  const scalar_t* grad_out;  // contiguous [planes, OD, OH, OW]
  scalar_t* grad_in;         // contiguous [planes, ID, IH, IW]
  PadDims d;
  bool reflect;

  C10_HOST_DEVICE AxisSources sources(int k, int64_t i) const {
    const int64_t n = d.isize[k];
    const int64_t b = d.before[k];
    const int64_t size = d.osize[k];
    AxisSources s;
    if (reflect) {
      if (i > 0) s.add(b - i, b - i, size);
      s.add(b + i, b + i, size);
      if (i < n - 1) s.add(b + 2 * (n - 1) - i, b + 2 * (n - 1) - i, size);
    } else {
      // Outputs o with clamp(o - b, 0, n - 1) == i.
      s.add(i == 0 ? int64_t{0} : b + i, i == n - 1 ? size - 1 : b + i, size);
    }
    return s;
  }

  // Feeds acc the sources' grad_output values in ascending (d, h, w) output order.
  template <typename Acc>
  C10_HOST_DEVICE void visit(const AxisSources* s, const scalar_t* plane, Acc& acc) const {
    for (int rd = 0; rd < s[0].runs; ++rd) {
      for (int64_t od = s[0].first[rd]; od < s[0].first[rd] + s[0].count[rd]; ++od) {
        for (int rh = 0; rh < s[1].runs; ++rh) {
          for (int64_t oh = s[1].first[rh]; oh < s[1].first[rh] + s[1].count[rh]; ++oh) {
            const scalar_t* row = plane + (od * d.osize[1] + oh) * d.osize[2];
            for (int rw = 0; rw < s[2].runs; ++rw) {
              for (int64_t ow = s[2].first[rw]; ow < s[2].first[rw] + s[2].count[rw]; ++ow) {
                acc.push(to_acc(row[ow]));
              }
            }
          }
        }
      }
    }
  }

  C10_HOST_DEVICE void operator()(int64_t idx) const {
    const int64_t iw = idx % d.isize[2];
    int64_t rest = idx / d.isize[2];
    const int64_t ih = rest % d.isize[1];
    rest /= d.isize[1];
    const int64_t it = rest % d.isize[0];
    const int64_t p = rest / d.isize[0];
    const AxisSources s[3] = {sources(0, it), sources(1, ih), sources(2, iw)};
    const int64_t total = s[0].total() * s[1].total() * s[2].total();
    if (total == 0) {
      grad_in[idx] = round_to<scalar_t>(acc_t(0));
      return;
    }
    const scalar_t* plane = grad_out + p * (d.osize[0] * d.osize[1] * d.osize[2]);
    acc_t sum;
    // NB: at most kBlock contributions (always for reflect: 27 at most) are one block of the contract's
    // tree, a plain left fold; longer sequences (replicate borders) go through StreamingTree. Both give
    // tree_reduce's bits for the same sequence.
    if (total <= kBlock) {
      BlockFold<acc_t> fold;
      visit(s, plane, fold);
      sum = fold.finish();
    } else {
      StreamingTree<acc_t> tree;
      visit(s, plane, tree);
      sum = tree.finish();
    }
    grad_in[idx] = round_to<scalar_t>(add_rn(acc_t(0), sum));
  }
};

}  // namespace detops

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>

namespace detops {

// The builder over contiguous tensors: grad_in is the result, grad_out its input.
template <typename scalar_t>
PadBackwardOp<scalar_t> make_pad_backward_op(at::Tensor& grad_in, const at::Tensor& grad_out, const PadDims& dims,
                                             bool reflect) {
  PadBackwardOp<scalar_t> op;
  op.grad_out = grad_out.const_data_ptr<scalar_t>();
  op.grad_in = grad_in.data_ptr<scalar_t>();
  op.d = dims;
  op.reflect = reflect;
  return op;
}

// On an engine (cpu::Engine or cuda::Engine): every element of grad_in (contiguous, self's shape) gathers
// its sources from grad_out (contiguous).
template <typename Engine>
void pad_backward_compute(at::Tensor& grad_in, const at::Tensor& grad_out, const PadDims& dims, bool reflect) {
  const int64_t n = grad_in.numel();
  if (n == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_in.scalar_type(), "detops_padding_backward", [&] {
    Engine::for_each(make_pad_backward_op<scalar_t>(grad_in, grad_out, dims, reflect), n);
  });
}

namespace cuda {
// The computation on the CUDA engine (cuda/padding.cu). Both tensors contiguous and on one device.
void pad_backward_kernel(at::Tensor& grad_in, const at::Tensor& grad_out, const PadDims& dims, bool reflect);
}  // namespace cuda

}  // namespace detops
