// median / nanmedian along a dim (ops/median.cpp): aten's signatures of median.dim_values and
// nanmedian.dim_values, CPU and CUDA tensors. median.dim and nanmedian.dim have no CUDA kernel of their own:
// stock's composite kernel allocates values and indices and calls the .dim_values overload, so they reach
// these.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <tuple>

namespace detops {

std::tuple<at::Tensor&, at::Tensor&> median_out(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& values,
                                                at::Tensor& indices);
std::tuple<at::Tensor&, at::Tensor&> nanmedian_out(const at::Tensor& self, int64_t dim, bool keepdim,
                                                   at::Tensor& values, at::Tensor& indices);

}  // namespace detops
