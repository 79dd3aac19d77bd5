// scatter_add_: the per-element arithmetic shared by the CPU and CUDA engines (docs/order_contract.md).
// Contribution e is the e-th element of `index` in row-major order: src at the same coordinates goes to
// self at the same coordinates except along `dim`, where it goes to index[e]. The layouts (ScatterElements,
// ScatterRows) serve the whole scatter family: scatter_reduce_ and scatter_ too.
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
      // e < the product of sizes[0..d], so the outermost coordinate is e itself: no division for it.
      const int64_t coord = d == 0 ? e : e % sizes[d];
      if (d > 0) e /= sizes[d];
      index_off += coord * index_strides[d];
      src_off += coord * src_strides[d];
      if (d != dim) out_base += coord * out_strides[d];
    }
  }
};

// The general layout: contribution e is the e-th element of the index in row-major order, one column; its
// key is the destination's linear offset in the contiguous result.
template <typename index_t>
struct ScatterElements {
  static constexpr bool kKeysAreOffsets = true;  // a key is its destination's offset, in one column
  const index_t* index;  // strided
  ScatterMap map;

  // Linear offset of the destination in self, or -1 if index[e] is out of range.
  C10_HOST_DEVICE int64_t key(int64_t e) const {
    int64_t index_off, src_off, out_base;
    map.offsets(e, index_off, src_off, out_base);
    const int64_t k = static_cast<int64_t>(index[index_off]);
    return (k >= 0 && k < map.dim_size) ? out_base + k * map.out_strides[map.dim] : -1;
  }
  C10_HOST_DEVICE int64_t src_offset(int64_t e, int64_t /*column*/) const {
    int64_t index_off, src_off, out_base;
    map.offsets(e, index_off, src_off, out_base);
    return src_off;
  }
  C10_HOST_DEVICE int64_t out_offset(int64_t key, int64_t /*column*/) const {
    return key;
  }
};

// The row layout, for an index broadcast along every dimension but `dim` (stride 0 or size 1 there, as
// `edge_index[:, None].expand(E, F)` in message passing): contribution i is the i-th row along `dim`, its key
// the destination row index[i], and the engine's columns c are the index's other coordinates, unravelled
// row-major over `cols`. NB: the bits equal the general layout's (docs/order_contract.md): for a fixed
// destination (k, c) the contributions are the rows i with index[i] = k in increasing i, which is their
// order in the row-major index too, so the contract's tree sees the same sequence.
template <typename index_t>
struct ScatterRows {
  static constexpr bool kKeysAreOffsets = false;
  const index_t* index;  // strided; read along `dim` only
  ScatterMap cols;       // the index's other dimensions (dim = -1): column -> src and self offsets
  int64_t index_stride;  // strides along `dim`
  int64_t src_stride;
  int64_t out_stride;
  int64_t dim_size;      // self.size(dim)

  // The destination row, or -1 if index[i] is out of range.
  C10_HOST_DEVICE int64_t key(int64_t i) const {
    const int64_t k = static_cast<int64_t>(index[i * index_stride]);
    return (k >= 0 && k < dim_size) ? k : -1;
  }
  C10_HOST_DEVICE int64_t src_offset(int64_t i, int64_t c) const {
    // Columns that merged into one dimension (the usual case) need no division.
    if (cols.ndim == 1) return i * src_stride + c * cols.src_strides[0];
    int64_t index_off, src_off, out_off;
    cols.offsets(c, index_off, src_off, out_off);
    return i * src_stride + src_off;
  }
  C10_HOST_DEVICE int64_t out_offset(int64_t k, int64_t c) const {
    if (cols.ndim == 1) return k * out_stride + c * cols.out_strides[0];
    int64_t index_off, src_off, out_off;
    cols.offsets(c, index_off, src_off, out_off);
    return k * out_stride + out_off;
  }
};

template <typename scalar_t, typename Layout>
struct ScatterAddOp {
  using acc_t = acc_type<scalar_t>;
  scalar_t* out;          // contiguous
  const scalar_t* src;    // strided
  Layout layout;

  C10_HOST_DEVICE int64_t key(int64_t i) const {
    return layout.key(i);
  }
  C10_HOST_DEVICE acc_t contribution(int64_t i, int64_t c) const {
    return to_acc(src[layout.src_offset(i, c)]);
  }
  C10_HOST_DEVICE void finalize(int64_t k, int64_t c, acc_t total) const {
    const int64_t o = layout.out_offset(k, c);
    out[o] = finalized(out[o], total, k);
  }
  C10_HOST_DEVICE scalar_t finalized(scalar_t old, acc_t total, int64_t /*k*/) const {
    return round_to<scalar_t>(add_rn(to_acc(old), total));
  }
  // The CPU engine's dense destinations (has_dense_out, ops/sort_reduce_cpu.h): key k's is out[k].
  scalar_t* dense_out() const {
    return Layout::kKeysAreOffsets ? out : nullptr;
  }
};

}  // namespace detops

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>

#include <type_traits>
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

// The general layout over `result` (contiguous, holding self); `dim` is wrapped, index.numel() > 0.
template <typename index_t>
ScatterElements<index_t> make_scatter_elements(const at::Tensor& result, int64_t dim, const at::Tensor& index,
                                               const at::Tensor& src, const char* op) {
  ScatterElements<index_t> layout;
  layout.index = index.const_data_ptr<index_t>();
  const bool scalar = index.dim() == 0;
  const int64_t ndim = scalar ? 1 : index.dim();
  std::vector<ScatterDim> dims(ndim);
  for (int64_t d = 0; d < ndim; ++d) {
    dims[d] = {scalar ? 1 : index.size(d), scalar ? 0 : index.stride(d), src.dim() == 0 ? 0 : src.stride(d),
               result.dim() == 0 ? 1 : result.stride(d), d == dim};
  }
  build_scatter_map(layout.map, dims, result.dim() == 0 ? 1 : result.size(dim), op);
  return layout;
}

// Whether the row layout (ScatterRows) applies: an index of two or more dimensions, broadcast (stride 0 or
// size 1) along every dimension but `dim`, with more than one column. Decided from sizes and strides only.
inline bool scatter_rows_apply(const at::Tensor& index, int64_t dim) {
  if (index.dim() < 2) return false;
  int64_t cols = 1;
  for (int64_t d = 0; d < index.dim(); ++d) {
    if (d == dim) continue;
    if (index.size(d) != 1 && index.stride(d) != 0) return false;
    cols *= index.size(d);
  }
  return cols > 1;
}

// The index with its broadcast dimensions (stride 0) cut to size 1: each distinct element once, in order.
inline at::Tensor scatter_index_compact(const at::Tensor& index) {
  at::Tensor compact = index;
  for (int64_t d = 0; d < index.dim(); ++d) {
    if (index.stride(d) == 0 && index.size(d) > 1) compact = compact.narrow(d, 0, 1);
  }
  return compact;
}

// index as int64 for the engines that read int64 indices (scatter_reduce_, scatter_): its broadcast
// dimensions stay broadcast, so the row layout still applies and only the distinct values convert.
inline at::Tensor scatter_index_int64(const at::Tensor& index) {
  if (index.scalar_type() == at::kLong) return index;
  return scatter_index_compact(index).to(at::kLong).expand(index.sizes());
}

// The row layout over `result` (contiguous, holding self); scatter_rows_apply(index, dim) holds.
template <typename index_t>
ScatterRows<index_t> make_scatter_rows(const at::Tensor& result, int64_t dim, const at::Tensor& index,
                                       const at::Tensor& src, const char* op) {
  ScatterRows<index_t> layout;
  layout.index = index.const_data_ptr<index_t>();
  std::vector<ScatterDim> dims;
  for (int64_t d = 0; d < index.dim(); ++d) {
    if (d != dim) dims.push_back({index.size(d), 0, src.stride(d), result.stride(d), false});
  }
  build_scatter_map(layout.cols, dims, 1, op);
  layout.cols.dim = -1;  // no scatter dimension among the columns
  layout.index_stride = index.stride(dim);
  layout.src_stride = src.stride(dim);
  layout.out_stride = result.stride(dim);
  layout.dim_size = result.size(dim);
  return layout;
}

// The engine call of a scatter over `result` (contiguous, holding self): f(layout, n, num_keys, D) with the
// row layout where it applies (n rows along `dim`, D columns, keys the rows of self), else the general one
// (n elements of the index, one column, keys the elements of self). index.numel() > 0.
template <typename index_t, typename F>
void with_scatter_layout(const char* op, const at::Tensor& result, int64_t dim, const at::Tensor& index,
                         const at::Tensor& src, F&& f) {
  if (scatter_rows_apply(index, dim)) {
    const int64_t n = index.size(dim);
    f(make_scatter_rows<index_t>(result, dim, index, src, op), n, result.size(dim), index.numel() / n);
  } else {
    f(make_scatter_elements<index_t>(result, dim, index, src, op), index.numel(), result.numel(), int64_t{1});
  }
}

// The op over `result` in the general layout (the engine schedule tests run its steps).
template <typename scalar_t, typename index_t>
ScatterAddOp<scalar_t, ScatterElements<index_t>> make_scatter_add_op(at::Tensor& result, int64_t dim,
                                                                     const at::Tensor& index, const at::Tensor& src) {
  ScatterAddOp<scalar_t, ScatterElements<index_t>> op;
  op.out = result.data_ptr<scalar_t>();
  op.src = src.const_data_ptr<scalar_t>();
  op.layout = make_scatter_elements<index_t>(result, dim, index, src, "scatter_add_");
  return op;
}

// result (contiguous, holding self) gets the scatter_add of `src` on an engine (cpu::Engine or
// cuda::Engine); the front end has checked the arguments.
template <typename Engine>
void scatter_add_compute(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  if (index.numel() == 0 || result.numel() == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, result.scalar_type(), "detops_scatter_add", [&] {
    AT_DISPATCH_INDEX_TYPES(index.scalar_type(), "detops_scatter_add_index", [&] {
      with_scatter_layout<index_t>("scatter_add_", result, dim, index, src,
                                   [&](const auto& layout, int64_t n, int64_t num_keys, int64_t D) {
        ScatterAddOp<scalar_t, std::decay_t<decltype(layout)>> op;
        op.out = result.data_ptr<scalar_t>();
        op.src = src.const_data_ptr<scalar_t>();
        op.layout = layout;
        Engine::template sort_reduce<acc_type<scalar_t>>("scatter_add_", op, n, num_keys, D, result);
      });
    });
  });
}

namespace cuda {
// scatter_add_compute on the CUDA engine (cuda/scatter_add.cu).
void scatter_add_kernel(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& src);
}  // namespace cuda

}  // namespace detops
