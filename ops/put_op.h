// put_: the per-element code shared by the CPU and CUDA engines (docs/order_contract.md). self is viewed
// flat (row-major, contiguous); contribution i is (index[i], source[i]) over both tensors flattened, D = 1.
#pragma once

#include "ops/contract.h"

#include <cstdint>

namespace detops {

// The flat destination of index value k in a tensor of numel elements (negative values counted from the
// end, as stock), or -1 when out of range.
C10_HOST_DEVICE inline int64_t put_key(int64_t k, int64_t numel) {
  if (k < 0) k += numel;
  return (k >= 0 && k < numel) ? k : -1;
}

// accumulate=True, floating dtypes: self[k] = round(acc(self[k]) + the contract's sum of acc(source)).
template <typename scalar_t>
struct PutAddOp {
  using acc_t = acc_type<scalar_t>;
  scalar_t* out;
  const scalar_t* src;
  const int64_t* index;
  int64_t numel;

  C10_HOST_DEVICE int64_t key(int64_t i) const {
    return put_key(index[i], numel);
  }
  C10_HOST_DEVICE acc_t contribution(int64_t i, int64_t) const {
    return to_acc(src[i]);
  }
  C10_HOST_DEVICE void finalize(int64_t k, int64_t, acc_t total) const {
    out[k] = round_to<scalar_t>(add_rn(to_acc(out[k]), total));
  }
};

// accumulate=True, integer dtypes: the wrapped sum in 64 bits, truncated to the dtype.
template <typename scalar_t>
struct PutIntAddOp {
  using acc_t = int64_t;
  using Combine = WrapAdd;
  scalar_t* out;
  const scalar_t* src;
  const int64_t* index;
  int64_t numel;

  C10_HOST_DEVICE int64_t key(int64_t i) const {
    return put_key(index[i], numel);
  }
  C10_HOST_DEVICE int64_t contribution(int64_t i, int64_t) const {
    return static_cast<int64_t>(src[i]);
  }
  C10_HOST_DEVICE void finalize(int64_t k, int64_t, int64_t total) const {
    out[k] = static_cast<scalar_t>(WrapAdd()(static_cast<int64_t>(out[k]), total));
  }
};

// accumulate=False: the last contribution in source order wins. NB: the winner is the largest source position
// (Engine::last_writer: a pass in source order, a winner table or the stable sort), never timing; the element
// is copied as bits.
template <typename bits_t>
struct PutLastOp {
  using acc_t = int64_t;
  using Combine = Last;
  using value_type = bits_t;
  bits_t* out;
  const bits_t* src;
  const int64_t* index;
  int64_t numel;

  C10_HOST_DEVICE int64_t key(int64_t i) const {
    return put_key(index[i], numel);
  }
  C10_HOST_DEVICE int64_t contribution(int64_t i, int64_t) const {
    return i;
  }
  // Position pos's element, and its store at k (the last writer's copy).
  C10_HOST_DEVICE bits_t read(int64_t pos, int64_t) const {
    return src[pos];
  }
  C10_HOST_DEVICE void write(int64_t k, int64_t, bits_t v) const {
    out[k] = v;
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

// Dtypes put_(accumulate=True) and _index_put_impl_(accumulate=True) compute: the floating ones and the
// integers stock sums exactly.
inline bool put_add_dtype(at::ScalarType t) {
  return engine_dtype(t) || t == at::kByte || t == at::kChar || t == at::kShort || t == at::kInt ||
         t == at::kLong;
}

// Fills an op over `result` (contiguous, holding self), a contiguous int64 `index` and a contiguous `source`.
template <typename Op, typename T>
Op make_put_op(at::Tensor& result, const at::Tensor& index, const at::Tensor& source) {
  Op op;
  op.out = static_cast<T*>(result.data_ptr());
  op.src = static_cast<const T*>(source.const_data_ptr());
  op.index = index.const_data_ptr<int64_t>();
  op.numel = result.numel();
  return op;
}

// result (contiguous, holding self) gets put_(index, source, accumulate) on an engine (cpu::Engine or
// cuda::Engine); index (int64) and source are contiguous, the arguments checked by the front end.
template <typename Engine>
void put_compute(at::Tensor& result, const at::Tensor& index, const at::Tensor& source, bool accumulate) {
  const int64_t n = index.numel();
  if (n == 0 || result.numel() == 0) return;
  if (!accumulate) {
    dispatch_element_bits("put_", result, [&](auto tag) {
      using bits_t = decltype(tag);
      const auto op = make_put_op<PutLastOp<bits_t>, bits_t>(result, index, source);
      Engine::last_writer("put_", op, n, op.numel, 1, result);
    });
  } else if (engine_dtype(result.scalar_type())) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, result.scalar_type(), "detops_put_add", [&] {
      const auto op = make_put_op<PutAddOp<scalar_t>, scalar_t>(result, index, source);
      Engine::template sort_reduce<acc_type<scalar_t>>("put_", op, n, op.numel, 1, result);
    });
  } else {
    AT_DISPATCH_INTEGRAL_TYPES(result.scalar_type(), "detops_put_int_add", [&] {
      const auto op = make_put_op<PutIntAddOp<scalar_t>, scalar_t>(result, index, source);
      Engine::template sort_reduce<int64_t>("put_", op, n, op.numel, 1, result);
    });
  }
}

namespace cuda {
// put_compute on the CUDA engine (cuda/put.cu).
void put_kernel(at::Tensor& result, const at::Tensor& index, const at::Tensor& source, bool accumulate);
}  // namespace cuda

}  // namespace detops
