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

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>

#include <vector>

namespace detops {

// One dimension of the index's iteration space: its size and the strides of index, src and the
// contiguous result along it.
struct ScatterDim {
  int64_t size;
  int64_t index_stride;
  int64_t src_stride;
  int64_t out_stride;
  bool scatter;  // the `dim` of the op
};

// Fills `m` from the index's dimensions. Size-1 dimensions other than `dim` are dropped and neighbours
// whose strides compose in all three tensors are merged, so any rank torch allows fits kMaxDims unless
// more than kMaxDims dimensions are irreducibly strided; those are rejected with a clear error.
// NB: dropping and merging keep the row-major order of the index's elements, the contract's source order.
inline void build_scatter_map(ScatterMap& m, const std::vector<ScatterDim>& dims, int64_t dim_size,
                              const char* op = "scatter_add_") {
  std::vector<ScatterDim> kept;
  for (const ScatterDim& d : dims) {
    if (d.size == 1 && !d.scatter) continue;
    if (!kept.empty()) {
      ScatterDim& outer = kept.back();
      const bool composes = outer.index_stride == d.index_stride * d.size &&
                            outer.src_stride == d.src_stride * d.size && outer.out_stride == d.out_stride * d.size;
      if (!outer.scatter && !d.scatter && composes) {
        outer = {outer.size * d.size, d.index_stride, d.src_stride, d.out_stride, false};
        continue;
      }
    }
    kept.push_back(d);
  }
  TORCH_CHECK(static_cast<int>(kept.size()) <= kMaxDims, op, "(): the index has ", dims.size(),
              " dimensions of which ", kept.size(), " remain after merging those whose strides compose in index, "
              "src and self; at most ", kMaxDims, " are supported (make index and src contiguous)");
  m.ndim = static_cast<int>(kept.size());
  for (int d = 0; d < m.ndim; ++d) {
    m.sizes[d] = kept[d].size;
    m.index_strides[d] = kept[d].index_stride;
    m.src_strides[d] = kept[d].src_stride;
    m.out_strides[d] = kept[d].out_stride;
    if (kept[d].scatter) m.dim = d;
  }
  m.dim_size = dim_size;
}

// Builds the op over `result` (contiguous, holding self); `dim` is wrapped, index.numel() > 0.
template <typename scalar_t, typename index_t>
ScatterAddOp<scalar_t, index_t> make_scatter_add_op(at::Tensor& result, int64_t dim, const at::Tensor& index,
                                                    const at::Tensor& src) {
  ScatterAddOp<scalar_t, index_t> op;
  op.out = result.data_ptr<scalar_t>();
  op.src = src.const_data_ptr<scalar_t>();
  op.index = index.const_data_ptr<index_t>();
  const bool scalar = index.dim() == 0;
  const int64_t ndim = scalar ? 1 : index.dim();
  std::vector<ScatterDim> dims(ndim);
  for (int64_t d = 0; d < ndim; ++d) {
    dims[d] = {scalar ? 1 : index.size(d), scalar ? 0 : index.stride(d), src.dim() == 0 ? 0 : src.stride(d),
               result.dim() == 0 ? 1 : result.stride(d), d == dim};
  }
  build_scatter_map(op.map, dims, result.dim() == 0 ? 1 : result.size(dim));
  return op;
}

// result (contiguous, holding self) gets the scatter_add of `src` on an engine (cpu::Engine or
// cuda::Engine); the front end has checked the arguments.
template <typename Engine>
void scatter_add_compute(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  if (index.numel() == 0 || result.numel() == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, result.scalar_type(), "detops_scatter_add", [&] {
    AT_DISPATCH_INDEX_TYPES(index.scalar_type(), "detops_scatter_add_index", [&] {
      const auto op = make_scatter_add_op<scalar_t, index_t>(result, dim, index, src);
      Engine::template sort_reduce<acc_type<scalar_t>>("scatter_add_", op, index.numel(), result.numel(), 1, result);
    });
  });
}

namespace cuda {
// scatter_add_compute on the CUDA engine (cuda/scatter_add.cu).
void scatter_add_kernel(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& src);
}  // namespace cuda

}  // namespace detops
