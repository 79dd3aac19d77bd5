// max_unpool2d / max_unpool3d on CUDA: planes of at most kUnpoolPlaneMaxChunks chunks of kUnpoolPlaneMaxOutputs
// outputs in one kernel, each chunk's winners in shared memory; larger ones max_unpool_compute
// (ops/max_unpool_op.h), the winners scattered into a table by integer atomicMax, then gathered. Checks and
// layouts are done by ops/max_unpool.cpp.
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

constexpr int kPlaneThreads = 1024;

// The plane path (max_unpool_plane_path): one block per (plane, chunk of outputs), grid-stride over them. The
// chunk's winners in shared memory are filled with -1, raised by a 32-bit atomicMax per input element of the
// plane that writes into the chunk (MaxUnpoolPlaneOp::dest), then every output element of the chunk is written
// from its winner (write), coalesced, zero where none. NB: an integer maximum, exact in any order, so the
// winners are the largest positions whatever the schedule.
template <typename bits_t>
__global__ void __launch_bounds__(kPlaneThreads)
    max_unpool_plane_kernel(MaxUnpoolPlaneOp<bits_t> op, int64_t blocks) {
  extern __shared__ int32_t chunk_winner[];
  const auto in_image = static_cast<int32_t>(op.in_image);
  for (int64_t q = blockIdx.x; q < blocks; q += gridDim.x) {
    const int64_t p = q / op.chunks;
    const auto c = static_cast<int32_t>(q % op.chunks);
    const int32_t size = op.size(c);
    for (int32_t o = threadIdx.x; o < size; o += blockDim.x) chunk_winner[o] = -1;
    __syncthreads();
    for (int32_t j = threadIdx.x; j < in_image; j += blockDim.x) {
      const int64_t idx = op.index(p, j);
      CUDA_KERNEL_ASSERT(idx >= 0 && idx < op.out_image &&
                         "detops: max_unpool index out of range (set DETOPS_STRICT=1 for a host-side error)");
      const int32_t d = op.dest(p, c, j);
      if (d >= 0) atomicMax(&chunk_winner[d], j);
    }
    __syncthreads();
    for (int32_t o = threadIdx.x; o < size; o += blockDim.x) op.write(p, c, o, chunk_winner[o]);
    __syncthreads();
  }
}

// Launches the plane path where its chunks fit this device's shared memory per block and are few enough;
// false otherwise (the table path).
bool launch_plane_path(const at::Tensor& in, const at::Tensor& indices, at::Tensor& out, int64_t in_image,
                       int64_t out_image) {
  const cudaDeviceProp* prop = at::cuda::getCurrentDeviceProperties();
  const int64_t max_chunk =
      std::min<int64_t>(kUnpoolPlaneMaxOutputs, static_cast<int64_t>(prop->sharedMemPerBlockOptin / sizeof(int32_t)));
  if (!max_unpool_plane_path(in_image, out_image, max_chunk)) return false;
  plan::record(max_unpool_plane_kernels(in.numel(), out_image));
  const int64_t chunks = max_unpool_chunks(out_image, max_chunk);
  const int64_t chunk = (out_image + chunks - 1) / chunks;
  const auto bytes = static_cast<size_t>(chunk) * sizeof(int32_t);
  const int64_t blocks = out.numel() / out_image * chunks;
  const auto grid = static_cast<unsigned>(std::min<int64_t>(blocks, int64_t{1} << 20));
  dispatch_element_bits("max_unpool", out, [&](auto tag) {
    using bits_t = decltype(tag);
    const auto kernel = max_unpool_plane_kernel<bits_t>;
    if (bytes > 48 * 1024) {
      C10_CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
    }
    const MaxUnpoolPlaneOp<bits_t> op{static_cast<const bits_t*>(in.const_data_ptr()),
                                      indices.const_data_ptr<int64_t>(), static_cast<bits_t*>(out.data_ptr()),
                                      in_image, out_image, static_cast<int32_t>(chunk), static_cast<int32_t>(chunks)};
    kernel<<<grid, kPlaneThreads, bytes, c10::cuda::getCurrentCUDAStream()>>>(op, blocks);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return true;
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
  if (launch_plane_path(in, indices, out, in_image, out_image)) return;
  plan::record(max_unpool_kernels(in.numel(), out.numel()));
  max_unpool_compute<Engine>(in, indices, out, in_image, out_image, AtomicMaxScatter());
}

}  // namespace detops::cuda
