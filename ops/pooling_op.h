// Pooling backwards: the per-element arithmetic shared by the CPU path (ops/pooling.cpp) and the CUDA
// kernels (cuda/pooling.cu), docs/order_contract.md.
//
// Source order for an input element is ascending output linear position within its (N, C) plane.
// - Average pools (avg_pool3d, adaptive avg 2d/3d) use a gather: one input element enumerates the output
//   elements whose window covers it, in ascending (t, h, w) order, and folds their contributions with
//   StreamingTree, the contract's tree fed one value at a time.
// - Max pools (adaptive max 2d/3d, fractional max 2d/3d, max_pool3d_with_indices) run the sort-reduce
//   engine: output element i sends grad_output[i] to key plane * input_plane_size + indices[i]; the stable
//   sort keeps ascending output position within each key, so it is the same order and the same tree.
// Planes are contiguous [planes, T, H, W] (2-D ops use T = 1). The starting value is 0, so an input
// element with contributions gets round_to(0 + S), one with none gets 0.
#pragma once

#include <cstdint>

#include "ops/contract.h"

namespace detops {

// Stock's adaptive windows (aten/src/ATen/native/AdaptivePooling.h): output o of `out` covers inputs
// [start, end) of `in`.
C10_HOST_DEVICE inline int64_t adaptive_start(int64_t o, int64_t out, int64_t in) {
  return (o / out) * in + ((o % out) * in) / out;
}
C10_HOST_DEVICE inline int64_t adaptive_end(int64_t o, int64_t out, int64_t in) { return 1 + ((o + 1) * in - 1) / out; }

struct PoolDims {
  int64_t isize[3];   // T, H, W of the input plane
  int64_t osize[3];   // T, H, W of the output plane
  int64_t kernel[3];  // regular windows only
  int64_t stride[3];
  int64_t pad[3];
};

template <typename scalar_t>
struct AvgPoolBackwardOp {
  using acc_t = acc_type<scalar_t>;
  const scalar_t* grad_out;  // contiguous [planes, OT, OH, OW]
  scalar_t* grad_in;         // contiguous [planes, IT, IH, IW]
  PoolDims d;
  bool adaptive;
  bool count_include_pad;
  int64_t divisor_override;  // 0: none

  // Outputs along dimension `k` that may cover input i: [lo, hi), a superset; covers() decides.
  C10_HOST_DEVICE void candidates(int k, int64_t i, int64_t& lo, int64_t& hi) const {
    const int64_t in = d.isize[k];
    const int64_t out = d.osize[k];
    if (adaptive) {
      lo = adaptive_start(i, in, out) - 1;
      hi = adaptive_end(i, in, out) + 1;
    } else {
      const int64_t num = i + d.pad[k] - d.kernel[k] + 1;  // o * stride >= num
      lo = num <= 0 ? 0 : (num + d.stride[k] - 1) / d.stride[k];
      hi = (i + d.pad[k]) / d.stride[k] + 1;
    }
    lo = lo < 0 ? 0 : lo;
    hi = hi > out ? out : hi;
  }

  // Stock's window of output o along dimension k, clipped to the input.
  C10_HOST_DEVICE void window(int k, int64_t o, int64_t& start, int64_t& end) const {
    if (adaptive) {
      start = adaptive_start(o, d.osize[k], d.isize[k]);
      end = adaptive_end(o, d.osize[k], d.isize[k]);
    } else {
      start = o * d.stride[k] - d.pad[k];
      end = start + d.kernel[k];
    }
  }

  C10_HOST_DEVICE bool covers(int k, int64_t o, int64_t i) const {
    int64_t start, end;
    window(k, o, start, end);
    return start <= i && i < end;
  }

  // Output (ot, oh, ow)'s contribution to each input it covers, computed as stock computes it:
  // adaptive: grad / kT / kH / kW (kT = 1 for the 2-D op, an exact division); avg_pool3d:
  // grad / divide_factor with stock's ceil_mode / count_include_pad / divisor_override rules.
  C10_HOST_DEVICE acc_t contribution(int64_t plane, int64_t ot, int64_t oh, int64_t ow) const {
    const acc_t g = to_acc(grad_out[((plane * d.osize[0] + ot) * d.osize[1] + oh) * d.osize[2] + ow]);
    const int64_t o[3] = {ot, oh, ow};
    if (adaptive) {
      acc_t v = g;
      for (int k = 0; k < 3; ++k) {
        int64_t start, end;
        window(k, o[k], start, end);
        v = div_rn(v, static_cast<acc_t>(end - start));
      }
      return v;
    }
    int64_t pool_size = 1;
    int64_t clipped = 1;
    for (int k = 0; k < 3; ++k) {
      int64_t start = o[k] * d.stride[k] - d.pad[k];
      int64_t end = start + d.kernel[k];
      end = end < d.isize[k] + d.pad[k] ? end : d.isize[k] + d.pad[k];
      pool_size *= end - start;
      start = start > 0 ? start : 0;
      end = end < d.isize[k] ? end : d.isize[k];
      clipped *= end - start;
    }
    const int64_t divide_factor = divisor_override != 0 ? divisor_override : count_include_pad ? pool_size : clipped;
    return div_rn(g, static_cast<acc_t>(divide_factor));
  }

  // Input element `idx` (linear in [planes, IT, IH, IW]): its covering outputs in ascending output
  // position, folded by the contract's tree.
  C10_HOST_DEVICE void operator()(int64_t idx) const {
    const int64_t iw = idx % d.isize[2];
    int64_t rest = idx / d.isize[2];
    const int64_t ih = rest % d.isize[1];
    rest /= d.isize[1];
    const int64_t it = rest % d.isize[0];
    const int64_t plane = rest / d.isize[0];
    int64_t lo[3], hi[3];
    candidates(0, it, lo[0], hi[0]);
    candidates(1, ih, lo[1], hi[1]);
    candidates(2, iw, lo[2], hi[2]);
    StreamingTree<acc_t> tree;
    for (int64_t ot = lo[0]; ot < hi[0]; ++ot) {
      if (!covers(0, ot, it)) continue;
      for (int64_t oh = lo[1]; oh < hi[1]; ++oh) {
        if (!covers(1, oh, ih)) continue;
        for (int64_t ow = lo[2]; ow < hi[2]; ++ow) {
          if (!covers(2, ow, iw)) continue;
          tree.push(contribution(plane, ot, oh, ow));
        }
      }
    }
    grad_in[idx] = tree.empty() ? round_to<scalar_t>(acc_t(0)) : round_to<scalar_t>(add_rn(acc_t(0), tree.finish()));
  }
};

// Max pools over the sort-reduce engine: one contribution per output element, one column.
template <typename scalar_t>
struct MaxPoolBackwardOp {
  using acc_t = acc_type<scalar_t>;
  const scalar_t* grad_out;  // contiguous [planes, output_plane]
  const int64_t* indices;    // contiguous, same shape
  scalar_t* grad_in;         // contiguous [planes, input_plane], zero-filled
  int64_t output_plane;
  int64_t input_plane;

  C10_HOST_DEVICE int64_t key(int64_t i) const {
    const int64_t k = indices[i];
    return (k >= 0 && k < input_plane) ? (i / output_plane) * input_plane + k : -1;
  }
  C10_HOST_DEVICE acc_t contribution(int64_t i, int64_t) const { return to_acc(grad_out[i]); }
  C10_HOST_DEVICE void finalize(int64_t key, int64_t, acc_t total) const {
    grad_in[key] = round_to<scalar_t>(add_rn(acc_t(0), total));
  }
};

}  // namespace detops

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>

namespace detops {

// Builders over contiguous tensors; grad_in is the result, grad_out and indices its inputs.
template <typename scalar_t>
AvgPoolBackwardOp<scalar_t> make_avg_pool_op(at::Tensor& grad_in, const at::Tensor& grad_out, const PoolDims& dims,
                                             bool adaptive, bool count_include_pad, int64_t divisor_override) {
  AvgPoolBackwardOp<scalar_t> op;
  op.grad_out = grad_out.const_data_ptr<scalar_t>();
  op.grad_in = grad_in.data_ptr<scalar_t>();
  op.d = dims;
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

// Average pools on an engine (cpu::Engine or cuda::Engine): every element of grad_in (contiguous, the
// input's shape) gathers its windows from grad_out (contiguous).
template <typename Engine>
void avg_pool_backward_compute(at::Tensor& grad_in, const at::Tensor& grad_out, const PoolDims& dims, bool adaptive,
                               bool count_include_pad, int64_t divisor_override) {
  const int64_t n = grad_in.numel();
  if (n == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_in.scalar_type(), "detops_avg_pool_backward", [&] {
    const auto op = make_avg_pool_op<scalar_t>(grad_in, grad_out, dims, adaptive, count_include_pad, divisor_override);
    Engine::for_each(op, n);
  });
}

// Max pools on an engine: grad_in zero-filled; the elements some index selects are written.
template <typename Engine>
void max_pool_backward_compute(const char* name, at::Tensor& grad_in, const at::Tensor& grad_out,
                               const at::Tensor& indices, int64_t output_plane, int64_t input_plane) {
  if (grad_out.numel() == 0 || grad_in.numel() == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_in.scalar_type(), "detops_max_pool_backward", [&] {
    const auto op = make_max_pool_op<scalar_t>(grad_in, grad_out, indices, output_plane, input_plane);
    Engine::template sort_reduce<acc_type<scalar_t>>(name, op, grad_out.numel(), grad_in.numel(), 1, grad_in);
  });
}

namespace cuda {
// The two computations on the CUDA engine (cuda/pooling.cu). All tensors contiguous and on one device.
void avg_pool_backward_kernel(at::Tensor& grad_in, const at::Tensor& grad_out, const PoolDims& dims, bool adaptive,
                              bool count_include_pad, int64_t divisor_override);
void max_pool_backward_kernel(const char* name, at::Tensor& grad_in, const at::Tensor& grad_out,
                              const at::Tensor& indices, int64_t output_plane, int64_t input_plane);
}  // namespace cuda

}  // namespace detops
