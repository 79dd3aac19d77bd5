// scatter front ends (ops/scatter.cpp): aten's signatures, CPU and CUDA tensors. One name per overload:
// scatter.src -> scatter_src, scatter_.value -> scatter_value_, scatter.reduce_out -> scatter_src_reduce_out.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>
#include <c10/util/string_view.h>

#include <cstdint>

namespace detops {

at::Tensor scatter_src(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src);
at::Tensor& scatter_src_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src);
at::Tensor& scatter_src_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                            at::Tensor& out);

at::Tensor scatter_value(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value);
at::Tensor& scatter_value_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value);
at::Tensor& scatter_value_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value,
                              at::Tensor& out);

at::Tensor scatter_src_reduce(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                              c10::string_view reduce);
at::Tensor& scatter_src_reduce_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                                c10::string_view reduce);
at::Tensor& scatter_src_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                   const at::Tensor& src, c10::string_view reduce, at::Tensor& out);

at::Tensor scatter_value_reduce(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value,
                                c10::string_view reduce);
at::Tensor& scatter_value_reduce_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value,
                                  c10::string_view reduce);
at::Tensor& scatter_value_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                     const at::Scalar& value, c10::string_view reduce, at::Tensor& out);

}  // namespace detops
