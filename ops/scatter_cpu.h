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

// The last writer (combine Last) without the engine: every contribution in source order overwrites its
// destinations, so each keeps its last one, the engine's result (the value is copied, not computed).
// NB: threads split the columns, each over every contribution in source order: the same bits at any thread
// count (docs/order_contract.md, "Last writer wins").
template <typename Op>
void last_writer_pass(const Op& op, int64_t n, int64_t num_keys, int64_t D) {
  // Recorded as the engine call it stands for (ops/plan.h: the CUDA engine makes that call).
  if (plan::record(plan::sort_reduce_call(n, num_keys, D, sizeof(typename Op::acc_t)))) return;
  const auto pass = [&](int64_t lo, int64_t hi) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = op.key(i);
      if (k < 0) continue;
      for (int64_t c = lo; c < hi; ++c) op.finalize(k, c, op.contribution(i, c));
    }
  };
  if (D == 1) {
    // The same pass without the loop over columns (1-D scatters: the loop's bookkeeping was most of it), on a
    // local copy of the op, which the pass's stores cannot reach.
    const Op local = op;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = local.key(i);
      if (k >= 0) local.finalize(k, 0, local.contribution(i, 0));
    }
  } else if (n * D < detail::kParallelGrain || at::in_parallel_region()) {
    pass(0, D);
  } else {
    at::parallel_for(0, D, std::max<int64_t>(1, detail::kParallelGrain / n), pass);
  }
}

}  // namespace detops::cpu
