// scatter_reduce.two (functional, in place, .out): checks, routing and the CPU path. The CUDA path is
// cuda/scatter_reduce.cu; both run the sort-reduce engine over ScatterReduceOp (docs/order_contract.md,
// "Reductions"). Floating dtypes are computed in their accumulate type; integer dtypes (and bool, but for
// mean, which stock rejects) exactly in int64 and written back truncated, as stock's arithmetic wraps; other
// dtypes (complex) go to stock.
#include "ops/scatter_reduce.h"

#include "ops/common.h"
#include "ops/scatter_add.h"
#include "ops/scatter_cpu.h"
#include "ops/scatter_reduce_op.h"
#include "ops/sort_reduce_cpu.h"

#include <ATen/ops/scatter_reduce_cpu_dispatch.h>
#include <ATen/ops/scatter_reduce_cuda_dispatch.h>

#include <string>
#include <type_traits>

namespace detops {
namespace {

constexpr const char* kOp = "scatter_reduce_";

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

// Stock's checks (aten scatter_meta_impl: the shared scatter checks, then the reduce name). Returns the
// wrapped dim.
int64_t check_scatter_reduce(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                             c10::string_view reduce) {
  dim = check_scatter_args(kOp, self, dim, index, &src);
  parse_reduction(reduce);
  return dim;
}

// Integer dtypes computed exactly in int64 (bool: 0/1, written back as nonzero).
bool int64_dtype(at::ScalarType t) {
  return t == at::kByte || t == at::kChar || t == at::kShort || t == at::kInt || t == at::kLong || t == at::kBool;
}

// scatter_reduce_compute (ops/scatter_reduce_op.h) on the CPU engine, with ScatterLine where it applies: the
// same engine calls (the count pass of mean, then the reduction) over the same contributions.
void scatter_reduce_cpu(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                        Reduction reduce, bool include_self, IntDtype ints) {
  if (index.numel() == 0 || result.numel() == 0) return;
  cpu::with_scatter_layout_cpu<int64_t>(kOp, result, dim, index, src,
                                        [&](const auto& layout, int64_t n, int64_t num_keys, int64_t D) {
    scatter_reduce_on_layout<cpu::Engine>(layout, n, num_keys, D, result, src, reduce, include_self, ints);
  });
}

}  // namespace

bool scatter_reduce_engine_dtype(at::ScalarType t, Reduction r) {
  return engine_dtype(t) || (int64_dtype(t) && !(t == at::kBool && r == Reduction::Mean));
}

at::Tensor& scatter_reduce_on_engine(const char* op, at::Tensor& self, int64_t dim, const at::Tensor& index,
                                     const at::Tensor& src, Reduction r, bool include_self) {
  if (index.numel() == 0) return self;
  const at::ScalarType t = self.scalar_type();
  const int64_t size = nonempty_size(self, dim);
  check_scatter_index_values(op, index, dim, size);
  if (self.numel() == 0) return self;
  const at::Tensor index64 = scatter_index_int64(index);
  IntDtype int_dtype;
  at::Tensor work;
  at::Tensor source = src;
  if (!engine_dtype(t) && t != at::kLong) {
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
    scatter_reduce_cpu(work, dim, index64, source, r, include_self, int_dtype);
  }
  if (!work.is_same(self)) self.copy_(work);
  return self;
}

at::Tensor& scatter_reduce_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                            c10::string_view reduce, bool include_self) {
  dim = check_scatter_reduce(self, dim, index, src, reduce);
  const Reduction r = parse_reduction(reduce);
  if (index.numel() == 0) return self;
  if (!scatter_reduce_engine_dtype(self.scalar_type(), r)) {
    return self.is_cuda() ? at::cuda::scatter_reduce_(self, dim, index, src, reduce, include_self)
                          : at::cpu::scatter_reduce_(self, dim, index, src, reduce, include_self);
  }
  return scatter_reduce_on_engine(kOp, self, dim, index, src, r, include_self);
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
