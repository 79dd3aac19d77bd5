// max_unpool2d / max_unpool3d on CUDA: max_unpool_compute (ops/max_unpool_op.h) with the winners scattered
// by integer atomicMax. Checks and layouts are done by ops/max_unpool.cpp.
#include "cuda/sort_reduce.cuh"
#include "ops/max_unpool.h"
#include "ops/max_unpool_op.h"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>

namespace detops::cuda {
namespace {

// One thread per input element, grid-stride: its destination's winner raised to its position. NB: an
// integer maximum, exact in any order, so the winner is the largest position whatever the schedule.
__global__ void max_unpool_winner_kernel(const int64_t* indices, int64_t n, int64_t in_image, int64_t out_image,
                                         long long* winner) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t d = max_unpool_dest(i, indices, in_image, out_image);
    CUDA_KERNEL_ASSERT(d >= 0 && "detops: max_unpool index out of range (set DETOPS_STRICT=1 for a host-side error)");
    if (d >= 0) atomicMax(&winner[d], static_cast<long long>(i));
  }
}

struct AtomicMaxScatter {
  void operator()(const int64_t* indices, int64_t n, int64_t in_image, int64_t out_image, int64_t* winner) const {
    if (n == 0) return;
    static_assert(sizeof(long long) == sizeof(int64_t));
    max_unpool_winner_kernel<<<Engine::grid_for(n), Engine::kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        indices, n, in_image, out_image, reinterpret_cast<long long*>(winner));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
};

}  // namespace

void max_unpool_kernel(const at::Tensor& in, const at::Tensor& indices, at::Tensor& out, int64_t in_image,
                       int64_t out_image) {
  const c10::cuda::CUDAGuard guard(out.device());
  plan::record(max_unpool_kernels(in.numel(), out.numel()));
  max_unpool_compute<Engine>(in, indices, out, in_image, out_image, AtomicMaxScatter());
}

}  // namespace detops::cuda
