// _embedding_bag_dense_backward on CUDA: launch glue over the sort-reduce engine. Checks are done by
// ops/embedding_bag.cpp.
#include "cuda/embedding_bag_launch.h"
#include "cuda/sort_reduce.cuh"
#include "ops/embedding_bag_op.h"

#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAGuard.h>

namespace detops::cuda {

void embedding_bag_sum_backward_kernel(at::Tensor& out, const at::Tensor& grad, const at::Tensor& indices,
                                       const at::Tensor& offset2bag, const at::Tensor& bag_size,
                                       const at::Tensor& counts, const at::Tensor& per_sample_weights,
                                       int64_t padding_idx) {
  const c10::cuda::CUDAGuard guard(out.device());
  if (indices.numel() == 0 || out.numel() == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad.scalar_type(), "detops_embedding_bag_sum_cuda", [&] {
    AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "detops_embedding_bag_sum_cuda_index", [&] {
      const auto op = make_embedding_bag_sum_op<scalar_t, index_t>(out, grad, indices, offset2bag, bag_size, counts,
                                                                   per_sample_weights, padding_idx);
      // NB: key num_weights collects padding_idx entries and is never written.
      sort_reduce<acc_type<scalar_t>>(op, indices.numel(), op.num_weights + 1, op.D, out.options());
    });
  });
}

void embedding_bag_max_backward_kernel(at::Tensor& out, const at::Tensor& grad, const at::Tensor& max_indices,
                                       const at::Tensor& bag_size, int64_t padding_idx) {
  const c10::cuda::CUDAGuard guard(out.device());
  if (grad.numel() == 0 || out.numel() == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad.scalar_type(), "detops_embedding_bag_max_cuda", [&] {
    AT_DISPATCH_INDEX_TYPES(max_indices.scalar_type(), "detops_embedding_bag_max_cuda_index", [&] {
      const auto op = make_embedding_bag_max_op<scalar_t, index_t>(out, grad, max_indices, bag_size, padding_idx);
      // NB: the dump key num_weights * D collects skipped entries and is never written.
      sort_reduce<acc_type<scalar_t>>(op, grad.numel(), op.dump_key() + 1, 1, out.options());
    });
  });
}

}  // namespace detops::cuda
