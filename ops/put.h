// put_ front end (ops/put.cpp): aten's signature, CPU and CUDA tensors. aten::put and aten::put.out have no
// CUDA kernel of their own: stock's composite kernel clones self and calls put_, so they reach this one.
#pragma once

#include <ATen/core/Tensor.h>

namespace detops {

at::Tensor& put_(at::Tensor& self, const at::Tensor& index, const at::Tensor& source, bool accumulate);

// The aten CPU override (registration/cpu_ops.def): put_ for accumulate=False, where stock's CPU kernel throws
// under the flag; stock's CPU kernel (deterministic, serial) for accumulate=True.
at::Tensor& put_cpu(at::Tensor& self, const at::Tensor& index, const at::Tensor& source, bool accumulate);

}  // namespace detops
