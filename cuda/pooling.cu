// Pooling backwards on CUDA: the computations of ops/pooling_op.h, launch glue only (average pools: one thread per
// grad_input element, cuda/gather_launch.cuh, after one per output and axis position where the call takes two
// steps; max pools: the same kind of gather followed by the CUDA engine gated on it, or the engine alone for
// small calls). Checks are done by ops/pooling.cpp.
#include "cuda/gather_launch.cuh"
#include "cuda/sort_reduce.cuh"
#include "ops/pooling_op.h"

#include <c10/cuda/CUDAGuard.h>

#include <cstring>

namespace detops::cuda {

void avg_pool_backward_kernel(at::Tensor& grad_in, const at::Tensor& grad_out, const PoolDims& dims, bool adaptive,
                              bool count_include_pad, int64_t divisor_override) {
  const c10::cuda::CUDAGuard guard(grad_in.device());
  const int64_t n = grad_in.numel();
  if (n == 0) return;
  record_avg_pool_backward(grad_in, grad_out, dims);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_in.scalar_type(), "detops_avg_pool_backward", [&] {
    avg_pool_backward_run<scalar_t>(grad_in, grad_out, dims, adaptive, count_include_pad, divisor_override,
                                    AvgPoolSteps::kAuto, /*force_general=*/false,
                                    [](const auto& op, int64_t count) { launch_gather(op, count); });
  });
}

void max_pool_backward_kernel(const char* name, at::Tensor& grad_in, const at::Tensor& grad_out,
                              const at::Tensor& indices, int64_t output_plane, int64_t input_plane) {
  const c10::cuda::CUDAGuard guard(grad_in.device());
  max_pool_backward_compute<Engine>(name, grad_in, grad_out, indices, output_plane, input_plane);
}

void max_pool_gather_backward_kernel(const char* name, at::Tensor& grad_in, const at::Tensor& grad_out,
                                     const at::Tensor& indices, const MaxPoolBoxes& boxes, const MaxPoolTables& t) {
  const c10::cuda::CUDAGuard guard(grad_in.device());
  if (grad_in.numel() == 0 || grad_out.numel() == 0) return;
  // Pinned, so the one copy is asynchronous on the current stream (the caching host allocator keeps the buffer until
  // the copy has run); it also zeroes the gate.
  const auto words = static_cast<int64_t>(t.words.size());
  at::Tensor host = at::empty({words}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
  std::memcpy(host.data_ptr<int64_t>(), t.words.data(), t.words.size() * sizeof(int64_t));
  at::Tensor tables = host.to(grad_in.device(), /*non_blocking=*/true);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_in.scalar_type(), "detops_max_pool_gather",
                                  [&] { plan::record(max_pool_gather_call<scalar_t>(t, grad_in, grad_out)); });
  max_pool_backward_gathered<Engine>(name, grad_in, grad_out, indices, boxes, t, tables.data_ptr<int64_t>(),
                                     [](const auto& op, int64_t n) { launch_gather(op, n); });
}

}  // namespace detops::cuda
