// index_copy front ends (ops/index_copy.cpp): aten's signatures, CPU and CUDA tensors.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace detops {

at::Tensor index_copy(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source);
at::Tensor& index_copy_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source);
at::Tensor& index_copy_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                           at::Tensor& out);

}  // namespace detops
