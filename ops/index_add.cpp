// index_add (functional, in place, .out): checks, routing and the CPU path. The CUDA path is
// cuda/index_add.cu; both run the sort-reduce engine over IndexAddOp (docs/order_contract.md).
#include "ops/index_add.h"

#include "ops/common.h"
#include "ops/index_add_op.h"
#include "ops/sort_reduce_cpu.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/ops/index_add_cpu_dispatch.h>
#include <ATen/ops/index_add_cuda_dispatch.h>

namespace detops {
namespace {

constexpr const char* kOp = "index_add_";

// Stock's checks (aten index_func_meta_impl), plus same-device checks. Returns the wrapped dim.
int64_t check_index_add(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source) {
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

// IndexAddOp over a self with no outer slice (every dimension before `dim` of size 1), so that column c is
// element c of a row: the same keys and arithmetic (IndexAddOp::term, add_into) with no per-column index
// arithmetic, so the CPU engine's loops over a row's columns vectorise.
template <typename scalar_t, typename index_t>
struct IndexAddRowOp {
  using Op = IndexAddOp<scalar_t, index_t>;
  using acc_t = typename Op::acc_t;
  Op op;

  int64_t key(int64_t i) const {
    return op.key(i);
  }
  acc_t contribution(int64_t i, int64_t c) const {
    return Op::term(op.src[i * op.inner + c], op.alpha);
  }
  void finalize(int64_t k, int64_t c, acc_t total) const {
    Op::add_into(op.out[k * op.inner + c], total);
  }
};

// index_add_compute (ops/index_add_op.h) on the CPU engine, through IndexAddRowOp where it applies: the same
// engine call.
void index_add_cpu(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                   const at::Scalar& alpha) {
  const int64_t columns = index_add_columns(result, dim);
  if (index.numel() == 0 || columns == 0) return;
  const at::Tensor src = source.contiguous();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, result.scalar_type(), "detops_index_add", [&] {
    AT_DISPATCH_INDEX_TYPES(index.scalar_type(), "detops_index_add_index", [&] {
      const auto op = make_index_add_op<scalar_t, index_t>(result, dim, index, src, alpha);
      using acc_t = acc_type<scalar_t>;
      if (op.inner == columns) {  // one outer slice
        const IndexAddRowOp<scalar_t, index_t> rows{op};
        cpu::Engine::sort_reduce<acc_t>(kOp, rows, op.n, op.dim_size, columns, result);
      } else {
        cpu::Engine::sort_reduce<acc_t>(kOp, op, op.n, op.dim_size, columns, result);
      }
    });
  });
}

}  // namespace

at::Tensor& index_add_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                       const at::Scalar& alpha) {
  dim = check_index_add(self, dim, index, source);
  if (!engine_dtype(self.scalar_type())) {
    return self.is_cuda() ? at::cuda::index_add_(self, dim, index, source, alpha)
                          : at::cpu::index_add_(self, dim, index, source, alpha);
  }
  const int64_t size = self.dim() == 0 ? 1 : self.size(dim);
  check_index_values(kOp, "index", index, 0, size, "for dimension " + std::to_string(dim) + " with size " +
                                                        std::to_string(size));
  if (index.numel() == 0 || self.numel() == 0) return self;
  at::Tensor work = self.is_contiguous() ? self : self.contiguous();
  if (work.is_cuda()) {
    cuda::index_add_kernel(work, dim, index, source, alpha);
  } else {
    index_add_cpu(work, dim, index, source, alpha);
  }
  if (!work.is_same(self)) self.copy_(work);
  return self;
}

at::Tensor index_add(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                     const at::Scalar& alpha) {
  return functional_from_inplace(self, [&](at::Tensor& result) { return index_add_(result, dim, index, source, alpha); });
}

at::Tensor& index_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                          const at::Scalar& alpha, at::Tensor& out) {
  return out_from_inplace(
      kOp, self, out, [&] { check_index_add(self, dim, index, source); },
      [&](at::Tensor& result) -> at::Tensor& { return index_add_(result, dim, index, source, alpha); });
}

}  // namespace detops
