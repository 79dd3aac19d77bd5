// detops pooling backwards: one function per covered aten overload, same signature as aten. Each runs on
// CPU and CUDA tensors (the twins call them directly; the aten CUDA overrides call them when the mode
// says). The arithmetic is in ops/pooling_op.h.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <optional>

namespace detops {

at::Tensor adaptive_avg_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self);
at::Tensor adaptive_avg_pool3d_backward(const at::Tensor& grad_output, const at::Tensor& self);
at::Tensor& adaptive_avg_pool3d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                             at::Tensor& grad_input);

at::Tensor avg_pool3d_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef kernel_size,
                               at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                               std::optional<int64_t> divisor_override);
at::Tensor& avg_pool3d_backward_out(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef kernel_size,
                                    at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode,
                                    bool count_include_pad, std::optional<int64_t> divisor_override,
                                    at::Tensor& grad_input);

at::Tensor adaptive_max_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                        const at::Tensor& indices);
at::Tensor& adaptive_max_pool2d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                             const at::Tensor& indices, at::Tensor& grad_input);
at::Tensor adaptive_max_pool3d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                        const at::Tensor& indices);
at::Tensor& adaptive_max_pool3d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                             const at::Tensor& indices, at::Tensor& grad_input);

at::Tensor fractional_max_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                          at::IntArrayRef kernel_size, at::IntArrayRef output_size,
                                          const at::Tensor& indices);
at::Tensor& fractional_max_pool2d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                               at::IntArrayRef kernel_size, at::IntArrayRef output_size,
                                               const at::Tensor& indices, at::Tensor& grad_input);
at::Tensor fractional_max_pool3d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                          at::IntArrayRef kernel_size, at::IntArrayRef output_size,
                                          const at::Tensor& indices);
at::Tensor& fractional_max_pool3d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                               at::IntArrayRef kernel_size, at::IntArrayRef output_size,
                                               const at::Tensor& indices, at::Tensor& grad_input);

at::Tensor max_pool3d_with_indices_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                            at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                            at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode,
                                            const at::Tensor& indices);
at::Tensor& max_pool3d_with_indices_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                                 at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                                 at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode,
                                                 const at::Tensor& indices, at::Tensor& grad_input);

}  // namespace detops
