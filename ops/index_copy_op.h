// index_copy_: the per-element code shared by the CPU and CUDA engines (docs/order_contract.md). self viewed
// as [outer, dim_size, inner], source as [outer, n, inner]; source row i goes to row index[i], and where
// several rows go to one, the last in source order wins.
#pragma once

#include "ops/contract.h"

#include <cstdint>

namespace detops {

// Key = the destination row, contribution = the source row's position, folded with Last: each destination
// element gets the element of the last source row that names it. NB: the winner is the largest source
// position (Engine::last_writer: a pass in source order, a winner table or the stable sort), never timing;
// the element is copied as bits.
template <typename bits_t>
struct IndexCopyOp {
  using acc_t = int64_t;
  using Combine = Last;
  using value_type = bits_t;
  bits_t* out;          // contiguous
  const bits_t* src;    // contiguous
  const int64_t* index;  // strided
  int64_t index_stride;
  int64_t dim_size;
  int64_t n;
  int64_t inner;

  // Destination row of source row i, or -1 if out of range.
  C10_HOST_DEVICE int64_t key(int64_t i) const {
    const int64_t k = index[i * index_stride];
    return (k >= 0 && k < dim_size) ? k : -1;
  }
  C10_HOST_DEVICE int64_t contribution(int64_t i, int64_t) const {
    return i;
  }
  // Column c = o * inner + j of the [outer, inner] plane: source row `row`'s element, and its store in row k
  // (the last writer's copy).
  C10_HOST_DEVICE bits_t read(int64_t row, int64_t c) const {
    const int64_t o = c < inner ? 0 : c / inner;  // no division for the first (often only) outer slice
    return src[(o * n + row) * inner + (c - o * inner)];
  }
  C10_HOST_DEVICE void write(int64_t k, int64_t c, bits_t v) const {
    const int64_t o = c < inner ? 0 : c / inner;
    out[(o * dim_size + k) * inner + (c - o * inner)] = v;
  }
  C10_HOST_DEVICE void finalize(int64_t k, int64_t c, int64_t row) const {
    write(k, c, read(row, c));
  }
};

}  // namespace detops

#include "ops/common.h"

#include <ATen/core/Tensor.h>

namespace detops {

// Builds the op over `result` (contiguous, holding self) and a contiguous `source`; `dim` is wrapped.
template <typename bits_t>
IndexCopyOp<bits_t> make_index_copy_op(at::Tensor& result, int64_t dim, const at::Tensor& index,
                                       const at::Tensor& source) {
  IndexCopyOp<bits_t> op;
  op.out = static_cast<bits_t*>(result.data_ptr());
  op.src = static_cast<const bits_t*>(source.const_data_ptr());
  op.index = index.const_data_ptr<int64_t>();
  op.index_stride = index.dim() == 0 ? 0 : index.stride(0);
  op.dim_size = result.dim() == 0 ? 1 : result.size(dim);
  op.n = index.numel();
  op.inner = 1;
  for (int64_t d = dim + 1; d < result.dim(); ++d) op.inner *= result.size(d);
  return op;
}

// result (contiguous, holding self) gets index_copy_ of `source` (contiguous) on an engine (cpu::Engine or
// cuda::Engine); the front end has checked the arguments.
template <typename Engine>
void index_copy_compute(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& source) {
  const int64_t dim_size = result.dim() == 0 ? 1 : result.size(dim);
  const int64_t columns = dim_size == 0 ? 0 : result.numel() / dim_size;
  if (index.numel() == 0 || columns == 0) return;
  dispatch_element_bits("index_copy_", result, [&](auto tag) {
    using bits_t = decltype(tag);
    const auto op = make_index_copy_op<bits_t>(result, dim, index, source);
    Engine::last_writer("index_copy_", op, op.n, op.dim_size, columns, result);
  });
}

namespace cuda {
// index_copy_compute on the CUDA engine (cuda/index_copy.cu).
void index_copy_kernel(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& source);
}  // namespace cuda

}  // namespace detops
