// Antialiased upsample backwards (bilinear and bicubic, functional and .grad_input): checks, routing, the
// window tables and the CPU path. The CUDA path is cuda/upsample_aa.cu; both run the per-element code of
// ops/upsample_aa_op.h (docs/order_contract.md, docs/upsample_aa.md).
#include "ops/upsample_aa.h"

#include "ops/common.h"
#include "ops/upsample_aa_op.h"

#include <ATen/ops/_upsample_bicubic2d_aa_backward_cpu_dispatch.h>
#include <ATen/ops/_upsample_bicubic2d_aa_backward_cuda_dispatch.h>
#include <ATen/ops/_upsample_bilinear2d_aa_backward_cpu_dispatch.h>
#include <ATen/ops/_upsample_bilinear2d_aa_backward_cuda_dispatch.h>
#include <ATen/ops/empty.h>


namespace detops {
namespace {

// One covered op: its name (for errors), its filter, its result's memory format, and stock's kernels for the
// dtypes the engines do not compute (stock rejects them with its own message).
struct AaOp {
  using Stock = at::Tensor (*)(const at::Tensor&, at::IntArrayRef, at::IntArrayRef, bool, std::optional<double>,
                               std::optional<double>);
  using StockOut = at::Tensor& (*)(const at::Tensor&, at::IntArrayRef, at::IntArrayRef, bool,
                                   std::optional<double>, std::optional<double>, at::Tensor&);
  const char* name;
  AaFilter filter;
  bool keeps_channels_last;  // stock's meta function: grad_output's suggested format (bilinear) or contiguous
  Stock stock_cuda;
  Stock stock_cpu;
  StockOut stock_cuda_out;
  StockOut stock_cpu_out;
};

const AaOp kBilinear{"_upsample_bilinear2d_aa_backward", AaFilter::kBilinear, true,
                     &at::cuda::_upsample_bilinear2d_aa_backward, &at::cpu::_upsample_bilinear2d_aa_backward,
                     &at::cuda::_upsample_bilinear2d_aa_backward_outf,
                     &at::cpu::_upsample_bilinear2d_aa_backward_outf};
const AaOp kBicubic{"_upsample_bicubic2d_aa_backward", AaFilter::kBicubic, false,
                    &at::cuda::_upsample_bicubic2d_aa_backward, &at::cpu::_upsample_bicubic2d_aa_backward,
                    &at::cuda::_upsample_bicubic2d_aa_backward_outf, &at::cpu::_upsample_bicubic2d_aa_backward_outf};

// Stock's checks (upsample_2d_common_check and the structured meta function), with its messages after the
// op's name.
void check_upsample_aa_backward(const AaOp& op, const at::Tensor& grad_output, at::IntArrayRef output_size,
                                at::IntArrayRef input_size) {
  TORCH_CHECK(output_size.size() == 2, op.name, "(): It is expected output_size equals to 2, but got size ",
              output_size.size());
  TORCH_CHECK(input_size.size() == 4, op.name, "(): It is expected input_size equals to 4, but got size ",
              input_size.size());
  const int64_t ih = input_size[2], iw = input_size[3], oh = output_size[0], ow = output_size[1];
  TORCH_CHECK(ih > 0 && iw > 0 && oh > 0 && ow > 0, op.name,
              "(): Input and output sizes should be greater than 0, but got input (H: ", ih, ", W: ", iw,
              ") output (H: ", oh, ", W: ", ow, ")");
  TORCH_CHECK(grad_output.dim() == 4, op.name,
              "(): Expected grad_output to be a tensor of dimension 4 but got: dimension ", grad_output.dim());
  const int64_t full_output_size[4] = {input_size[0], input_size[1], oh, ow};
  for (int64_t i = 0; i < 4; ++i) {
    TORCH_CHECK(grad_output.size(i) == full_output_size[i], op.name,
                "(): Expected grad_output to have the same shape as output; output.size(", i,
                ") = ", full_output_size[i], " but got grad_output.size(", i, ") = ", grad_output.size(i));
  }
}

// The engines' computation, in stock's result format: grad_output's suggested memory format for bilinear,
// contiguous for bicubic (the bits do not depend on it). The .grad_input overloads pass `into`, their
// grad_input: computed straight into it and returned as it is where it can take the result (can_take),
// otherwise into a new tensor that copy_to_out copies over.
at::Tensor upsample_aa_backward(const AaOp& op, const at::Tensor& grad_output, at::IntArrayRef output_size,
                                at::IntArrayRef input_size, bool align_corners, std::optional<double> scales_h,
                                std::optional<double> scales_w, at::Tensor* into = nullptr) {
  check_upsample_aa_backward(op, grad_output, output_size, input_size);
  if (!engine_dtype(grad_output.scalar_type())) {
    return grad_output.is_cuda()
               ? op.stock_cuda(grad_output, output_size, input_size, align_corners, scales_h, scales_w)
               : op.stock_cpu(grad_output, output_size, input_size, align_corners, scales_h, scales_w);
  }
  const auto fmt = op.keeps_channels_last ? grad_output.suggest_memory_format() : at::MemoryFormat::Contiguous;
  const int64_t ih = input_size[2], iw = input_size[3], oh = output_size[0], ow = output_size[1];
  if (ih == oh && iw == ow) {
    // Stock's CUDA kernel copies grad_output when the sizes are equal, whatever the scales.
    return at::empty(input_size, grad_output.options().memory_format(fmt)).copy_(grad_output);
  }
  const bool direct = can_take(into, grad_output, input_size, at::MemoryFormat::Contiguous, {grad_output});
  at::Tensor grad_in =
      direct ? *into : at::empty(input_size, grad_output.options().memory_format(at::MemoryFormat::Contiguous));
  if (grad_in.numel() == 0) return grad_in.contiguous(fmt);
  const at::Tensor go = grad_output.contiguous();
  const UpsampleAaTables tables =
      grad_output.scalar_type() == at::kDouble
          ? build_aa_tables<double>(op.filter, ih, iw, oh, ow, align_corners, scales_h, scales_w, go.device())
          : build_aa_tables<float>(op.filter, ih, iw, oh, ow, align_corners, scales_h, scales_w, go.device());
  if (go.is_cuda()) {
    cuda::upsample_aa_backward_kernel(grad_in, go, tables);
  } else if (!plan::record(upsample_aa_backward_kernels(tables, grad_in, go))) {
    // NB: the CPU path stands for the CUDA path's tables and gather (upsample_aa_backward_kernels): recorded,
    // and in plan-only mode not run.
    upsample_aa_backward_cpu(grad_in, go, tables);
  }
  return direct || fmt == at::MemoryFormat::Contiguous ? grad_in : grad_in.contiguous(fmt);
}

at::Tensor& upsample_aa_backward_out(const AaOp& op, const at::Tensor& grad_output, at::IntArrayRef output_size,
                                     at::IntArrayRef input_size, bool align_corners, std::optional<double> scales_h,
                                     std::optional<double> scales_w, at::Tensor& grad_input) {
  if (!engine_dtype(grad_output.scalar_type())) {
    check_upsample_aa_backward(op, grad_output, output_size, input_size);
    return grad_output.is_cuda() ? op.stock_cuda_out(grad_output, output_size, input_size, align_corners, scales_h,
                                                     scales_w, grad_input)
                                 : op.stock_cpu_out(grad_output, output_size, input_size, align_corners, scales_h,
                                                    scales_w, grad_input);
  }
  return copy_to_out(op.name, "grad_input", grad_output,
                     upsample_aa_backward(op, grad_output, output_size, input_size, align_corners, scales_h,
                                          scales_w, &grad_input),
                     grad_input);
}

}  // namespace

at::Tensor upsample_bilinear2d_aa_backward(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                           at::IntArrayRef input_size, bool align_corners,
                                           std::optional<double> scales_h, std::optional<double> scales_w) {
  return upsample_aa_backward(kBilinear, grad_output, output_size, input_size, align_corners, scales_h, scales_w);
}

at::Tensor& upsample_bilinear2d_aa_backward_out(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                                at::IntArrayRef input_size, bool align_corners,
                                                std::optional<double> scales_h, std::optional<double> scales_w,
                                                at::Tensor& grad_input) {
  return upsample_aa_backward_out(kBilinear, grad_output, output_size, input_size, align_corners, scales_h,
                                  scales_w, grad_input);
}

at::Tensor upsample_bicubic2d_aa_backward(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                          at::IntArrayRef input_size, bool align_corners,
                                          std::optional<double> scales_h, std::optional<double> scales_w) {
  return upsample_aa_backward(kBicubic, grad_output, output_size, input_size, align_corners, scales_h, scales_w);
}

at::Tensor& upsample_bicubic2d_aa_backward_out(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                               at::IntArrayRef input_size, bool align_corners,
                                               std::optional<double> scales_h, std::optional<double> scales_w,
                                               at::Tensor& grad_input) {
  return upsample_aa_backward_out(kBicubic, grad_output, output_size, input_size, align_corners, scales_h,
                                  scales_w, grad_input);
}

}  // namespace detops
