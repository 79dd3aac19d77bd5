// detops grid sampler backwards: one function per covered aten overload, same signature as aten. Each runs on
// CPU and CUDA tensors (the twins call them directly; the aten CUDA overrides call them when the mode says).
// The arithmetic is in ops/grid_sampler_op.h.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <tuple>

namespace detops {

// (grad_input, grad_grid); grad_input is undefined when output_mask[0] is false, as in stock.
std::tuple<at::Tensor, at::Tensor> grid_sampler_2d_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                                            const at::Tensor& grid, int64_t interpolation_mode,
                                                            int64_t padding_mode, bool align_corners,
                                                            std::array<bool, 2> output_mask);
std::tuple<at::Tensor, at::Tensor> grid_sampler_3d_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                                            const at::Tensor& grid, int64_t interpolation_mode,
                                                            int64_t padding_mode, bool align_corners,
                                                            std::array<bool, 2> output_mask);

// (grad_self, grad_grid) of cuDNN's spatial transformer sampler: grid_sampler_2d_backward with bilinear
// interpolation, zeros padding and align_corners=True, for the inputs stock sends to cuDNN.
std::tuple<at::Tensor, at::Tensor> cudnn_grid_sampler_backward(const at::Tensor& self, const at::Tensor& grid,
                                                               const at::Tensor& grad_output);

}  // namespace detops
