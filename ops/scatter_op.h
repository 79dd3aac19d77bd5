// scatter_ without a reduction: the per-element code shared by the CPU and CUDA engines
// (docs/order_contract.md, "Last writer wins"). Contribution e is the e-th element of `index` in row-major
// order, its destination that of scatter_add_ (ScatterElements; ScatterRows for a broadcast index, whose
// contribution is a row and whose columns the engine's D); where several go to one element, the last in
// source order wins. The reduce overloads (add, multiply) run scatter_reduce's engine (ops/scatter_reduce_op.h).
#pragma once

#include "ops/contract.h"
#include "ops/scatter_reduce_op.h"

#include <cstdint>
#include <type_traits>

namespace detops {

// Key = the destination (element or row), contribution = the source position, folded with Last. NB: the
// winner is the largest source position (Engine::last_writer: a pass in source order, a winner table or the
// stable sort), never timing; the element is copied as bits.
template <typename bits_t, typename Layout>
struct ScatterLastOp {
  using acc_t = int64_t;
  using Combine = Last;
  using value_type = bits_t;
  bits_t* out;        // contiguous
  const bits_t* src;  // strided (a value overload: a 0-d tensor expanded, every stride 0)
  Layout layout;      // ScatterElements or ScatterRows (ops/scatter_add_op.h)

  C10_HOST_DEVICE int64_t key(int64_t i) const {
    return layout.key(i);
  }
  C10_HOST_DEVICE int64_t contribution(int64_t i, int64_t) const {
    return i;
  }
  // The element source position i copies in column c, and its store at key k (the last writer's copy).
  C10_HOST_DEVICE bits_t read(int64_t i, int64_t c) const {
    return src[layout.src_offset(i, c)];
  }
  C10_HOST_DEVICE void write(int64_t k, int64_t c, bits_t v) const {
    out[layout.out_offset(k, c)] = v;
  }
  C10_HOST_DEVICE void finalize(int64_t k, int64_t c, int64_t i) const {
    write(k, c, read(i, c));
  }
};

}  // namespace detops

#include "ops/common.h"

#include <ATen/core/Tensor.h>

namespace detops {

// f(op) with the last writer's op (result's elements as bits of their width) over one layout of
// with_scatter_layout; the CPU path reaches it with its own layouts too (ops/scatter_cpu.h).
template <typename Layout, typename F>
void with_scatter_last_op(at::Tensor& result, const at::Tensor& src, const Layout& layout, F&& f) {
  dispatch_element_bits("scatter_", result, [&](auto tag) {
    using bits_t = decltype(tag);
    ScatterLastOp<bits_t, Layout> op;
    op.out = static_cast<bits_t*>(result.data_ptr());
    op.src = static_cast<const bits_t*>(src.const_data_ptr());
    op.layout = layout;
    f(op);
  });
}

// result (contiguous, holding self) gets scatter_ of `src` (result's dtype, strided) on an engine
// (cpu::Engine or cuda::Engine); index is int64 and the arguments are checked by the front end.
template <typename Engine>
void scatter_compute(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  if (index.numel() == 0 || result.numel() == 0) return;
  with_scatter_layout<int64_t>("scatter_", result, dim, index, src,
                               [&](const auto& layout, int64_t n, int64_t num_keys, int64_t D) {
    with_scatter_last_op(result, src, layout, [&](const auto& op) {
      Engine::last_writer("scatter_", op, n, num_keys, D, result);
    });
  });
}

namespace cuda {
// scatter_compute on the CUDA engine (cuda/scatter.cu).
void scatter_kernel(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& src);
}  // namespace cuda

}  // namespace detops
