// detops padding backwards: one function per covered aten overload, same signature as aten. Each runs on
// CPU and CUDA tensors (the twins call them directly; the aten CUDA overrides call them when the mode
// says). The arithmetic is in ops/padding_op.h.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

namespace detops {

at::Tensor reflection_pad1d_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef padding);
at::Tensor& reflection_pad1d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                          at::IntArrayRef padding, at::Tensor& grad_input);
at::Tensor reflection_pad2d_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef padding);
at::Tensor& reflection_pad2d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                          at::IntArrayRef padding, at::Tensor& grad_input);
at::Tensor reflection_pad3d_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef padding);
at::Tensor& reflection_pad3d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                          at::IntArrayRef padding, at::Tensor& grad_input);

at::Tensor replication_pad1d_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef padding);
at::Tensor& replication_pad1d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                           at::IntArrayRef padding, at::Tensor& grad_input);
at::Tensor replication_pad2d_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef padding);
at::Tensor& replication_pad2d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                           at::IntArrayRef padding, at::Tensor& grad_input);
at::Tensor replication_pad3d_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef padding);
at::Tensor& replication_pad3d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                           at::IntArrayRef padding, at::Tensor& grad_input);

}  // namespace detops
