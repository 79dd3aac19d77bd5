// _index_put_impl_ front end (ops/index_put.cpp): aten's signature, CPU and CUDA tensors. index_put_,
// index_put and tensor[indices] = / += values reach it through aten.
#pragma once

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>

#include <optional>

namespace detops {

at::Tensor& index_put_impl_(at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                            const at::Tensor& values, bool accumulate, bool unsafe);

}  // namespace detops
