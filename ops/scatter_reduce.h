// scatter_reduce front ends (ops/scatter_reduce.cpp): aten's signatures, CPU and CUDA tensors.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include <cstdint>

namespace detops {

at::Tensor scatter_reduce(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                          c10::string_view reduce, bool include_self);
at::Tensor& scatter_reduce_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                            c10::string_view reduce, bool include_self);
at::Tensor& scatter_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                               c10::string_view reduce, bool include_self, at::Tensor& out);

}  // namespace detops
