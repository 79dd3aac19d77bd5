// put_ front end (ops/put.cpp): aten's signature, CPU and CUDA tensors. aten::put and aten::put.out have no
// CUDA kernel of their own: stock's composite kernel clones self and calls put_, so they reach this one.
#pragma once

#include <ATen/core/Tensor.h>

namespace detops {

at::Tensor& put_(at::Tensor& self, const at::Tensor& index, const at::Tensor& source, bool accumulate);

}  // namespace detops
