// nll_loss2d_forward on CUDA: nll_loss2d_forward_compute (ops/nll_loss2d_op.h) on the CUDA engine. Checks are
// done by ops/nll_loss2d.cpp.
#include "cuda/sort_reduce.cuh"
#include "ops/nll_loss2d_op.h"

#include <c10/cuda/CUDAGuard.h>

namespace detops::cuda {

void nll_loss2d_forward_kernel(at::Tensor& output, at::Tensor& total_weight, const at::Tensor& input,
                               const at::Tensor& target, const at::Tensor& weight, int64_t reduction,
                               int64_t ignore_index) {
  const c10::cuda::CUDAGuard guard(input.device());
  nll_loss2d_forward_compute<Engine>(output, total_weight, input, target, weight, reduction, ignore_index);
}

}  // namespace detops::cuda
