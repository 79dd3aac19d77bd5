// Upsample backwards, linear family (linear1d, bilinear2d, bicubic2d, trilinear3d; functional and
// .grad_input): checks, routing and the CPU path. The CUDA path is cuda/upsample.cu; both run the per-element
// code of ops/upsample_op.h (docs/order_contract.md, docs/upsample.md).
#include "ops/upsample.h"

#include "ops/common.h"
#include "ops/upsample_op.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/upsample_bicubic2d_backward_cpu_dispatch.h>
#include <ATen/ops/upsample_bicubic2d_backward_cuda_dispatch.h>
#include <ATen/ops/upsample_bilinear2d_backward_cpu_dispatch.h>
#include <ATen/ops/upsample_bilinear2d_backward_cuda_dispatch.h>
#include <ATen/ops/upsample_linear1d_backward_cpu_dispatch.h>
#include <ATen/ops/upsample_linear1d_backward_cuda_dispatch.h>
#include <ATen/ops/upsample_trilinear3d_backward_cpu_dispatch.h>
#include <ATen/ops/upsample_trilinear3d_backward_cuda_dispatch.h>

#include <array>
#include <sstream>

namespace detops {
namespace {

using Scales = std::array<std::optional<double>, 3>;  // (D, H, W); None on the unused axes

// One covered op: its name (for errors), its number of spatial axes, whether it is bicubic, and whether stock
// returns grad_output's suggested memory format (bilinear, trilinear) or a contiguous tensor.
struct UpsampleOp {
  const char* name;
  int nspatial;
  bool cubic;
  bool keeps_format;
};

const UpsampleOp kLinear1d{"upsample_linear1d_backward", 1, false, false};
const UpsampleOp kBilinear2d{"upsample_bilinear2d_backward", 2, false, true};
const UpsampleOp kBicubic2d{"upsample_bicubic2d_backward", 2, true, false};
const UpsampleOp kTrilinear3d{"upsample_trilinear3d_backward", 3, false, true};

std::string sizes_text(const char* const* names, int n, at::IntArrayRef sizes, int64_t offset) {
  std::ostringstream s;
  for (int k = 0; k < n; ++k) s << (k ? ", " : "") << names[k] << ": " << sizes[offset + k];
  return s.str();
}

// Stock's checks (upsample_{1,2,3}d_common_check and the backward meta functions), in stock's order and
// with its messages, prefixed by the op's name.
UpsampleSpec check_upsample_backward(const UpsampleOp& op, const at::Tensor& grad_output,
                                     at::IntArrayRef output_size, at::IntArrayRef input_size, bool align_corners,
                                     const Scales& scales) {
  const int n = op.nspatial;
  TORCH_CHECK(static_cast<int>(output_size.size()) == n, op.name, "(): It is expected output_size equals to ", n,
              ", but got size ", output_size.size());
  TORCH_CHECK(static_cast<int>(input_size.size()) == n + 2, op.name, "(): It is expected input_size equals to ",
              n + 2, ", but got size ", input_size.size());
  bool positive = true;
  for (int k = 0; k < n; ++k) positive = positive && input_size[2 + k] > 0 && output_size[k] > 0;
  static const char* const kNames[3][3] = {{"W"}, {"H", "W"}, {"D", "H", "W"}};
  if (!positive) {
    const std::string in = sizes_text(kNames[n - 1], n, input_size, 2);
    const std::string out = sizes_text(kNames[n - 1], n, output_size, 0);
    TORCH_CHECK(false, op.name, "(): Input and output sizes should be greater than 0, but got input (", in, ")",
                n == 1 ? " and output (" : " output (", out, ")");
  }
  const int64_t full[5] = {input_size[0], input_size[1], output_size[0], n > 1 ? output_size[1] : 0,
                           n > 2 ? output_size[2] : 0};
  if (n == 1) {
    for (int64_t i = 0; i < 3; ++i) {
      TORCH_CHECK(grad_output.dim() == 3 && grad_output.size(i) == full[i], op.name,
                  "(): Expected a tensor of dimension 3 and tensor.size[", i, "] == ", full[i],
                  " but got: dimension ", grad_output.dim(), " and tensor.size[", i,
                  "] = ", i < grad_output.dim() ? grad_output.size(i) : int64_t{-1});
    }
  } else {
    TORCH_CHECK(grad_output.dim() == n + 2, op.name, "(): Expected grad_output to be a tensor of dimension ", n + 2,
                " but got: dimension ", grad_output.dim());
    for (int64_t i = 0; i < n + 2; ++i) {
      TORCH_CHECK(grad_output.size(i) == full[i], op.name,
                  "(): Expected grad_output to have the same shape as output; output.size(", i, ") = ", full[i],
                  " but got grad_output.size(", i, ") = ", grad_output.size(i));
    }
  }
  UpsampleSpec spec{};
  spec.align_corners = align_corners;
  // Stock CUDA's maps, which the twin follows on every device (docs/upsample.md): a bicubic call whose two axes
  // keep their sizes is a copy, and so is a linear1d axis that keeps its size and a trilinear3d call whose
  // three axes do; otherwise a linear axis that keeps its size still maps through its scale (stock's CPU
  // kernels copy it whatever the scale), which is a copy only when that scale is 1.
  bool all_same = true;
  for (int k = 0; k < n; ++k) all_same = all_same && input_size[2 + k] == output_size[k];
  for (int k = 0; k < 3; ++k) {
    const int a = k - (3 - n);  // index among the op's spatial axes, < 0 for an unused axis
    spec.in[k] = a >= 0 ? input_size[2 + a] : 1;
    spec.out[k] = a >= 0 ? output_size[a] : 1;
    spec.has_scale[k] = scales[k].has_value();
    spec.scale[k] = scales[k].value_or(0.0);
    if (a < 0) {
      spec.map[k] = UpsampleMap::Identity;
    } else if (op.cubic) {
      spec.map[k] = all_same ? UpsampleMap::Identity : UpsampleMap::Cubic;
    } else {
      const bool copies = n == 1 || (n == 3 && all_same);
      const bool unit_scale = align_corners || !scales[k].has_value() || *scales[k] <= 0. || *scales[k] == 1.;
      spec.map[k] = spec.in[k] == spec.out[k] && (copies || unit_scale) ? UpsampleMap::Identity : UpsampleMap::Linear;
    }
  }
  return spec;
}

// Stock's kernels for the dtypes the engines do not compute (stock rejects them with its own message).
at::Tensor stock_functional(const UpsampleOp& op, const at::Tensor& g, at::IntArrayRef os, at::IntArrayRef is,
                            bool ac, const Scales& s) {
  const bool cuda = g.is_cuda();
  switch (op.nspatial) {
    case 1:
      return cuda ? at::cuda::upsample_linear1d_backward(g, os, is, ac, s[2])
                  : at::cpu::upsample_linear1d_backward(g, os, is, ac, s[2]);
    case 2:
      if (op.cubic) {
        return cuda ? at::cuda::upsample_bicubic2d_backward(g, os, is, ac, s[1], s[2])
                    : at::cpu::upsample_bicubic2d_backward(g, os, is, ac, s[1], s[2]);
      }
      return cuda ? at::cuda::upsample_bilinear2d_backward(g, os, is, ac, s[1], s[2])
                  : at::cpu::upsample_bilinear2d_backward(g, os, is, ac, s[1], s[2]);
    default:
      return cuda ? at::cuda::upsample_trilinear3d_backward(g, os, is, ac, s[0], s[1], s[2])
                  : at::cpu::upsample_trilinear3d_backward(g, os, is, ac, s[0], s[1], s[2]);
  }
}

at::Tensor& stock_out(const UpsampleOp& op, const at::Tensor& g, at::IntArrayRef os, at::IntArrayRef is, bool ac,
                      const Scales& s, at::Tensor& out) {
  const bool cuda = g.is_cuda();
  switch (op.nspatial) {
    case 1:
      return cuda ? at::cuda::upsample_linear1d_backward_outf(g, os, is, ac, s[2], out)
                  : at::cpu::upsample_linear1d_backward_outf(g, os, is, ac, s[2], out);
    case 2:
      if (op.cubic) {
        return cuda ? at::cuda::upsample_bicubic2d_backward_outf(g, os, is, ac, s[1], s[2], out)
                    : at::cpu::upsample_bicubic2d_backward_outf(g, os, is, ac, s[1], s[2], out);
      }
      return cuda ? at::cuda::upsample_bilinear2d_backward_outf(g, os, is, ac, s[1], s[2], out)
                  : at::cpu::upsample_bilinear2d_backward_outf(g, os, is, ac, s[1], s[2], out);
    default:
      return cuda ? at::cuda::upsample_trilinear3d_backward_outf(g, os, is, ac, s[0], s[1], s[2], out)
                  : at::cpu::upsample_trilinear3d_backward_outf(g, os, is, ac, s[0], s[1], s[2], out);
  }
}

// The engines' computation: grad_input in the memory format stock returns (the bits do not depend on it),
// grad_output read in its own suggested format. The .grad_input overloads pass `into`, their grad_input:
// computed straight into it where it can take the result (can_take: contiguous in that format too), otherwise
// into a new tensor that copy_to_out copies over.
at::Tensor upsample_backward(const UpsampleOp& op, const at::Tensor& grad_output, at::IntArrayRef output_size,
                             at::IntArrayRef input_size, bool align_corners, const Scales& scales,
                             at::Tensor* into = nullptr) {
  const UpsampleSpec spec = check_upsample_backward(op, grad_output, output_size, input_size, align_corners, scales);
  if (!engine_dtype(grad_output.scalar_type())) {
    return stock_functional(op, grad_output, output_size, input_size, align_corners, scales);
  }
  const auto fmt = op.keeps_format ? grad_output.suggest_memory_format() : at::MemoryFormat::Contiguous;
  at::Tensor grad_in = can_take(into, grad_output, input_size, fmt, {grad_output})
                           ? *into
                           : at::empty(input_size, grad_output.options().memory_format(fmt));
  if (grad_in.numel() == 0) return grad_in;
  const at::Tensor go = grad_output.contiguous(grad_output.suggest_memory_format());
  const bool channels_last = fmt != at::MemoryFormat::Contiguous;
  if (grad_output.is_cuda()) {
    cuda::upsample_backward_kernel(grad_in, go, spec, channels_last);
  } else {
    const UpsampleTables t = build_upsample_tables_for(spec, grad_in.scalar_type(), go.device());
    // NB: the CPU path stands for the CUDA path's tables and gather (upsample_backward_kernels): recorded, and
    // in plan-only mode not run.
    if (!plan::record(upsample_backward_kernels(t, grad_in, go))) {
      upsample_backward_cpu(grad_in, go, spec, t, channels_last);
    }
  }
  return grad_in;
}

at::Tensor& upsample_backward_out(const UpsampleOp& op, const at::Tensor& grad_output, at::IntArrayRef output_size,
                                  at::IntArrayRef input_size, bool align_corners, const Scales& scales,
                                  at::Tensor& grad_input) {
  if (!engine_dtype(grad_output.scalar_type())) {
    check_upsample_backward(op, grad_output, output_size, input_size, align_corners, scales);
    return stock_out(op, grad_output, output_size, input_size, align_corners, scales, grad_input);
  }
  return copy_to_out(op.name, "grad_input", grad_output,
                     upsample_backward(op, grad_output, output_size, input_size, align_corners, scales, &grad_input),
                     grad_input);
}

}  // namespace

at::Tensor upsample_linear1d_backward(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                      at::IntArrayRef input_size, bool align_corners, std::optional<double> scales) {
  return upsample_backward(kLinear1d, grad_output, output_size, input_size, align_corners, {{{}, {}, scales}});
}

at::Tensor& upsample_linear1d_backward_out(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                           at::IntArrayRef input_size, bool align_corners,
                                           std::optional<double> scales, at::Tensor& grad_input) {
  return upsample_backward_out(kLinear1d, grad_output, output_size, input_size, align_corners, {{{}, {}, scales}},
                               grad_input);
}

at::Tensor upsample_bilinear2d_backward(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                        at::IntArrayRef input_size, bool align_corners,
                                        std::optional<double> scales_h, std::optional<double> scales_w) {
  return upsample_backward(kBilinear2d, grad_output, output_size, input_size, align_corners,
                           {{{}, scales_h, scales_w}});
}

at::Tensor& upsample_bilinear2d_backward_out(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                             at::IntArrayRef input_size, bool align_corners,
                                             std::optional<double> scales_h, std::optional<double> scales_w,
                                             at::Tensor& grad_input) {
  return upsample_backward_out(kBilinear2d, grad_output, output_size, input_size, align_corners,
                               {{{}, scales_h, scales_w}}, grad_input);
}

at::Tensor upsample_bicubic2d_backward(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                       at::IntArrayRef input_size, bool align_corners,
                                       std::optional<double> scales_h, std::optional<double> scales_w) {
  return upsample_backward(kBicubic2d, grad_output, output_size, input_size, align_corners,
                           {{{}, scales_h, scales_w}});
}

at::Tensor& upsample_bicubic2d_backward_out(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                            at::IntArrayRef input_size, bool align_corners,
                                            std::optional<double> scales_h, std::optional<double> scales_w,
                                            at::Tensor& grad_input) {
  return upsample_backward_out(kBicubic2d, grad_output, output_size, input_size, align_corners,
                               {{{}, scales_h, scales_w}}, grad_input);
}

at::Tensor upsample_trilinear3d_backward(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                         at::IntArrayRef input_size, bool align_corners,
                                         std::optional<double> scales_d, std::optional<double> scales_h,
                                         std::optional<double> scales_w) {
  return upsample_backward(kTrilinear3d, grad_output, output_size, input_size, align_corners,
                           {{scales_d, scales_h, scales_w}});
}

at::Tensor& upsample_trilinear3d_backward_out(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                              at::IntArrayRef input_size, bool align_corners,
                                              std::optional<double> scales_d, std::optional<double> scales_h,
                                              std::optional<double> scales_w, at::Tensor& grad_input) {
  return upsample_backward_out(kTrilinear3d, grad_output, output_size, input_size, align_corners,
                               {{scales_d, scales_h, scales_w}}, grad_input);
}

}  // namespace detops
