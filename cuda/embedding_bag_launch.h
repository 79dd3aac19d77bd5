// CUDA entries of _embedding_bag_dense_backward, called by ops/embedding_bag.cpp after its checks. All
// tensors contiguous, index tensors of one dtype; `out` zero-filled [num_weights, D].
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace detops::cuda {

// bag_size (mean), counts (scale_grad_by_freq) and per_sample_weights may be undefined.
void embedding_bag_sum_backward_kernel(at::Tensor& out, const at::Tensor& grad, const at::Tensor& indices,
                                       const at::Tensor& offset2bag, const at::Tensor& bag_size,
                                       const at::Tensor& counts, const at::Tensor& per_sample_weights,
                                       int64_t padding_idx);
void embedding_bag_max_backward_kernel(at::Tensor& out, const at::Tensor& grad, const at::Tensor& max_indices,
                                       const at::Tensor& bag_size, int64_t padding_idx);

}  // namespace detops::cuda
