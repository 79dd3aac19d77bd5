// scatter_add (functional, in place, .out): checks, routing and the CPU path. The CUDA path is
// cuda/scatter_add.cu; both run the sort-reduce engine over ScatterAddOp (docs/order_contract.md).
#include "ops/scatter_add.h"

#include "ops/common.h"
#include "ops/scatter_add_op.h"
#include "ops/scatter_cpu.h"
#include "ops/sort_reduce_cpu.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/ops/scatter_add_cpu_dispatch.h>
#include <ATen/ops/scatter_add_cuda_dispatch.h>

#include <algorithm>
#include <string>
#include <type_traits>

namespace detops {
namespace {

constexpr const char* kOp = "scatter_add_";

int64_t nonempty_dim(const at::Tensor& t) {
  return std::max<int64_t>(t.dim(), 1);
}
int64_t nonempty_size(const at::Tensor& t, int64_t d) {
  return t.dim() == 0 ? 1 : t.size(d);
}

// scatter_add_compute (ops/scatter_add_op.h) on the CPU engine, with ScatterLine where it applies.
void scatter_add_cpu(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  if (index.numel() == 0 || result.numel() == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, result.scalar_type(), "detops_scatter_add", [&] {
    AT_DISPATCH_INDEX_TYPES(index.scalar_type(), "detops_scatter_add_index", [&] {
      cpu::with_scatter_layout_cpu<index_t>(kOp, result, dim, index, src,
                                            [&](const auto& layout, int64_t n, int64_t num_keys, int64_t D) {
        ScatterAddOp<scalar_t, std::decay_t<decltype(layout)>> op;
        op.out = result.data_ptr<scalar_t>();
        op.src = src.const_data_ptr<scalar_t>();
        op.layout = layout;
        cpu::Engine::sort_reduce<acc_type<scalar_t>>(kOp, op, n, num_keys, D, result);
      });
    });
  });
}

}  // namespace

int64_t check_scatter_args(const char* op, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                           const at::Tensor* src) {
  dim = at::maybe_wrap_dim(dim, self.dim());
  if (index.numel() != 0) {
    TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt, op,
                "(): Expected dtype int32/int64 for index, but got: ", index.scalar_type());
  }
  if (src != nullptr) {
    TORCH_CHECK(self.scalar_type() == src->scalar_type(), op, "(): Expected self.dtype to be equal to src.dtype, ",
                "but got self ", self.scalar_type(), " and src ", src->scalar_type());
  }
  check_same_device(op, self, index, "index");
  if (src != nullptr) check_same_device(op, self, *src, "src");
  if (index.numel() != 0) {
    TORCH_CHECK(nonempty_dim(self) == nonempty_dim(index), op,
                "(): Index tensor must have the same number of dimensions as self tensor, but got index ",
                index.sizes(), " and self ", self.sizes());
    if (src != nullptr) {
      TORCH_CHECK(nonempty_dim(*src) == nonempty_dim(index), op,
                  "(): Index tensor must have the same number of dimensions as src tensor, but got index ",
                  index.sizes(), " and src ", src->sizes());
    }
    for (int64_t d = 0; d < nonempty_dim(self); ++d) {
      const int64_t i = nonempty_size(index, d);
      if (src == nullptr) {
        TORCH_CHECK(d == dim || i <= nonempty_size(self, d), op, "(): Expected index ", index.sizes(),
                    " to be no larger than self ", self.sizes(), " apart from dimension ", dim,
                    ", but dimension ", d, " is not");
      } else {
        TORCH_CHECK(i <= nonempty_size(*src, d) && (d == dim || i <= nonempty_size(self, d)), op,
                    "(): Expected index ", index.sizes(), " to be no larger than self ", self.sizes(),
                    " apart from dimension ", dim, " and to be no larger size than src ", src->sizes(),
                    ", but dimension ", d, " is not");
      }
    }
  }
  at::assert_no_internal_overlap(self);
  at::assert_no_overlap(self, index);
  if (src != nullptr) at::assert_no_overlap(self, *src);
  return dim;
}

void check_scatter_index_values(const char* op, const at::Tensor& index, int64_t dim, int64_t size) {
  const std::string where = "for dimension " + std::to_string(dim) + " with size " + std::to_string(size);
  const at::Tensor compact = scatter_index_compact(index);
  if (compact.numel() < index.numel()) {
    try {
      check_index_values(op, "index", compact, 0, size, where);
      return;
    } catch (const c10::Error&) {
      // A bad value: the whole index names its first position.
    }
  }
  check_index_values(op, "index", index, 0, size, where);
}

at::Tensor& scatter_add_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  dim = check_scatter_args(kOp, self, dim, index, &src);
  if (index.numel() == 0) return self;
  if (!engine_dtype(self.scalar_type())) {
    return self.is_cuda() ? at::cuda::scatter_add_(self, dim, index, src) : at::cpu::scatter_add_(self, dim, index, src);
  }
  const int64_t size = nonempty_size(self, dim);
  check_scatter_index_values(kOp, index, dim, size);
  at::Tensor work = self.is_contiguous() ? self : self.contiguous();
  if (work.is_cuda()) {
    cuda::scatter_add_kernel(work, dim, index, src);
  } else {
    scatter_add_cpu(work, dim, index, src);
  }
  if (!work.is_same(self)) self.copy_(work);
  return self;
}

at::Tensor scatter_add(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  return functional_from_inplace(self, [&](at::Tensor& result) { return scatter_add_(result, dim, index, src); });
}

at::Tensor& scatter_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                            at::Tensor& out) {
  return out_from_inplace(
      kOp, self, out, [&] { check_scatter_args(kOp, self, dim, index, &src); },
      [&](at::Tensor& result) -> at::Tensor& { return scatter_add_(result, dim, index, src); });
}

}  // namespace detops
