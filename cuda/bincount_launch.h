// CUDA entry of bincount with weights, called by ops/bincount.cpp after its checks.
#pragma once

#include <ATen/core/Tensor.h>

namespace detops::cuda {

// out: zero-filled [nbins] of weights' dtype (float or double); self and weights contiguous, values of
// self already validated to lie in [0, nbins).
void bincount_kernel(at::Tensor& out, const at::Tensor& self, const at::Tensor& weights);

}  // namespace detops::cuda
