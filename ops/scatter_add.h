// scatter_add front ends (ops/scatter_add.cpp): aten's signatures, CPU and CUDA tensors.
#pragma once

#include <ATen/core/Tensor.h>

namespace detops {

at::Tensor scatter_add(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src);
at::Tensor& scatter_add_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src);
at::Tensor& scatter_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                            at::Tensor& out);

// Stock's argument checks of the scatter family (aten scatter_gather_dtype_check, scatter_shape_check and
// the overlap checks of scatter_meta_impl), plus same-device checks, with `op` naming the op: scatter_add,
// scatter_reduce and scatter share them. `src` is null for the overloads that take a scalar value. Returns
// the wrapped dim.
int64_t check_scatter_args(const char* op, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                           const at::Tensor* src);

// Stock's index-value check of the scatter family for self's dimension `dim` of size `size` (on the host where
// validates_on_host()): the distinct values of a broadcast index are checked, and the whole index only to
// name the first bad position, so the error is the same either way.
void check_scatter_index_values(const char* op, const at::Tensor& index, int64_t dim, int64_t size);

}  // namespace detops
