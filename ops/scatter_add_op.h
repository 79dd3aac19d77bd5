// scatter_add_: the per-element arithmetic shared by the CPU and CUDA engines (docs/order_contract.md).
// Contribution e is the e-th element of `index` in row-major order: src at the same coordinates goes to
// self at the same coordinates except along `dim`, where it goes to index[e].
#pragma once

#include "ops/contract.h"

namespace detops {

constexpr int kMaxDims = 25;

// Coordinates of a row-major linear position over `sizes`, mapped through several stride sets.
struct ScatterMap {
  int ndim;
  int dim;
  int64_t sizes[kMaxDims];          // index sizes
  int64_t index_strides[kMaxDims];
  int64_t src_strides[kMaxDims];
  int64_t out_strides[kMaxDims];    // contiguous self
  int64_t dim_size;                 // self.size(dim)

  C10_HOST_DEVICE void offsets(int64_t e, int64_t& index_off, int64_t& src_off, int64_t& out_base) const {
    index_off = 0;
    src_off = 0;
    out_base = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t coord = e % sizes[d];
      e /= sizes[d];
      index_off += coord * index_strides[d];
      src_off += coord * src_strides[d];
      if (d != dim) out_base += coord * out_strides[d];
    }
  }
};

template <typename scalar_t, typename index_t>
struct ScatterAddOp {
  using acc_t = acc_type<scalar_t>;
  scalar_t* out;          // contiguous
  const scalar_t* src;    // strided
  const index_t* index;   // strided
  ScatterMap map;

  // Linear offset of the destination in self, or -1 if index[e] is out of range.
  C10_HOST_DEVICE int64_t key(int64_t e) const {
    int64_t index_off, src_off, out_base;
    map.offsets(e, index_off, src_off, out_base);
    const int64_t k = static_cast<int64_t>(index[index_off]);
    return (k >= 0 && k < map.dim_size) ? out_base + k * map.out_strides[map.dim] : -1;
  }
  C10_HOST_DEVICE acc_t contribution(int64_t e, int64_t /*column*/) const {
    int64_t index_off, src_off, out_base;
    map.offsets(e, index_off, src_off, out_base);
    return to_acc(src[src_off]);
  }
  C10_HOST_DEVICE void finalize(int64_t k, int64_t /*column*/, acc_t total) const {
    out[k] = round_to<scalar_t>(add_rn(to_acc(out[k]), total));
  }
};

}  // namespace detops

#include <ATen/core/Tensor.h>

namespace detops {

// Builds the op over `result` (contiguous, holding self); `dim` is wrapped, index.numel() > 0.
template <typename scalar_t, typename index_t>
ScatterAddOp<scalar_t, index_t> make_scatter_add_op(at::Tensor& result, int64_t dim, const at::Tensor& index,
                                                    const at::Tensor& src) {
  ScatterAddOp<scalar_t, index_t> op;
  op.out = result.data_ptr<scalar_t>();
  op.src = src.const_data_ptr<scalar_t>();
  op.index = index.const_data_ptr<index_t>();
  ScatterMap& m = op.map;
  const bool scalar = index.dim() == 0;
  m.ndim = scalar ? 1 : static_cast<int>(index.dim());
  m.dim = static_cast<int>(dim);
  for (int d = 0; d < m.ndim; ++d) {
    m.sizes[d] = scalar ? 1 : index.size(d);
    m.index_strides[d] = scalar ? 0 : index.stride(d);
    m.src_strides[d] = src.dim() == 0 ? 0 : src.stride(d);
    m.out_strides[d] = result.dim() == 0 ? 1 : result.stride(d);
  }
  m.dim_size = result.dim() == 0 ? 1 : result.size(dim);
  return op;
}

}  // namespace detops
