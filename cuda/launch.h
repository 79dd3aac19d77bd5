// CUDA entry points called by the op front ends in ops/ after their checks. Each computes in place on
// `result`, which already holds self's values.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>

namespace detops::cuda {

void index_add_kernel(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                      const at::Scalar& alpha);
void scatter_add_kernel(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& src);

}  // namespace detops::cuda
