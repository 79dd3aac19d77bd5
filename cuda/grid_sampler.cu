// Grid sampler backwards on CUDA: the computation of ops/grid_sampler_op.h on the CUDA engine (one thread per
// grid point for grad_grid and the taps, Engine::for_each; then the sort-reduce engine over the taps for
// grad_input). Checks are done by ops/grid_sampler.cpp.
#include "cuda/sort_reduce.cuh"
#include "ops/grid_sampler_op.h"

#include <c10/cuda/CUDAGuard.h>

namespace detops::cuda {

void grid_sampler_backward_kernel(const GridGeom& g, const at::Tensor& grad_output, const at::Tensor& input,
                                  const at::Tensor& grid, at::Tensor& grad_grid, at::Tensor& grad_input) {
  const c10::cuda::CUDAGuard guard(grad_grid.device());
  grid_sampler_backward_compute<Engine>(g, grad_output, input, grid, grad_grid, grad_input);
}

}  // namespace detops::cuda
