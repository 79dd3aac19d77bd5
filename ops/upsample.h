// detops upsample backwards (linear family): one function per covered aten overload, same signature as aten.
// Each runs on CPU and CUDA tensors (the twins call them directly; the aten CUDA overrides call them when the
// mode says). The arithmetic is in ops/upsample_op.h.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <optional>

namespace detops {

at::Tensor upsample_linear1d_backward(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                      at::IntArrayRef input_size, bool align_corners, std::optional<double> scales);
at::Tensor& upsample_linear1d_backward_out(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                           at::IntArrayRef input_size, bool align_corners,
                                           std::optional<double> scales, at::Tensor& grad_input);

at::Tensor upsample_bilinear2d_backward(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                        at::IntArrayRef input_size, bool align_corners,
                                        std::optional<double> scales_h, std::optional<double> scales_w);
at::Tensor& upsample_bilinear2d_backward_out(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                             at::IntArrayRef input_size, bool align_corners,
                                             std::optional<double> scales_h, std::optional<double> scales_w,
                                             at::Tensor& grad_input);

at::Tensor upsample_bicubic2d_backward(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                       at::IntArrayRef input_size, bool align_corners,
                                       std::optional<double> scales_h, std::optional<double> scales_w);
at::Tensor& upsample_bicubic2d_backward_out(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                            at::IntArrayRef input_size, bool align_corners,
                                            std::optional<double> scales_h, std::optional<double> scales_w,
                                            at::Tensor& grad_input);

at::Tensor upsample_trilinear3d_backward(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                         at::IntArrayRef input_size, bool align_corners,
                                         std::optional<double> scales_d, std::optional<double> scales_h,
                                         std::optional<double> scales_w);
at::Tensor& upsample_trilinear3d_backward_out(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                              at::IntArrayRef input_size, bool align_corners,
                                              std::optional<double> scales_d, std::optional<double> scales_h,
                                              std::optional<double> scales_w, at::Tensor& grad_input);

}  // namespace detops
