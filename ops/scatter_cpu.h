// The scatter family's CPU paths (ops/scatter_add.cpp, ops/scatter_reduce.cpp, ops/scatter.cpp): the
// layouts of ops/scatter_add_op.h with a flat one where the index runs along `dim` only, and the last
// writer's pass in source order.
#pragma once

#include "ops/plan_record.h"
#include "ops/scatter_add_op.h"
#include "ops/sort_reduce_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <type_traits>

namespace detops::cpu {

// ScatterElements whose map has one dimension (the index 1-D, or of size 1 along every dimension but `dim`):
// the same keys and offsets without the map's loop over dimensions, so the CPU engine's pass inlines them.
// NB: with one dimension left, it is `dim` (never dropped nor merged), and ScatterMap::offsets gives
// index_off = e * index_strides[0], src_off = e * src_strides[0] and out_base = 0: the same bits.
template <typename index_t>
struct ScatterLine {
  static constexpr bool kKeysAreOffsets = true;
  const index_t* index;
  int64_t index_stride;
  int64_t src_stride;
  int64_t out_stride;
  int64_t dim_size;

  int64_t key(int64_t e) const {
    const int64_t k = static_cast<int64_t>(index[e * index_stride]);
    return static_cast<uint64_t>(k) < static_cast<uint64_t>(dim_size) ? k * out_stride : -1;
  }
  int64_t src_offset(int64_t e, int64_t /*column*/) const {
    return e * src_stride;
  }
  int64_t out_offset(int64_t key, int64_t /*column*/) const {
    return key;
  }
};

// ScatterRows whose columns are one dimension of stride 1 in src and self (message passing's [E, F] rows):
// the same offsets with the column added as is, so the CPU engine's loops over a row's columns vectorise.
template <typename index_t>
struct ScatterRowLine {
  static constexpr bool kKeysAreOffsets = false;
  const index_t* index;
  int64_t index_stride;
  int64_t src_stride;
  int64_t out_stride;
  int64_t dim_size;

  int64_t key(int64_t i) const {
    const int64_t k = static_cast<int64_t>(index[i * index_stride]);
    return static_cast<uint64_t>(k) < static_cast<uint64_t>(dim_size) ? k : -1;
  }
  int64_t src_offset(int64_t i, int64_t c) const {
    return i * src_stride + c;
  }
  int64_t out_offset(int64_t k, int64_t c) const {
    return k * out_stride + c;
  }
};

// with_scatter_layout (ops/scatter_add_op.h) on the CPU: f(layout, n, num_keys, D) with ScatterLine in place
// of a ScatterElements of one dimension and ScatterRowLine in place of a ScatterRows of contiguous columns.
template <typename index_t, typename F>
void with_scatter_layout_cpu(const char* op, const at::Tensor& result, int64_t dim, const at::Tensor& index,
                             const at::Tensor& src, F&& f) {
  with_scatter_layout<index_t>(op, result, dim, index, src,
                               [&](const auto& layout, int64_t n, int64_t num_keys, int64_t D) {
    using Layout = std::decay_t<decltype(layout)>;
    if constexpr (std::is_same_v<Layout, ScatterElements<index_t>>) {
      const ScatterMap& m = layout.map;
      if (m.ndim == 1) {
        f(ScatterLine<index_t>{layout.index, m.index_strides[0], m.src_strides[0], m.out_strides[0], m.dim_size}, n,
          num_keys, D);
        return;
      }
    } else if constexpr (std::is_same_v<Layout, ScatterRows<index_t>>) {
      const ScatterMap& m = layout.cols;
      if (m.ndim == 1 && m.src_strides[0] == 1 && m.out_strides[0] == 1) {
        f(ScatterRowLine<index_t>{layout.index, layout.index_stride, layout.src_stride, layout.out_stride,
                                  layout.dim_size},
          n, num_keys, D);
        return;
      }
    }
    f(layout, n, num_keys, D);
  });
}

}  // namespace detops::cpu
