// _embedding_bag_dense_backward front end (ops/embedding_bag.cpp): same signature as aten, CPU and CUDA.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace detops {

at::Tensor embedding_bag_dense_backward(const at::Tensor& grad, const at::Tensor& indices,
                                        const at::Tensor& offset2bag, const at::Tensor& bag_size,
                                        const at::Tensor& maximum_indices, int64_t num_weights,
                                        bool scale_grad_by_freq, int64_t mode,
                                        const std::optional<at::Tensor>& per_sample_weights, int64_t padding_idx);

}  // namespace detops
