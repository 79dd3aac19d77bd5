// index_reduce_: the per-element arithmetic shared by the CPU and CUDA engines (docs/order_contract.md,
// "Reductions"). self viewed as [outer, dim_size, inner], source as [outer, n, inner]; source row i goes to row
// index[i], folded with the reduction's combine by the contract's tree, then self enters once (ReduceFinish in
// ops/scatter_reduce_op.h, shared with scatter_reduce_).
#pragma once

#include "ops/contract.h"
#include "ops/scatter_reduce_op.h"

namespace detops {

// The destination rows of index_reduce_'s source rows.
struct IndexKeys {
  const int64_t* index;  // contiguous
  int64_t dim_size;

  // Destination row of source row i, or -1 if out of range.
  C10_HOST_DEVICE int64_t key(int64_t i) const {
    const int64_t k = index[i];
    return (k >= 0 && k < dim_size) ? k : -1;
  }
};

template <typename scalar_t, Reduction R>
struct IndexReduceOp {
  using acc_t = acc_type<scalar_t>;
  using Combine = reduce_combine_t<acc_t, R>;
  scalar_t* out;          // contiguous
  const scalar_t* src;    // contiguous
  IndexKeys keys;
  int64_t n;
  int64_t inner;
  const int64_t* counts;  // reduce='mean' only: contributions per destination row
  ReduceFinish<scalar_t, R> finish;

  C10_HOST_DEVICE int64_t key(int64_t i) const {
    return keys.key(i);
  }
  // Column c = o * inner + j of the [outer, inner] plane.
  C10_HOST_DEVICE acc_t contribution(int64_t i, int64_t c) const {
    const int64_t o = c < inner ? 0 : c / inner;  // no division for the first (often only) outer slice
    const int64_t j = c - o * inner;
    return to_acc(src[(o * n + i) * inner + j]);
  }
  C10_HOST_DEVICE void finalize(int64_t k, int64_t c, acc_t total) const {
    const int64_t o = c < inner ? 0 : c / inner;  // no division for the first (often only) outer slice
    const int64_t j = c - o * inner;
    scalar_t& d = out[(o * keys.dim_size + k) * inner + j];
    d = finalized(d, total, k);
  }
  // Destination row k's element holding `old`, given its total (the CPU engine's row path, IndexReduceRowOp in
  // ops/index_reduce.cpp, calls it too).
  C10_HOST_DEVICE scalar_t finalized(scalar_t old, acc_t total, int64_t k) const {
    return finish(old, total, counts == nullptr ? 0 : counts[k]);
  }
};

}  // namespace detops

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>

#include <type_traits>

namespace detops {

// Calls f(op, n, dim_size, columns) with the IndexReduceOp of result's dtype and `reduce` over result
// (contiguous, holding self; a floating dtype, or int64 holding an integer tensor of dtype `ints`) and `source`
// (result's dtype); index is int64 and contiguous, `dim` wrapped, the arguments checked by the front end. The
// mean's counts come from Engine (cpu::Engine or cuda::Engine).
template <typename Engine, typename F>
void with_index_reduce_op(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                          Reduction reduce, bool include_self, IntDtype ints, F&& f) {
  const int64_t n = index.numel();
  const int64_t dim_size = result.dim() == 0 ? 1 : result.size(dim);
  const int64_t columns = dim_size == 0 ? 0 : result.numel() / dim_size;
  if (n == 0 || columns == 0) return;
  const at::Tensor src = source.contiguous();
  const IndexKeys keys{index.const_data_ptr<int64_t>(), dim_size};
  at::Tensor counts;
  if (reduce == Reduction::Mean) {
    counts = at::zeros({dim_size}, result.options().dtype(at::kLong));
    Engine::count_keys(keys, n, dim_size, counts.data_ptr<int64_t>());
  }
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < result.dim(); ++d) inner *= result.size(d);
  AT_DISPATCH_FLOATING_TYPES_AND3(at::kHalf, at::kBFloat16, at::kLong, result.scalar_type(), "detops_index_reduce",
                                  [&] {
    dispatch_reduction(reduce, [&](auto r) {
      if constexpr (decltype(r)::value != Reduction::Sum) {
        IndexReduceOp<scalar_t, decltype(r)::value> op;
        op.out = result.data_ptr<scalar_t>();
        op.src = src.const_data_ptr<scalar_t>();
        op.keys = keys;
        op.n = n;
        op.inner = inner;
        op.counts = counts.defined() ? counts.const_data_ptr<int64_t>() : nullptr;
        op.finish = {include_self, ints.bits, ints.is_unsigned};
        f(op, n, dim_size, columns);
      }
    });
  });
}

// result gets the index_reduce of `source` on an engine (cpu::Engine or cuda::Engine); the arguments as for
// with_index_reduce_op.
template <typename Engine>
void index_reduce_compute(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                          Reduction reduce, bool include_self, IntDtype ints) {
  with_index_reduce_op<Engine>(result, dim, index, source, reduce, include_self, ints,
                               [&](const auto& op, int64_t n, int64_t dim_size, int64_t columns) {
    using acc_t = typename std::decay_t<decltype(op)>::acc_t;
    Engine::template sort_reduce<acc_t>("index_reduce_", op, n, dim_size, columns, result);
  });
}

namespace cuda {
// index_reduce_compute on the CUDA engine (cuda/index_reduce.cu).
void index_reduce_kernel(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                         Reduction reduce, bool include_self, IntDtype ints);
}  // namespace cuda

}  // namespace detops
