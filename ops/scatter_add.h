// scatter_add front ends (ops/scatter_add.cpp): aten's signatures, CPU and CUDA tensors.
#pragma once

#include <ATen/core/Tensor.h>

namespace detops {

at::Tensor scatter_add(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src);
at::Tensor& scatter_add_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src);
at::Tensor& scatter_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                            at::Tensor& out);

}  // namespace detops
