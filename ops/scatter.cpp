// scatter (src, value, reduce and value_reduce; functional, in place, .out): checks, routing and the CPU
// path. Without a reduction both devices run the sort-reduce engine over ScatterLastOp (ops/scatter_op.h,
// CUDA: cuda/scatter.cu): the last writer in source order wins, every dtype; a scalar value is written by
// stock's kernel, since every writer writes the same bits. reduce='add' and 'multiply'
// are scatter_reduce's sum and prod with self included (scatter_reduce_on_engine, docs/order_contract.md
// "Reductions"): floating dtypes in their accumulate type, integers and bool exactly in int64; complex goes
// to stock.
#include "ops/scatter.h"

#include "ops/common.h"
#include "ops/scatter_add.h"
#include "ops/scatter_cpu.h"
#include "ops/scatter_reduce.h"
#include "ops/scatter_op.h"
#include "ops/scatter_reduce_op.h"
#include "ops/sort_reduce_cpu.h"

#include <ATen/Dispatch_v2.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/scatter_cpu_dispatch.h>
#include <ATen/ops/scatter_cuda_dispatch.h>

#include <string>

namespace detops {
namespace {

constexpr const char* kOp = "scatter";

// Stock's reduce names for scatter_ (aten get_operator_enum without the new options).
Reduction parse_scatter_reduce(c10::string_view reduce) {
  if (reduce == "add") return Reduction::Sum;
  if (reduce == "multiply") return Reduction::Prod;
  TORCH_CHECK(false, kOp, "(): reduce argument must be either add or multiply. (got ", reduce, ")");
}

// The scalar as a tensor of self's dtype, broadcast over the index (strides 0): the value overloads then
// run the src code. As stock's kernel (value.to<scalar_t>()), a value the dtype cannot hold raises where the index
// is not empty.
at::Tensor value_as_src(const at::Tensor& self, const at::Tensor& index, const at::Scalar& value) {
  if (index.numel() != 0) {
    AT_DISPATCH_V2(self.scalar_type(), "detops_scatter_value", AT_WRAP([&] { (void)value.to<scalar_t>(); }),
                   AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), at::kHalf, at::kBFloat16, at::kBool);
  }
  return at::scalar_tensor(value, self.options()).expand(index.sizes());
}

// scatter_compute (ops/scatter_op.h) on the CPU: the same op over the same contributions (the CPU-only
// layouts of ops/scatter_cpu.h), through the last writer's pass (ops/sort_reduce_cpu.h).
void scatter_cpu(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  if (index.numel() == 0 || result.numel() == 0) return;
  cpu::with_scatter_layout_cpu<int64_t>("scatter_", result, dim, index, src,
                                        [&](const auto& layout, int64_t n, int64_t num_keys, int64_t D) {
    with_scatter_last_op(result, src, layout, [&](const auto& op) { cpu::last_writer_pass(op, n, num_keys, D); });
  });
}

// The last-writer scatter of src into self after the checks.
at::Tensor& scatter_last_writer(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  if (index.numel() == 0) return self;
  const int64_t size = self.dim() == 0 ? 1 : self.size(dim);
  check_scatter_index_values(kOp, index, dim, size);
  if (self.numel() == 0) return self;
  const at::Tensor index64 = scatter_index_int64(index);
  at::Tensor work = self.is_contiguous() ? self : self.contiguous();
  if (work.is_cuda()) {
    cuda::scatter_kernel(work, dim, index64, src);
  } else {
    scatter_cpu(work, dim, index64, src);
  }
  if (!work.is_same(self)) self.copy_(work);
  return self;
}

}  // namespace

at::Tensor& scatter_src_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  dim = check_scatter_args(kOp, self, dim, index, &src);
  return scatter_last_writer(self, dim, index, src);
}

at::Tensor scatter_src(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  return functional_from_inplace(self, [&](at::Tensor& result) { return scatter_src_(result, dim, index, src); });
}

at::Tensor& scatter_src_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                            at::Tensor& out) {
  return out_from_inplace(
      kOp, self, out, [&] { check_scatter_args(kOp, self, dim, index, &src); },
      [&](at::Tensor& result) -> at::Tensor& { return scatter_src_(result, dim, index, src); });
}

// NB: every write of scatter_.value is of the same value, so stock's kernel, whatever its order, writes the
// bits the contract's last writer would: the same on every device and every run, without a sort.
at::Tensor& scatter_value_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value) {
  dim = check_scatter_args(kOp, self, dim, index, nullptr);
  if (index.numel() == 0) return self;
  check_scatter_index_values(kOp, index, dim, self.dim() == 0 ? 1 : self.size(dim));
  return self.is_cuda() ? at::cuda::scatter_(self, dim, index, value) : at::cpu::scatter_(self, dim, index, value);
}

at::Tensor scatter_value(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value) {
  return functional_from_inplace(self,
                                 [&](at::Tensor& result) { return scatter_value_(result, dim, index, value); });
}

at::Tensor& scatter_value_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value,
                              at::Tensor& out) {
  return out_from_inplace(
      kOp, self, out, [&] { check_scatter_args(kOp, self, dim, index, nullptr); },
      [&](at::Tensor& result) -> at::Tensor& { return scatter_value_(result, dim, index, value); });
}

at::Tensor& scatter_src_reduce_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                                c10::string_view reduce) {
  TORCH_WARN_ONCE("The reduce argument of torch.scatter with Tensor src is deprecated and will be removed ",
                  "in a future PyTorch release. Use torch.scatter_reduce instead for more reduction options.");
  dim = check_scatter_args(kOp, self, dim, index, &src);
  const Reduction r = parse_scatter_reduce(reduce);
  if (!scatter_reduce_engine_dtype(self.scalar_type(), r)) {
    return self.is_cuda() ? at::cuda::scatter_(self, dim, index, src, reduce)
                          : at::cpu::scatter_(self, dim, index, src, reduce);
  }
  return scatter_reduce_on_engine(kOp, self, dim, index, src, r, true);
}

at::Tensor scatter_src_reduce(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                              c10::string_view reduce) {
  return functional_from_inplace(
      self, [&](at::Tensor& result) { return scatter_src_reduce_(result, dim, index, src, reduce); });
}

at::Tensor& scatter_src_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                   const at::Tensor& src, c10::string_view reduce, at::Tensor& out) {
  return out_from_inplace(
      kOp, self, out,
      [&] {
        check_scatter_args(kOp, self, dim, index, &src);
        parse_scatter_reduce(reduce);
      },
      [&](at::Tensor& result) -> at::Tensor& { return scatter_src_reduce_(result, dim, index, src, reduce); });
}

at::Tensor& scatter_value_reduce_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value,
                                  c10::string_view reduce) {
  dim = check_scatter_args(kOp, self, dim, index, nullptr);
  const Reduction r = parse_scatter_reduce(reduce);
  if (!scatter_reduce_engine_dtype(self.scalar_type(), r)) {
    return self.is_cuda() ? at::cuda::scatter_(self, dim, index, value, reduce)
                          : at::cpu::scatter_(self, dim, index, value, reduce);
  }
  return scatter_reduce_on_engine(kOp, self, dim, index, value_as_src(self, index, value), r, true);
}

at::Tensor scatter_value_reduce(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value,
                                c10::string_view reduce) {
  return functional_from_inplace(
      self, [&](at::Tensor& result) { return scatter_value_reduce_(result, dim, index, value, reduce); });
}

at::Tensor& scatter_value_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                     const at::Scalar& value, c10::string_view reduce, at::Tensor& out) {
  return out_from_inplace(
      kOp, self, out,
      [&] {
        check_scatter_args(kOp, self, dim, index, nullptr);
        parse_scatter_reduce(reduce);
      },
      [&](at::Tensor& result) -> at::Tensor& { return scatter_value_reduce_(result, dim, index, value, reduce); });
}

}  // namespace detops
