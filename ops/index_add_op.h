// index_add_: the per-element arithmetic shared by the CPU and CUDA engines (docs/order_contract.md).
// self viewed as [outer, dim_size, inner], source as [outer, n, inner]; source row i goes to row index[i].
#pragma once

#include "ops/contract.h"

namespace detops {

template <typename scalar_t, typename index_t>
struct IndexAddOp {
  using acc_t = acc_type<scalar_t>;
  scalar_t* out;          // contiguous
  const scalar_t* src;    // contiguous
  const index_t* index;   // strided
  int64_t index_stride;
  int64_t dim_size;
  int64_t n;
  int64_t inner;
  acc_t alpha;

  // Destination row of source row i, or -1 if out of range.
  C10_HOST_DEVICE int64_t key(int64_t i) const {
    const int64_t k = static_cast<int64_t>(index[i * index_stride]);
    return (k >= 0 && k < dim_size) ? k : -1;
  }
  // Column c = o * inner + j of the [outer, inner] plane.
  C10_HOST_DEVICE acc_t contribution(int64_t i, int64_t c) const {
    const int64_t o = c < inner ? 0 : c / inner;  // no division for the first (often only) outer slice
    const int64_t j = c - o * inner;
    return term(src[(o * n + i) * inner + j], alpha);
  }
  C10_HOST_DEVICE void finalize(int64_t k, int64_t c, acc_t total) const {
    const int64_t o = c < inner ? 0 : c / inner;  // no division for the first (often only) outer slice
    const int64_t j = c - o * inner;
    add_into(out[(o * dim_size + k) * inner + j], total);
  }

  // The arithmetic of one element: its contribution, and a destination taking its total (the CPU engine's
  // row path, IndexAddRowOp in ops/index_add.cpp, calls them too).
  static C10_HOST_DEVICE acc_t term(scalar_t s, acc_t alpha) {
    return mul_rn(to_acc(s), alpha);
  }
  static C10_HOST_DEVICE void add_into(scalar_t& d, acc_t total) {
    d = round_to<scalar_t>(add_rn(to_acc(d), total));
  }
};

}  // namespace detops

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>

namespace detops {

// Builds the op over `result` (contiguous, holding self) and a contiguous `source`; `dim` is wrapped.
template <typename scalar_t, typename index_t>
IndexAddOp<scalar_t, index_t> make_index_add_op(at::Tensor& result, int64_t dim, const at::Tensor& index,
                                                const at::Tensor& source, const at::Scalar& alpha) {
  IndexAddOp<scalar_t, index_t> op;
  op.out = result.data_ptr<scalar_t>();
  op.src = source.const_data_ptr<scalar_t>();
  op.index = index.const_data_ptr<index_t>();
  op.index_stride = index.dim() == 0 ? 0 : index.stride(0);
  op.dim_size = result.dim() == 0 ? 1 : result.size(dim);
  op.n = index.numel();
  op.inner = 1;
  for (int64_t d = dim + 1; d < result.dim(); ++d) op.inner *= result.size(d);
  // Stock rounds alpha to the tensor's dtype first; so do we, then widen.
  op.alpha = to_acc(alpha.to<scalar_t>());
  return op;
}

// Columns of the [outer, inner] plane that every source row spreads over.
inline int64_t index_add_columns(const at::Tensor& result, int64_t dim) {
  const int64_t dim_size = result.dim() == 0 ? 1 : result.size(dim);
  return dim_size == 0 ? 0 : result.numel() / dim_size;
}

// result (contiguous, holding self) gets the index_add of `source` on an engine (cpu::Engine or
// cuda::Engine); the front end has checked the arguments.
template <typename Engine>
void index_add_compute(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                       const at::Scalar& alpha) {
  const int64_t columns = index_add_columns(result, dim);
  if (index.numel() == 0 || columns == 0) return;
  const at::Tensor src = source.contiguous();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, result.scalar_type(), "detops_index_add", [&] {
    AT_DISPATCH_INDEX_TYPES(index.scalar_type(), "detops_index_add_index", [&] {
      const auto op = make_index_add_op<scalar_t, index_t>(result, dim, index, src, alpha);
      Engine::template sort_reduce<acc_type<scalar_t>>("index_add_", op, op.n, op.dim_size, columns, result);
    });
  });
}

namespace cuda {
// index_add_compute on the CUDA engine (cuda/index_add.cu).
void index_add_kernel(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                      const at::Scalar& alpha);
}  // namespace cuda

}  // namespace detops
