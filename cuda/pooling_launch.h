// CUDA entry points of the pooling backwards, called by ops/pooling.cpp after its checks. All tensors are
// contiguous and on one device; grad_in has the input's shape.
#pragma once

#include <ATen/core/Tensor.h>

#include "ops/pooling_op.h"

namespace detops::cuda {

// Average pools: writes every element of grad_in.
void avg_pool_backward_kernel(at::Tensor& grad_in, const at::Tensor& grad_out, const PoolDims& dims, bool adaptive,
                              bool count_include_pad, int64_t divisor_override);
// Max pools: grad_in must be zero-filled; writes the elements that some index selects.
void max_pool_backward_kernel(at::Tensor& grad_in, const at::Tensor& grad_out, const at::Tensor& indices,
                              int64_t output_plane, int64_t input_plane);

}  // namespace detops::cuda
