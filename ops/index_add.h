// index_add front ends (ops/index_add.cpp): aten's signatures, CPU and CUDA tensors.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>

namespace detops {

at::Tensor index_add(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                     const at::Scalar& alpha);
at::Tensor& index_add_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                       const at::Scalar& alpha);
at::Tensor& index_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                          const at::Tensor& source, const at::Scalar& alpha, at::Tensor& out);

}  // namespace detops
