// index_copy (functional, in place, .out): checks, routing and the CPU path. The CUDA path is
// cuda/index_copy.cu; both run the sort-reduce engine over IndexCopyOp, which keeps the last source row in
// source order for each destination row (docs/order_contract.md). Every dtype runs it: the op only moves
// elements.
#include "ops/index_copy.h"

#include "ops/common.h"
#include "ops/index_copy_op.h"
#include "ops/sort_reduce_cpu.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <c10/util/ArrayRef.h>

#include <string>
#include <vector>

namespace detops {
namespace {

constexpr const char* kOp = "index_copy_";

// Stock's checks in stock's order (aten index_copy meta function), on `result`, the tensor written.
// Returns the wrapped dim.
int64_t check_index_copy(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                         const at::Tensor& result) {
  dim = at::maybe_wrap_dim(dim, self.dim());
  at::assert_no_internal_overlap(result);
  at::assert_no_overlap(result, index);
  at::assert_no_overlap(result, source);
  TORCH_CHECK_INDEX(index.dim() < 2, kOp, "(): Index should have dimension 1 or 0 (got ", index.dim(), ")");
  const int64_t num_indices = index.numel();
  if (source.dim() == 0 && num_indices != 1) {
    TORCH_CHECK_INDEX(false, kOp, "(): When source is scalar, index should have one element (got ", num_indices,
                      ")");
  } else if (source.dim() != self.dim() && source.dim() != 0 && self.dim() != 0) {
    TORCH_CHECK_INDEX(false, kOp,
                      "(): When source and destination are not scalars, their dimensionality must match. Source "
                      "dimensionality (", source.dim(), "), destination dimensionality (", self.dim(), ")");
  }
  TORCH_CHECK(index.scalar_type() == at::kLong, kOp, "(): Expected a long tensor for index, but got ",
              index.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(), kOp,
              "(): self and source expected to have the same dtype, but got (self) ", self.scalar_type(),
              " and (source) ", source.scalar_type());
  TORCH_CHECK(self.device() == source.device() && self.device() == index.device(), kOp,
              "(): self, index and source expected to be in the same device, but got (self) ", self.device(),
              ", (index) ", index.device(), ", and (source) ", source.device());
  std::vector<int64_t> self_sliced = self.sizes().vec();
  if (!self_sliced.empty()) self_sliced.erase(self_sliced.begin() + dim);
  std::vector<int64_t> source_sliced = source.sizes().vec();
  if (!source_sliced.empty()) source_sliced.erase(source_sliced.begin() + dim);
  TORCH_CHECK(self_sliced == source_sliced, kOp,
              "(): Source/destination tensor must have same slice shapes. Destination slice shape: ",
              c10::IntArrayRef(self_sliced), " at dimension ", dim, " and source slice shape: ",
              c10::IntArrayRef(source_sliced), " at dimension 0.");
  TORCH_CHECK_INDEX(source.dim() == 0 || num_indices == source.size(dim), kOp, "(): Number of indices (",
                    num_indices, ") should be equal to source.size(dim) (", source.size(dim), ")");
  return dim;
}

}  // namespace

at::Tensor& index_copy_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source) {
  dim = check_index_copy(self, dim, index, source, self);
  const int64_t size = self.dim() == 0 ? 1 : self.size(dim);
  check_index_values(kOp, "index", index, 0, size,
                     "for dimension " + std::to_string(dim) + " with size " + std::to_string(size));
  if (index.numel() == 0 || self.numel() == 0) return self;
  at::Tensor work = self.is_contiguous() ? self : self.contiguous();
  const at::Tensor src = source.contiguous();
  if (work.is_cuda()) {
    cuda::index_copy_kernel(work, dim, index, src);
  } else {
    index_copy_compute<cpu::Engine>(work, dim, index, src);
  }
  if (!work.is_same(self)) self.copy_(work);
  return self;
}

at::Tensor index_copy(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source) {
  return functional_from_inplace(self, [&](at::Tensor& result) { return index_copy_(result, dim, index, source); });
}

at::Tensor& index_copy_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                           at::Tensor& out) {
  return out_from_inplace(
      kOp, self, out, [&] { check_index_copy(self, dim, index, source, out); },
      [&](at::Tensor& result) -> at::Tensor& { return index_copy_(result, dim, index, source); });
}

}  // namespace detops
