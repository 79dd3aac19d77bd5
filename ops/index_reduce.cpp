// index_reduce (functional, in place, .out): checks, routing and the CPU path. The CUDA path is
// cuda/index_reduce.cu; both run the sort-reduce engine over IndexReduceOp (docs/order_contract.md,
// "Reductions"). Floating dtypes are computed in their accumulate type, integer dtypes exactly in int64 and
// written back truncated, as stock's arithmetic wraps; other dtypes (bool, complex, which stock rejects) go to
// stock.
#include "ops/index_reduce.h"

#include "ops/common.h"
#include "ops/index_reduce_op.h"
#include "ops/sort_reduce_cpu.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/ops/index_reduce_cpu_dispatch.h>
#include <ATen/ops/index_reduce_cuda_dispatch.h>

#include <string>
#include <type_traits>

namespace detops {
namespace {

constexpr const char* kOp = "index_reduce_";

// Stock's reduce names for index_reduce (no sum).
Reduction parse_reduction(c10::string_view reduce) {
  if (reduce == "prod") return Reduction::Prod;
  if (reduce == "mean") return Reduction::Mean;
  if (reduce == "amax") return Reduction::Max;
  if (reduce == "amin") return Reduction::Min;
  TORCH_CHECK(false, kOp, "(): Expected reduce to be one of prod, mean, amax or amin but got ", reduce, ".");
}

// Stock's checks in stock's order (aten index_reduce meta function and index_func_meta_impl), plus same-device
// checks. Returns the wrapped dim.
int64_t check_index_reduce(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                           c10::string_view reduce) {
  parse_reduction(reduce);
  dim = at::maybe_wrap_dim(dim, self.dim());
  TORCH_CHECK_INDEX(index.dim() <= 1, kOp, "(): Index is supposed to be a vector, but got dim: ", index.dim(),
                    " with type: ", index.scalar_type(), " and size: ", index.sizes());
  TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt, kOp,
              "(): Expected dtype int32/int64 for index but got: ", index.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(), kOp, "(): self (", self.scalar_type(),
              ") and source (", source.scalar_type(), ") must have the same scalar type");
  TORCH_CHECK(dim == 0 || dim < source.dim(), kOp, "(): Indexing dim ", dim,
              " is out of bounds of the source tensor with dim ", source.dim());
  const int64_t source_rows = source.dim() == 0 ? 1 : source.size(dim);
  TORCH_CHECK(index.numel() == source_rows, kOp, "(): Number of indices (", index.numel(),
              ") should be equal to source.size(dim): (", source_rows, "), for dim: ", dim);
  auto self_sizes = self.sizes().vec();
  auto source_sizes = source.sizes().vec();
  if (source.dim() != 0 && self.dim() != 0) {
    self_sizes.erase(self_sizes.begin() + dim);
    source_sizes.erase(source_sizes.begin() + dim);
  }
  TORCH_CHECK(self_sizes == source_sizes, kOp,
              "(): source tensor shape must match self tensor shape, excluding the specified dimension. "
              "Got self.shape = ", self.sizes(), " source.shape = ", source.sizes());
  check_same_device(kOp, self, index, "index");
  check_same_device(kOp, self, source, "source");
  at::assert_no_internal_overlap(self);
  at::assert_no_overlap(self, index);
  at::assert_no_overlap(self, source);
  return dim;
}

// Integer dtypes computed exactly in int64.
bool int64_dtype(at::ScalarType t) {
  return t == at::kByte || t == at::kChar || t == at::kShort || t == at::kInt || t == at::kLong;
}

// IndexReduceOp over a self with no outer slice (every dimension before `dim` of size 1), so that column c is
// element c of a row: the same keys and arithmetic (IndexReduceOp::finalized) with no per-column index
// arithmetic, so the CPU engine's loops over a row's columns vectorise.
template <typename Op>
struct IndexReduceRowOp {
  using acc_t = typename Op::acc_t;
  using Combine = typename Op::Combine;
  Op op;

  int64_t key(int64_t i) const {
    return op.key(i);
  }
  acc_t contribution(int64_t i, int64_t c) const {
    return to_acc(op.src[i * op.inner + c]);
  }
  void finalize(int64_t k, int64_t c, acc_t total) const {
    auto& d = op.out[k * op.inner + c];
    d = op.finalized(d, total, k);
  }
};

// index_reduce_compute (ops/index_reduce_op.h) on the CPU engine, through IndexReduceRowOp where it applies: the
// same engine call.
void index_reduce_cpu(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                      Reduction reduce, bool include_self, IntDtype ints) {
  with_index_reduce_op<cpu::Engine>(result, dim, index, source, reduce, include_self, ints,
                                    [&](const auto& op, int64_t n, int64_t dim_size, int64_t columns) {
    using Op = std::decay_t<decltype(op)>;
    using acc_t = typename Op::acc_t;
    // One column (a 1-d self) keeps the plain op: through the row op, the one-column pass measured slower.
    if (op.inner == columns && columns > 1) {  // one outer slice, rows
      const IndexReduceRowOp<Op> rows{op};
      cpu::Engine::sort_reduce<acc_t>(kOp, rows, n, dim_size, columns, result);
    } else {
      cpu::Engine::sort_reduce<acc_t>(kOp, op, n, dim_size, columns, result);
    }
  });
}

}  // namespace

at::Tensor& index_reduce_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                          c10::string_view reduce, bool include_self) {
  dim = check_index_reduce(self, dim, index, source, reduce);
  const Reduction r = parse_reduction(reduce);
  const at::ScalarType t = self.scalar_type();
  const bool ints = int64_dtype(t);
  if (!engine_dtype(t) && !ints) {
    return self.is_cuda() ? at::cuda::index_reduce_(self, dim, index, source, reduce, include_self)
                          : at::cpu::index_reduce_(self, dim, index, source, reduce, include_self);
  }
  const int64_t size = self.dim() == 0 ? 1 : self.size(dim);
  check_index_values(kOp, "index", index, 0, size, "for dimension " + std::to_string(dim) + " with size " +
                                                        std::to_string(size));
  if (index.numel() == 0 || self.numel() == 0) return self;
  const at::Tensor index64 = (index.scalar_type() == at::kLong ? index : index.to(at::kLong)).contiguous();
  IntDtype int_dtype;
  at::Tensor work;
  at::Tensor src = source;
  if (ints && t != at::kLong) {
    // NB: int64 arithmetic truncated to the dtype equals the dtype's wrapping arithmetic for prod.
    work = self.to(at::kLong).contiguous();
    src = source.to(at::kLong);
    int_dtype = {static_cast<int>(self.element_size() * 8), t == at::kByte};
  } else {
    work = self.is_contiguous() ? self : self.contiguous();
  }
  if (work.is_cuda()) {
    cuda::index_reduce_kernel(work, dim, index64, src, r, include_self, int_dtype);
  } else {
    index_reduce_cpu(work, dim, index64, src, r, include_self, int_dtype);
  }
  if (!work.is_same(self)) self.copy_(work);
  return self;
}

at::Tensor index_reduce(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                        c10::string_view reduce, bool include_self) {
  return functional_from_inplace(
      self, [&](at::Tensor& result) { return index_reduce_(result, dim, index, source, reduce, include_self); });
}

at::Tensor& index_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                             c10::string_view reduce, bool include_self, at::Tensor& out) {
  return out_from_inplace(
      kOp, self, out, [&] { check_index_reduce(self, dim, index, source, reduce); },
      [&](at::Tensor& result) -> at::Tensor& { return index_reduce_(result, dim, index, source, reduce, include_self); });
}

}  // namespace detops
