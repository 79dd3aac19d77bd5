// scatter_reduce.two (functional, in place, .out): checks, routing and the CPU path. The CUDA path is
// cuda/scatter_reduce.cu; both run the sort-reduce engine over ScatterReduceOp (docs/order_contract.md,
// "Reductions"). Floating dtypes are computed in their accumulate type; integer dtypes (and bool, but for
// mean, which stock rejects) exactly in int64 and written back truncated, as stock's arithmetic wraps; other
// dtypes (complex) go to stock.
#include "ops/scatter_reduce.h"

#include "ops/common.h"
#include "ops/scatter_reduce_op.h"
#include "ops/sort_reduce_cpu.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/ops/scatter_reduce_cpu_dispatch.h>
#include <ATen/ops/scatter_reduce_cuda_dispatch.h>

#include <algorithm>
#include <string>

namespace detops {
namespace {

constexpr const char* kOp = "scatter_reduce_";

int64_t nonempty_dim(const at::Tensor& t) {
  return std::max<int64_t>(t.dim(), 1);
}
int64_t nonempty_size(const at::Tensor& t, int64_t d) {
  return t.dim() == 0 ? 1 : t.size(d);
}

// Stock's reduce names (aten get_reduction_enum: "max" and "min" are accepted as amax and amin).
Reduction parse_reduction(c10::string_view reduce) {
  if (reduce == "sum") return Reduction::Sum;
  if (reduce == "prod") return Reduction::Prod;
  if (reduce == "mean") return Reduction::Mean;
  if (reduce == "amax" || reduce == "max") return Reduction::Max;
  if (reduce == "amin" || reduce == "min") return Reduction::Min;
  TORCH_CHECK(false, kOp, "(): reduce argument must be either sum, prod, mean, amax or amin, got ", reduce);
}

// Stock's checks (aten scatter_meta_impl: scatter_gather_dtype_check, scatter_shape_check, overlaps, the
// reduce name), plus same-device checks. Returns the wrapped dim.
int64_t check_scatter_reduce(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                             c10::string_view reduce) {
  dim = at::maybe_wrap_dim(dim, self.dim());
  if (index.numel() != 0) {
    TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt, kOp,
                "(): Expected dtype int32/int64 for index, but got: ", index.scalar_type());
  }
  TORCH_CHECK(self.scalar_type() == src.scalar_type(), kOp, "(): Expected self.dtype to be equal to src.dtype, ",
              "but got self ", self.scalar_type(), " and src ", src.scalar_type());
  check_same_device(kOp, self, index, "index");
  check_same_device(kOp, self, src, "src");
  if (index.numel() != 0) {
    TORCH_CHECK(nonempty_dim(self) == nonempty_dim(index), kOp,
                "(): Index tensor must have the same number of dimensions as self tensor, but got index ",
                index.sizes(), " and self ", self.sizes());
    TORCH_CHECK(nonempty_dim(src) == nonempty_dim(index), kOp,
                "(): Index tensor must have the same number of dimensions as src tensor, but got index ",
                index.sizes(), " and src ", src.sizes());
    for (int64_t d = 0; d < nonempty_dim(self); ++d) {
      const int64_t i = nonempty_size(index, d);
      TORCH_CHECK(i <= nonempty_size(src, d) && (d == dim || i <= nonempty_size(self, d)), kOp,
                  "(): Expected index ", index.sizes(), " to be no larger than self ", self.sizes(),
                  " apart from dimension ", dim, " and to be no larger size than src ", src.sizes(),
                  ", but dimension ", d, " is not");
    }
  }
  at::assert_no_internal_overlap(self);
  at::assert_no_overlap(self, index);
  at::assert_no_overlap(self, src);
  parse_reduction(reduce);
  return dim;
}

// Integer dtypes computed exactly in int64 (bool: 0/1, written back as nonzero).
bool int64_dtype(at::ScalarType t) {
  return t == at::kByte || t == at::kChar || t == at::kShort || t == at::kInt || t == at::kLong || t == at::kBool;
}

}  // namespace

at::Tensor& scatter_reduce_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                            c10::string_view reduce, bool include_self) {
  dim = check_scatter_reduce(self, dim, index, src, reduce);
  const Reduction r = parse_reduction(reduce);
  if (index.numel() == 0) return self;
  const at::ScalarType t = self.scalar_type();
  const bool ints = int64_dtype(t) && !(t == at::kBool && r == Reduction::Mean);
  if (!engine_dtype(t) && !ints) {
    return self.is_cuda() ? at::cuda::scatter_reduce_(self, dim, index, src, reduce, include_self)
                          : at::cpu::scatter_reduce_(self, dim, index, src, reduce, include_self);
  }
  const int64_t size = nonempty_size(self, dim);
  check_index_values(kOp, "index", index, 0, size, "for dimension " + std::to_string(dim) + " with size " +
                                                        std::to_string(size));
  if (self.numel() == 0) return self;
  const at::Tensor index64 = index.scalar_type() == at::kLong ? index : index.to(at::kLong);
  IntDtype int_dtype;
  at::Tensor work;
  at::Tensor source = src;
  if (ints && t != at::kLong) {
    // NB: int64 arithmetic truncated to the dtype equals the dtype's wrapping arithmetic for sum and prod.
    work = self.to(at::kLong).contiguous();
    source = src.to(at::kLong);
    int_dtype = {static_cast<int>(self.element_size() * 8), t == at::kByte};
  } else {
    work = self.is_contiguous() ? self : self.contiguous();
  }
  if (work.is_cuda()) {
    cuda::scatter_reduce_kernel(work, dim, index64, source, r, include_self, int_dtype);
  } else {
    scatter_reduce_compute<cpu::Engine>(work, dim, index64, source, r, include_self, int_dtype);
  }
  if (!work.is_same(self)) self.copy_(work);
  return self;
}

at::Tensor scatter_reduce(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                          c10::string_view reduce, bool include_self) {
  return functional_from_inplace(
      self, [&](at::Tensor& result) { return scatter_reduce_(result, dim, index, src, reduce, include_self); });
}

at::Tensor& scatter_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                               c10::string_view reduce, bool include_self, at::Tensor& out) {
  return out_from_inplace(
      kOp, self, out, [&] { check_scatter_reduce(self, dim, index, src, reduce); },
      [&](at::Tensor& result) -> at::Tensor& { return scatter_reduce_(result, dim, index, src, reduce, include_self); });
}

}  // namespace detops
