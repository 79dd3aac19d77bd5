// _embedding_bag_dense_backward: the per-element arithmetic shared by the CPU and CUDA engines
// (docs/order_contract.md). The result is grad_weight [num_weights, D], zero-filled.
//  - sum / mean: one contribution per position i of `indices`, key = indices[i], D columns; the
//    contribution is grad[offset2bag[i]][c] (divided by the bag's size for mean) times the scale
//    (1 / count of the index for scale_grad_by_freq, times per_sample_weights[i]).
//  - max: one contribution per element (bag, c) of max_indices, key = max_indices[bag][c] * D + c,
//    D = 1: each column of a bag routes its gradient to the row that held the maximum.
// Entries that stock skips (padding_idx, empty bags) go to a dump key one past the last real key,
// which finalize ignores; invalid entries get key -1 (never written).
#pragma once

#include "ops/contract.h"

namespace detops {

template <typename scalar_t, typename index_t>
struct EmbeddingBagSumOp {
  using acc_t = acc_type<scalar_t>;
  scalar_t* out;               // [num_weights, D], contiguous, zero-filled
  const scalar_t* grad;        // [num_bags, D], contiguous
  const index_t* indices;      // [n], contiguous
  const index_t* offset2bag;   // [n], contiguous
  const index_t* bag_size;     // [>= num_bags], contiguous; mean mode only
  const int64_t* counts;       // [>= num_weights] occurrences of each index; scale_grad_by_freq only
  const scalar_t* per_sample_weights;  // [n], contiguous; sum mode only
  int64_t num_weights;
  int64_t num_bags;
  int64_t D;
  int64_t padding_idx;

  C10_HOST_DEVICE int64_t key(int64_t i) const {
    const int64_t k = static_cast<int64_t>(indices[i]);
    const int64_t bag = static_cast<int64_t>(offset2bag[i]);
    if (k < 0 || k >= num_weights || bag < 0 || bag >= num_bags) return -1;
    return k == padding_idx ? num_weights : k;
  }
  // Stock's order of operations (aten compute_grad_weight_bags): the gradient divided by the bag size,
  // times the scale; each operation rounded on its own.
  C10_HOST_DEVICE acc_t contribution(int64_t i, int64_t c) const {
    const int64_t bag = static_cast<int64_t>(offset2bag[i]);
    acc_t g = to_acc(grad[bag * D + c]);
    if (bag_size != nullptr) {
      const int64_t size = static_cast<int64_t>(bag_size[bag]);
      if (size != 0) g = div_rn(g, static_cast<acc_t>(size));
    }
    acc_t scale = acc_t(1);
    if (counts != nullptr) {
      scale = static_cast<acc_t>(div_rn(1.0, static_cast<double>(counts[static_cast<int64_t>(indices[i])])));
    }
    if (per_sample_weights != nullptr) scale = mul_rn(scale, to_acc(per_sample_weights[i]));
    return mul_rn(g, scale);
  }
  C10_HOST_DEVICE void finalize(int64_t k, int64_t c, acc_t total) const {
    if (k >= num_weights) return;  // padding_idx
    out[k * D + c] = round_to<scalar_t>(add_rn(acc_t(0), total));
  }
};

template <typename scalar_t, typename index_t>
struct EmbeddingBagMaxOp {
  using acc_t = acc_type<scalar_t>;
  scalar_t* out;                // [num_weights, D], contiguous, zero-filled
  const scalar_t* grad;         // [num_bags, D], contiguous
  const index_t* max_indices;   // [num_bags, D], contiguous
  const index_t* bag_size;      // [>= num_bags], contiguous
  int64_t num_weights;
  int64_t D;
  int64_t padding_idx;

  C10_HOST_DEVICE int64_t dump_key() const {
    return num_weights * D;
  }
  // Skipped as stock skips them: empty bags (CPU: bag_size 0; CUDA: also max index -1) and padding_idx.
  C10_HOST_DEVICE int64_t key(int64_t i) const {
    const int64_t bag = i / D;
    const int64_t m = static_cast<int64_t>(max_indices[i]);
    if (bag_size[bag] == 0 || m < 0 || m == padding_idx) return dump_key();
    if (m >= num_weights) return -1;
    return m * D + (i - bag * D);
  }
  C10_HOST_DEVICE acc_t contribution(int64_t i, int64_t) const {
    return to_acc(grad[i]);
  }
  C10_HOST_DEVICE void finalize(int64_t k, int64_t, acc_t total) const {
    if (k >= dump_key()) return;
    out[k] = round_to<scalar_t>(add_rn(acc_t(0), total));
  }
};

}  // namespace detops

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>

namespace detops {

// Over a zero-filled contiguous `out` and contiguous inputs; undefined optional tensors turn the
// corresponding step off (bag_size: mean only; counts: scale_grad_by_freq; per_sample_weights).
template <typename scalar_t, typename index_t>
EmbeddingBagSumOp<scalar_t, index_t> make_embedding_bag_sum_op(at::Tensor& out, const at::Tensor& grad,
                                                              const at::Tensor& indices,
                                                              const at::Tensor& offset2bag,
                                                              const at::Tensor& bag_size, const at::Tensor& counts,
                                                              const at::Tensor& per_sample_weights,
                                                              int64_t padding_idx) {
  EmbeddingBagSumOp<scalar_t, index_t> op;
  op.out = out.data_ptr<scalar_t>();
  op.grad = grad.const_data_ptr<scalar_t>();
  op.indices = indices.const_data_ptr<index_t>();
  op.offset2bag = offset2bag.const_data_ptr<index_t>();
  op.bag_size = bag_size.defined() ? bag_size.const_data_ptr<index_t>() : nullptr;
  op.counts = counts.defined() ? counts.const_data_ptr<int64_t>() : nullptr;
  op.per_sample_weights = per_sample_weights.defined() ? per_sample_weights.const_data_ptr<scalar_t>() : nullptr;
  op.num_weights = out.size(0);
  op.num_bags = grad.size(0);
  op.D = grad.size(1);
  op.padding_idx = padding_idx;
  return op;
}

template <typename scalar_t, typename index_t>
EmbeddingBagMaxOp<scalar_t, index_t> make_embedding_bag_max_op(at::Tensor& out, const at::Tensor& grad,
                                                              const at::Tensor& max_indices,
                                                              const at::Tensor& bag_size, int64_t padding_idx) {
  EmbeddingBagMaxOp<scalar_t, index_t> op;
  op.out = out.data_ptr<scalar_t>();
  op.grad = grad.const_data_ptr<scalar_t>();
  op.max_indices = max_indices.const_data_ptr<index_t>();
  op.bag_size = bag_size.const_data_ptr<index_t>();
  op.num_weights = out.size(0);
  op.D = grad.size(1);
  op.padding_idx = padding_idx;
  return op;
}

// Sum / mean on an engine (cpu::Engine or cuda::Engine): all tensors contiguous, index tensors of one
// dtype, `out` zero-filled [num_weights, D]; bag_size (mean) and per_sample_weights may be undefined.
template <typename Engine>
void embedding_bag_sum_backward_compute(at::Tensor& out, const at::Tensor& grad, const at::Tensor& indices,
                                        const at::Tensor& offset2bag, const at::Tensor& bag_size,
                                        bool scale_grad_by_freq, const at::Tensor& per_sample_weights,
                                        int64_t padding_idx) {
  const int64_t n = indices.numel();
  const int64_t num_weights = out.size(0);
  if (n == 0 || out.numel() == 0) return;
  AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "detops_embedding_bag_sum_backward_index", [&] {
    // Occurrences of each index: integer counts, exact in any order, no host round trip.
    at::Tensor counts;
    if (scale_grad_by_freq) {
      counts = at::zeros({num_weights}, out.options().dtype(at::kLong));
      Engine::count(indices.const_data_ptr<index_t>(), n, num_weights, counts.mutable_data_ptr<int64_t>());
    }
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad.scalar_type(),
                                    "detops_embedding_bag_sum_backward", [&] {
      const auto op = make_embedding_bag_sum_op<scalar_t, index_t>(out, grad, indices, offset2bag, bag_size, counts,
                                                                   per_sample_weights, padding_idx);
      // NB: key num_weights collects padding_idx entries and is never written.
      Engine::template sort_reduce<acc_type<scalar_t>>("_embedding_bag_dense_backward", op, n, num_weights + 1, op.D,
                                                       out);
    });
  });
}

// Max on an engine: grad and max_indices [num_bags, D] contiguous, `out` zero-filled [num_weights, D].
template <typename Engine>
void embedding_bag_max_backward_compute(at::Tensor& out, const at::Tensor& grad, const at::Tensor& max_indices,
                                        const at::Tensor& bag_size, int64_t padding_idx) {
  if (grad.numel() == 0 || out.numel() == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad.scalar_type(), "detops_embedding_bag_max_backward",
                                  [&] {
    AT_DISPATCH_INDEX_TYPES(max_indices.scalar_type(), "detops_embedding_bag_max_backward_index", [&] {
      const auto op = make_embedding_bag_max_op<scalar_t, index_t>(out, grad, max_indices, bag_size, padding_idx);
      // NB: the dump key num_weights * D collects skipped entries and is never written.
      Engine::template sort_reduce<acc_type<scalar_t>>("_embedding_bag_dense_backward", op, grad.numel(),
                                                       op.dump_key() + 1, 1, out);
    });
  });
}

namespace cuda {
// The two computations on the CUDA engine (cuda/embedding_bag.cu).
void embedding_bag_sum_backward_kernel(at::Tensor& out, const at::Tensor& grad, const at::Tensor& indices,
                                       const at::Tensor& offset2bag, const at::Tensor& bag_size,
                                       bool scale_grad_by_freq, const at::Tensor& per_sample_weights,
                                       int64_t padding_idx);
void embedding_bag_max_backward_kernel(at::Tensor& out, const at::Tensor& grad, const at::Tensor& max_indices,
                                       const at::Tensor& bag_size, int64_t padding_idx);
}  // namespace cuda

}  // namespace detops
