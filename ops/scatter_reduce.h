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

// The reduction of ops/scatter_reduce_op.h.
enum class Reduction : int;

// Dtypes scatter_reduce_on_engine computes for reduction r: the floating ones, and the integers and bool
// exactly in int64 (bool but for mean, which stock rejects).
bool scatter_reduce_engine_dtype(at::ScalarType t, Reduction r);

// scatter_reduce_ of src into self after the front end's checks (dim wrapped, self of a dtype
// scatter_reduce_engine_dtype accepts): index values checked, integers widened to int64, the engine run on
// a contiguous result and copied back. The scatter_ overloads with a reduce argument (ops/scatter.cpp) run
// it too.
at::Tensor& scatter_reduce_on_engine(const char* op, at::Tensor& self, int64_t dim, const at::Tensor& index,
                                     const at::Tensor& src, Reduction r, bool include_self);

}  // namespace detops
