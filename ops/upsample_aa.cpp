// Antialiased upsample backwards (bilinear and bicubic, functional and .grad_input): checks, routing, the
// window tables and the CPU path. The CUDA path is cuda/upsample_aa.cu; both run the per-element code of
// ops/upsample_aa_op.h (docs/order_contract.md, docs/upsample_aa.md).
#include "ops/upsample_aa.h"

#include "ops/common.h"
#include "ops/sort_reduce_cpu.h"
#include "ops/upsample_aa_op.h"

#include <ATen/ops/_upsample_bicubic2d_aa_backward_cpu_dispatch.h>
#include <ATen/ops/_upsample_bicubic2d_aa_backward_cuda_dispatch.h>
#include <ATen/ops/_upsample_bilinear2d_aa_backward_cpu_dispatch.h>
#include <ATen/ops/_upsample_bilinear2d_aa_backward_cuda_dispatch.h>
#include <ATen/ops/empty.h>

#include <cstring>
#include <vector>

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

// Stock's area_pixel_compute_scale in the accumulate type: (in - 1) / (out - 1) with align_corners, else
// 1 / scale where a positive scale is given, else in / out.
template <typename acc_t>
acc_t aa_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners) {
    return out > 1 ? static_cast<acc_t>(in - 1) / static_cast<acc_t>(out - 1) : acc_t(0);
  }
  return (scale.has_value() && *scale > 0.) ? static_cast<acc_t>(1.0 / *scale)
                                             : static_cast<acc_t>(in) / static_cast<acc_t>(out);
}

// One axis's windows transposed: for each input, the outputs covering it in ascending order, with their
// normalised weights (stock's: the window's raw weights folded left to right, each divided by the sum
// unless it is zero).
template <typename acc_t>
void build_axis(const AaAxis<acc_t>& ax, std::vector<int64_t>& start, std::vector<int64_t>& out,
                std::vector<acc_t>& w) {
  std::vector<int64_t> xmin(ax.osize), xsize(ax.osize);
  std::vector<acc_t> centers(ax.osize);
  start.assign(ax.isize + 1, 0);
  for (int64_t o = 0; o < ax.osize; ++o) {
    centers[o] = ax.window(o, xmin[o], xsize[o]);
    for (int64_t j = 0; j < xsize[o]; ++j) ++start[xmin[o] + j + 1];
  }
  for (int64_t i = 0; i < ax.isize; ++i) start[i + 1] += start[i];
  out.assign(start[ax.isize], 0);
  w.assign(start[ax.isize], acc_t(0));
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  std::vector<acc_t> window;
  // NB: outputs in ascending order, so each input's list is in ascending output order: the source order of
  // the contract (docs/order_contract.md).
  for (int64_t o = 0; o < ax.osize; ++o) {
    window.resize(xsize[o]);
    acc_t total = acc_t(0);
    for (int64_t j = 0; j < xsize[o]; ++j) {
      window[j] = ax.raw_weight(centers[o], xmin[o], j);
      total = add_rn(total, window[j]);
    }
    for (int64_t j = 0; j < xsize[o]; ++j) {
      const int64_t k = fill[xmin[o] + j]++;
      out[k] = o;
      w[k] = total != acc_t(0) ? div_rn(window[j], total) : window[j];
    }
  }
}

template <typename acc_t>
UpsampleAaTables build_tables(AaFilter filter, int64_t ih, int64_t iw, int64_t oh, int64_t ow, bool align_corners,
                              std::optional<double> scales_h, std::optional<double> scales_w,
                              const at::Device& device) {
  std::vector<int64_t> rs, ro, cs, co;
  std::vector<acc_t> rw, cw;
  build_axis(AaAxis<acc_t>(ih, oh, aa_scale<acc_t>(ih, oh, align_corners, scales_h), filter), rs, ro, rw);
  build_axis(AaAxis<acc_t>(iw, ow, aa_scale<acc_t>(iw, ow, align_corners, scales_w), filter), cs, co, cw);
  UpsampleAaTables t;
  t.row_start = 0;
  t.row_out = t.row_start + static_cast<int64_t>(rs.size());
  t.col_start = t.row_out + static_cast<int64_t>(ro.size());
  t.col_out = t.col_start + static_cast<int64_t>(cs.size());
  t.weights_at = t.col_out + static_cast<int64_t>(co.size());
  t.row_w = 0;
  t.col_w = static_cast<int64_t>(rw.size());
  const int64_t weight_bytes = static_cast<int64_t>((rw.size() + cw.size()) * sizeof(acc_t));
  const int64_t words = t.weights_at + (weight_bytes + 7) / 8;
  // Pinned for a CUDA call, so the one copy below is asynchronous on the current stream (the caching host
  // allocator keeps the buffer until the copy has run).
  at::Tensor blob = at::empty({words}, at::TensorOptions().dtype(at::kLong).pinned_memory(device.is_cuda()));
  int64_t* ip = blob.data_ptr<int64_t>();
  acc_t* wp = reinterpret_cast<acc_t*>(ip + t.weights_at);
  const auto put = [](auto* dst, const auto& v) {
    if (!v.empty()) std::memcpy(dst, v.data(), v.size() * sizeof(v[0]));
  };
  put(ip + t.row_start, rs);
  put(ip + t.row_out, ro);
  put(ip + t.col_start, cs);
  put(ip + t.col_out, co);
  put(wp + t.row_w, rw);
  put(wp + t.col_w, cw);
  t.blob = blob.to(device, /*non_blocking=*/true);
  return t;
}

// The engines' computation, in stock's result format: grad_output's suggested memory format for bilinear,
// contiguous for bicubic (the bits do not depend on it).
at::Tensor upsample_aa_backward(const AaOp& op, const at::Tensor& grad_output, at::IntArrayRef output_size,
                                at::IntArrayRef input_size, bool align_corners, std::optional<double> scales_h,
                                std::optional<double> scales_w) {
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
  at::Tensor grad_in = at::empty(input_size, grad_output.options().memory_format(at::MemoryFormat::Contiguous));
  if (grad_in.numel() == 0) return grad_in.contiguous(fmt);
  const at::Tensor go = grad_output.contiguous();
  const UpsampleAaTables tables =
      grad_output.scalar_type() == at::kDouble
          ? build_tables<double>(op.filter, ih, iw, oh, ow, align_corners, scales_h, scales_w, go.device())
          : build_tables<float>(op.filter, ih, iw, oh, ow, align_corners, scales_h, scales_w, go.device());
  if (go.is_cuda()) {
    cuda::upsample_aa_backward_kernel(grad_in, go, tables);
  } else {
    upsample_aa_backward_compute<cpu::Engine>(grad_in, go, tables);
  }
  return fmt == at::MemoryFormat::Contiguous ? grad_in : grad_in.contiguous(fmt);
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
  return copy_to_out(
      op.name, "grad_input", grad_output,
      upsample_aa_backward(op, grad_output, output_size, input_size, align_corners, scales_h, scales_w), grad_input);
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
