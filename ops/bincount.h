// bincount front end (ops/bincount.cpp): same signature as aten::bincount, CPU and CUDA tensors.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace detops {

at::Tensor bincount(const at::Tensor& self, const std::optional<at::Tensor>& weights, int64_t minlength);

}  // namespace detops
