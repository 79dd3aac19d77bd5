// _embedding_bag_dense_backward on CUDA: the computations of ops/embedding_bag_op.h on the CUDA engine.
// Checks are done by ops/embedding_bag.cpp.
#include "cuda/sort_reduce.cuh"
#include "ops/embedding_bag_op.h"

#include <c10/cuda/CUDAGuard.h>

namespace detops::cuda {

void embedding_bag_sum_backward_kernel(at::Tensor& out, const at::Tensor& grad, const at::Tensor& indices,
                                       const at::Tensor& offset2bag, const at::Tensor& bag_size,
                                       bool scale_grad_by_freq, const at::Tensor& per_sample_weights,
                                       int64_t padding_idx) {
  const c10::cuda::CUDAGuard guard(out.device());
  embedding_bag_sum_backward_compute<Engine>(out, grad, indices, offset2bag, bag_size, scale_grad_by_freq,
                                             per_sample_weights, padding_idx);
}

void embedding_bag_max_backward_kernel(at::Tensor& out, const at::Tensor& grad, const at::Tensor& max_indices,
                                       const at::Tensor& bag_size, int64_t padding_idx) {
  const c10::cuda::CUDAGuard guard(out.device());
  embedding_bag_max_backward_compute<Engine>(out, grad, max_indices, bag_size, padding_idx);
}

}  // namespace detops::cuda
