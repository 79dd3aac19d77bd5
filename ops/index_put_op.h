// _index_put_impl_: the per-element code shared by the CPU and CUDA engines (docs/order_contract.md,
// docs/index_put.md). The front end reduces any indexing to rows: self (contiguous) is viewed as
// [num_rows, inner], where inner is the product of the sizes after the last indexed dimension; `rows` holds
// the destination row of each row of `values` (expanded to the indexing result, contiguous, viewed as
// [n, inner]), in the result's row-major order, which is the source order. D = inner columns.
#pragma once

#include "ops/contract.h"

#include <cstdint>

namespace detops {

// The destination row of contribution i: rows[i] is in [0, num_rows] (num_rows marks an index out of
// range, which the engine rejects).
struct IndexPutRows {
  const int64_t* rows;
  int64_t num_rows;

  C10_HOST_DEVICE int64_t key(int64_t i) const {
    const int64_t k = rows[i];
    return (k >= 0 && k < num_rows) ? k : -1;
  }
};

// accumulate=True, floating dtypes: self[k, c] = round(acc(self[k, c]) + the contract's sum of acc(values)).
template <typename scalar_t>
struct IndexPutAddOp {
  using acc_t = acc_type<scalar_t>;
  scalar_t* out;
  const scalar_t* src;
  IndexPutRows rows;
  int64_t inner;

  C10_HOST_DEVICE int64_t key(int64_t i) const {
    return rows.key(i);
  }
  C10_HOST_DEVICE acc_t contribution(int64_t i, int64_t c) const {
    return to_acc(src[i * inner + c]);
  }
  C10_HOST_DEVICE void finalize(int64_t k, int64_t c, acc_t total) const {
    out[k * inner + c] = round_to<scalar_t>(add_rn(to_acc(out[k * inner + c]), total));
  }
};

// accumulate=True, integer dtypes: the wrapped sum in 64 bits, truncated to the dtype (exact, as stock).
template <typename scalar_t>
struct IndexPutIntAddOp {
  using acc_t = int64_t;
  using Combine = WrapAdd;
  scalar_t* out;
  const scalar_t* src;
  IndexPutRows rows;
  int64_t inner;

  C10_HOST_DEVICE int64_t key(int64_t i) const {
    return rows.key(i);
  }
  C10_HOST_DEVICE int64_t contribution(int64_t i, int64_t c) const {
    return static_cast<int64_t>(src[i * inner + c]);
  }
  C10_HOST_DEVICE void finalize(int64_t k, int64_t c, int64_t total) const {
    out[k * inner + c] = static_cast<scalar_t>(WrapAdd()(static_cast<int64_t>(out[k * inner + c]), total));
  }
};

// accumulate=False: the last contribution in source order wins. NB: the winner is the largest source position
// (Engine::last_writer: a pass in source order, a winner table or the stable sort), never timing; the element
// is copied as bits.
template <typename bits_t>
struct IndexPutLastOp {
  using acc_t = int64_t;
  using Combine = Last;
  using value_type = bits_t;
  bits_t* out;
  const bits_t* src;
  IndexPutRows rows;
  int64_t inner;

  C10_HOST_DEVICE int64_t key(int64_t i) const {
    return rows.key(i);
  }
  C10_HOST_DEVICE int64_t contribution(int64_t i, int64_t) const {
    return i;
  }
  // Position pos's element in column c, and its store in row k (the last writer's copy).
  C10_HOST_DEVICE bits_t read(int64_t pos, int64_t c) const {
    return src[pos * inner + c];
  }
  C10_HOST_DEVICE void write(int64_t k, int64_t c, bits_t v) const {
    out[k * inner + c] = v;
  }
  C10_HOST_DEVICE void finalize(int64_t k, int64_t c, int64_t pos) const {
    write(k, c, read(pos, c));
  }
};

}  // namespace detops

#include "ops/common.h"

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>

namespace detops {

template <typename Op, typename T>
Op make_index_put_op(at::Tensor& result, const at::Tensor& rows, const at::Tensor& values, int64_t inner) {
  Op op;
  op.out = static_cast<T*>(result.data_ptr());
  op.src = static_cast<const T*>(values.const_data_ptr());
  op.rows = {rows.const_data_ptr<int64_t>(), result.numel() / inner};
  op.inner = inner;
  return op;
}

// result (contiguous, holding self, inner > 0 dividing its numel) gets values (contiguous, [n * inner]) put
// at the rows `rows` (contiguous int64, [n]) on an engine (cpu::Engine or cuda::Engine); the front end has
// checked the arguments.
template <typename Engine>
void index_put_compute(at::Tensor& result, const at::Tensor& rows, const at::Tensor& values, int64_t inner,
                       bool accumulate) {
  const int64_t n = rows.numel();
  if (n == 0 || result.numel() == 0) return;
  const int64_t num_rows = result.numel() / inner;
  if (!accumulate) {
    dispatch_element_bits("_index_put_impl_", result, [&](auto tag) {
      using bits_t = decltype(tag);
      const auto op = make_index_put_op<IndexPutLastOp<bits_t>, bits_t>(result, rows, values, inner);
      Engine::last_writer("_index_put_impl_", op, n, num_rows, inner, result);
    });
  } else if (engine_dtype(result.scalar_type())) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, result.scalar_type(), "detops_index_put_add", [&] {
      const auto op = make_index_put_op<IndexPutAddOp<scalar_t>, scalar_t>(result, rows, values, inner);
      Engine::template sort_reduce<acc_type<scalar_t>>("_index_put_impl_", op, n, num_rows, inner, result);
    });
  } else {
    AT_DISPATCH_INTEGRAL_TYPES(result.scalar_type(), "detops_index_put_int_add", [&] {
      const auto op = make_index_put_op<IndexPutIntAddOp<scalar_t>, scalar_t>(result, rows, values, inner);
      Engine::template sort_reduce<int64_t>("_index_put_impl_", op, n, num_rows, inner, result);
    });
  }
}

namespace cuda {
// index_put_compute on the CUDA engine (cuda/index_put.cu).
void index_put_kernel(at::Tensor& result, const at::Tensor& rows, const at::Tensor& values, int64_t inner,
                      bool accumulate);
}  // namespace cuda

}  // namespace detops
