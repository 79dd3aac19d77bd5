// Grid sampler backwards (grid_sampler_2d_backward, grid_sampler_3d_backward, cudnn_grid_sampler_backward):
// checks and the CPU path. The CUDA path is cuda/grid_sampler.cu; both run the per-element code of
// ops/grid_sampler_op.h (docs/order_contract.md, docs/grid_sampler.md).
#include "ops/grid_sampler.h"

#include "ops/common.h"
#include "ops/grid_sampler_op.h"
#include "ops/sort_reduce_cpu.h"

#include <ATen/TensorUtils.h>
#include <ATen/native/CanUse32BitIndexMath.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

namespace detops {
namespace {

// Stock's check_grid_sampler_common and check_grid_sampler_{2,3}d (aten GridSamplerUtils.h), with its
// wording, naming the op. The number of dimensions is checked first, so that a tensor without the batch or
// coordinate dimension gets this message rather than an index error.
void check_common(const char* op, const at::Tensor& input, const at::Tensor& grid) {
  TORCH_CHECK(input.defined(), op, "(): expected input to not be undefined");
  TORCH_CHECK(grid.defined(), op, "(): expected grid to not be undefined");
  TORCH_CHECK(input.device() == grid.device(), op, "(): expected input and grid to be on same device, but input is on ",
              input.device(), " and grid is on ", grid.device());
  TORCH_CHECK(input.layout() == at::kStrided && grid.layout() == at::kStrided, op,
              "(): expected input and grid to have torch.strided layout, but input has ", input.layout(),
              " and grid has ", grid.layout());
  TORCH_CHECK(input.size(0) == grid.size(0), op,
              "(): expected grid and input to have same batch size, but got input with sizes ", input.sizes(),
              " and grid with sizes ", grid.sizes());
  TORCH_CHECK(grid.size(-1) == input.dim() - 2, op, "(): expected grid to have size ", input.dim() - 2,
              " in last dimension, but got grid with sizes ", grid.sizes());
  for (int64_t i = 2; i < input.dim(); ++i) {
    TORCH_CHECK(input.size(i) > 0, op, "(): expected input to have non-empty spatial dimensions, but input has sizes ",
                input.sizes(), " with dimension ", i, " being empty");
  }
}

void check_dims(const char* op, const at::Tensor& input, const at::Tensor& grid, int dims) {
  TORCH_CHECK(input.dim() == dims + 2 && input.dim() == grid.dim(), op, "(): expected ", dims + 2,
              "D input and grid with same number of dimensions, but got input with sizes ", input.sizes(),
              " and grid with sizes ", grid.sizes());
}

// grad_output's dtype, device and sizes [N, C, grid's spatial sizes...]: stock reads it without checking.
void check_grad_output(const char* op, const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& grid) {
  TORCH_CHECK(grad_output.defined(), op, "(): expected grad_output to not be undefined");
  check_same_device(op, input, grad_output, "grad_output");
  TORCH_CHECK(grad_output.scalar_type() == input.scalar_type(), op, "(): expected grad_output of dtype ",
              input.scalar_type(), " like input, but got ", grad_output.scalar_type());
  std::vector<int64_t> want{input.size(0), input.size(1)};
  for (int64_t i = 1; i + 1 < grid.dim(); ++i) want.push_back(grid.size(i));
  TORCH_CHECK(grad_output.sizes() == at::IntArrayRef(want), op, "(): expected grad_output with sizes ",
              at::IntArrayRef(want),
              " (input's batch and channels, grid's spatial sizes), but got ", grad_output.sizes());
}

void check_dtypes(const char* op, const at::Tensor& input, const at::Tensor& grid) {
  TORCH_CHECK(engine_dtype(input.scalar_type()), op,
              "(): expected input of a floating-point dtype (float, double, half or bfloat16), but got ",
              input.scalar_type());
  TORCH_CHECK(grid.scalar_type() == input.scalar_type(), op, "(): expected grid of dtype ", input.scalar_type(),
              " like input, but got ", grid.scalar_type());
}

GridGeom make_geom(int dims, const at::Tensor& input, const at::Tensor& grid, int64_t interpolation_mode,
                   int64_t padding_mode, bool align_corners) {
  GridGeom g{};
  g.dims = dims;
  g.N = input.size(0);
  g.C = input.size(1);
  for (int k = 0; k < 3; ++k) {
    g.in[k] = 1;
    g.out[k] = 1;
  }
  for (int k = 0; k < dims; ++k) {
    g.in[3 - dims + k] = input.size(2 + k);
    g.out[3 - dims + k] = grid.size(1 + k);
  }
  g.interpolation = static_cast<int>(interpolation_mode);
  g.padding = static_cast<int>(padding_mode);
  g.align_corners = align_corners;
  return g;
}

// The engines' computation. Both results contiguous, as stock's (LEGACY_CONTIGUOUS_MEMORY_FORMAT).
std::tuple<at::Tensor, at::Tensor> backward(const GridGeom& g, const at::Tensor& grad_output, const at::Tensor& input,
                                            const at::Tensor& grid, bool input_requires_grad) {
  at::Tensor grad_input = input_requires_grad ? at::zeros(input.sizes(), input.options()) : at::Tensor();
  at::Tensor grad_grid = at::empty(grid.sizes(), grid.options());
  if (grad_grid.numel() == 0) return {grad_input, grad_grid};
  const at::Tensor go = grad_output.contiguous();
  const at::Tensor in = input.contiguous();
  const at::Tensor gr = grid.contiguous();
  if (input.is_cuda()) {
    cuda::grid_sampler_backward_kernel(g, go, in, gr, grad_grid, grad_input);
  } else {
    grid_sampler_backward_compute<cpu::Engine, /*kStreaming=*/true>(g, go, in, gr, grad_grid, grad_input);
  }
  return {grad_input, grad_grid};
}

std::tuple<at::Tensor, at::Tensor> grid_sampler_backward(const char* op, int dims, const at::Tensor& grad_output,
                                                         const at::Tensor& input, const at::Tensor& grid,
                                                         int64_t interpolation_mode, int64_t padding_mode,
                                                         bool align_corners, std::array<bool, 2> output_mask) {
  TORCH_CHECK(input.defined() && grid.defined(), op, "(): expected input and grid to not be undefined");
  check_dims(op, input, grid, dims);
  check_common(op, input, grid);
  TORCH_CHECK(interpolation_mode >= kGridBilinear && interpolation_mode <= kGridBicubic, op,
              "(): expected interpolation_mode 0 (bilinear), 1 (nearest) or 2 (bicubic), but got ",
              interpolation_mode);
  TORCH_CHECK(padding_mode >= kGridZeros && padding_mode <= kGridReflection, op,
              "(): expected padding_mode 0 (zeros), 1 (border) or 2 (reflection), but got ", padding_mode);
  TORCH_CHECK(!(dims == 3 && interpolation_mode == kGridBicubic), op,
              "(): bicubic interpolation only supports 4D input");
  check_dtypes(op, input, grid);
  check_grad_output(op, grad_output, input, grid);
  // NB: stock computes grad_grid whatever output_mask[1] says; grad_input only when output_mask[0] is set.
  return backward(make_geom(dims, input, grid, interpolation_mode, padding_mode, align_corners), grad_output, input,
                  grid, output_mask[0]);
}

// The conditions under which stock's grid_sampler sends a call to cuDNN (cond_cudnn_grid_sampler, aten
// GridSamplerUtils.h), less the device and cuDNN availability ones, so that the twin runs on the CPU too.
bool cudnn_conditions(const at::Tensor& input, const at::Tensor& grid) {
  const auto ok_dtype = [](at::ScalarType t) { return t == at::kDouble || t == at::kFloat || t == at::kHalf; };
  return ok_dtype(input.scalar_type()) && ok_dtype(grid.scalar_type()) && input.numel() > 0 && grid.numel() > 0 &&
         at::native::canUse32BitIndexMath(input) && at::native::canUse32BitIndexMath(grid) && input.dim() == 4 &&
         input.size(1) <= 1024;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> grid_sampler_2d_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                                            const at::Tensor& grid, int64_t interpolation_mode,
                                                            int64_t padding_mode, bool align_corners,
                                                            std::array<bool, 2> output_mask) {
  return grid_sampler_backward("grid_sampler_2d_backward", 2, grad_output, input, grid, interpolation_mode,
                               padding_mode, align_corners, output_mask);
}

std::tuple<at::Tensor, at::Tensor> grid_sampler_3d_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                                            const at::Tensor& grid, int64_t interpolation_mode,
                                                            int64_t padding_mode, bool align_corners,
                                                            std::array<bool, 2> output_mask) {
  return grid_sampler_backward("grid_sampler_3d_backward", 3, grad_output, input, grid, interpolation_mode,
                               padding_mode, align_corners, output_mask);
}

std::tuple<at::Tensor, at::Tensor> cudnn_grid_sampler_backward(const at::Tensor& self, const at::Tensor& grid,
                                                               const at::Tensor& grad_output) {
  const char* op = "cudnn_grid_sampler_backward";
  TORCH_CHECK(self.defined() && grid.defined(), op, "(): expected self and grid to not be undefined");
  TORCH_CHECK(self.dim() >= 1 && grid.dim() >= 1, op, "(): expected self and grid with a batch dimension, but got ",
              "self with sizes ", self.sizes(), " and grid with sizes ", grid.sizes());
  check_common(op, self, grid);
  TORCH_CHECK(cudnn_conditions(self, grid), "Invalid arguments to cudnn_grid_sampler_backward: expected float, ",
              "double or half self and grid, non-empty and 32-bit indexable, and a 4-D self with at most 1024 ",
              "channels, but got self ", self.scalar_type(), " with sizes ", self.sizes(), " and grid ",
              grid.scalar_type(), " with sizes ", grid.sizes());
  // Stock's checkGridSize and checkDim (aten/src/ATen/native/cudnn/GridSampler.cpp), with their messages.
  const at::TensorArg self_arg{self, "input", 1}, grid_arg{grid, "grid", 2}, grad_arg{grad_output, "grad_output", 3};
  const at::CheckedFrom c = op;
  at::checkDim(c, grid_arg, 4);
  at::checkSize(c, grid_arg, 0, self.size(0));
  at::checkSize(c, grid_arg, 3, 2);
  at::checkDim(c, self_arg, 4);
  at::checkDim(c, grad_arg, 4);
  check_dtypes(op, self, grid);
  check_grad_output(op, grad_output, self, grid);
  const GridGeom g = make_geom(2, self, grid, kGridBilinear, kGridZeros, /*align_corners=*/true);
  return backward(g, grad_output, self, grid, /*input_requires_grad=*/true);
}

}  // namespace detops
