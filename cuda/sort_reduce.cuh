// The sort-reduce engine, CUDA path: keys -> plan (cuda/sort_reduce.cu) -> the contract's fixed tree,
// level 0 for every block in parallel, then each higher level in parallel (docs/order_contract.md).
// The per-element arithmetic comes from the op's __host__ __device__ struct, the same one the CPU
// engine (ops/sort_reduce_cpu.h) calls.
#pragma once

#include "cuda/sort_reduce.h"
#include "cuda/sort_reduce_steps.h"
#include "ops/contract.h"
#include "ops/plan.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/ScalarType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/macros/Macros.h>

#include <algorithm>

namespace detops::cuda {

struct Launch2D {
  dim3 grid;
  dim3 block;
};

// Rows (positions or slots) on blockDim.y and gridDim.x; columns on blockDim.x and gridDim.y.
inline Launch2D launch_2d(int64_t rows, int64_t cols) {
  int tx = 1;
  while (tx < cols && tx < 128) tx *= 2;
  const int ty = 256 / tx;
  const int64_t gx = (rows + ty - 1) / ty;
  const int64_t gy = std::min<int64_t>((cols + tx - 1) / tx, 65535);
  return {dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), dim3(tx, ty)};
}

// One thread per contribution: its destination key, or num_keys (sorted last, never written) if invalid or
// skipped (kSkipKey, ops/contract.h). NB: positions are computed in 64 bits before the bound check: near 2^31
// contributions the 32-bit product of block and thread indices would wrap past the check.
template <typename KeyT, typename Op>
__global__ void make_keys_kernel(Op op, int32_t n, int64_t num_keys, KeyT* keys) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t k = op.key(i);
  if (k == kSkipKey) {
    keys[i] = static_cast<KeyT>(num_keys);
    return;
  }
  const bool ok = k >= 0 && k < num_keys;
  CUDA_KERNEL_ASSERT(ok && "detops: index out of range (set DETOPS_STRICT=1 for a host-side error)");
  keys[i] = static_cast<KeyT>(ok ? k : num_keys);
}

// Level 0: one thread per (sorted position, column); block leaders fold (engine::level0_step).
template <typename acc_t, typename KeyT, typename Op>
__global__ void level0_kernel(Op op, const KeyT* keys, const int32_t* perm, const int32_t* segstart,
                              const int32_t* slot, int32_t n, int64_t num_keys, int64_t D, acc_t* scratch) {
  const int64_t p = int64_t{blockIdx.x} * blockDim.y + threadIdx.y;
  if (p >= n) return;
  for (int64_t c = blockIdx.y * blockDim.x + threadIdx.x; c < D; c += int64_t{gridDim.y} * blockDim.x) {
    engine::level0_step<acc_t>(op, keys, perm, segstart, slot, n, num_keys, D, scratch, static_cast<int32_t>(p), c);
  }
}

// Level L >= 1: one thread per (scratch slot, column); group leaders fold in place (engine::level_step).
template <typename acc_t, typename KeyT, typename Op>
__global__ void level_kernel(Op op, const KeyT* keys, const int32_t* slot_first, const int32_t* slot_pos,
                             const int32_t* num_slots, int32_t max_slots, int64_t stride, int64_t D,
                             acc_t* scratch) {
  const int64_t q = int64_t{blockIdx.x} * blockDim.y + threadIdx.y;
  if (q >= max_slots) return;
  const int32_t total = *num_slots;
  for (int64_t c = blockIdx.y * blockDim.x + threadIdx.x; c < D; c += int64_t{gridDim.y} * blockDim.x) {
    engine::level_step<acc_t>(op, keys, slot_first, slot_pos, total, stride, D, scratch, static_cast<int32_t>(q), c);
  }
}

template <typename acc_t, typename KeyT, typename Op>
void reduce_plan(const Op& op, const SegmentPlan& plan, int64_t num_keys, int64_t D) {
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const int32_t n = static_cast<int32_t>(plan.n);
  at::Tensor scratch;
  acc_t* scratch_ptr = nullptr;
  if (plan.levels > 0) {
    scratch = at::empty({plan.max_slots * D},
                        plan.keys.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
    scratch_ptr = scratch.data_ptr<acc_t>();
  }
  const KeyT* keys = reinterpret_cast<const KeyT*>(plan.keys.data_ptr());
  const Launch2D l0 = launch_2d(n, D);
  level0_kernel<acc_t, KeyT, Op><<<l0.grid, l0.block, 0, stream>>>(
      op, keys, plan.perm.data_ptr<int32_t>(), plan.segstart.data_ptr<int32_t>(),
      plan.levels > 0 ? plan.slot.data_ptr<int32_t>() : nullptr, n,
      num_keys, D, scratch_ptr);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  int64_t stride = 1;
  const Launch2D ll = launch_2d(plan.max_slots, D);
  for (int level = 1; level <= plan.levels; ++level, stride *= kBlock) {
    level_kernel<acc_t, KeyT, Op><<<ll.grid, ll.block, 0, stream>>>(
        op, keys, plan.slot_first.data_ptr<int32_t>(), plan.slot_pos.data_ptr<int32_t>(),
        plan.num_slots.data_ptr<int32_t>(), static_cast<int32_t>(plan.max_slots), stride, D, scratch_ptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

// The engine's entry for one call of op `name`. Op provides key(i) (-1 if invalid, kSkipKey to drop the
// contribution), contribution(i, c) and finalize(key, c, acc) as __host__ __device__ members over device
// pointers, and optionally a Combine type (default AddRn, combine_of_t in ops/contract.h). Current stream, no sync.
// Positions are 32-bit: a call of 2^31 or more contributions is rejected (kMaxContributions).
template <typename acc_t, typename Op>
void sort_reduce(const char* name, const Op& op, int64_t n, int64_t num_keys, int64_t D,
                 const at::TensorOptions& device_options) {
  if (n == 0 || D == 0) return;
  TORCH_CHECK(n <= kMaxContributions, name, "(): detops' sort-reduce engine takes at most 2^31-1 contributions "
              "per call on CUDA, got ", n);
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const bool wide = plan::key_bytes_for(num_keys) == 8;  // the sentinel num_keys must fit too
  at::Tensor keys = at::empty({n}, device_options.dtype(wide ? at::kLong : at::kInt));
  const int blocks = static_cast<int>((n + 255) / 256);
  if (wide) {
    make_keys_kernel<uint64_t, Op><<<blocks, 256, 0, stream>>>(op, static_cast<int32_t>(n), num_keys,
                                                               reinterpret_cast<uint64_t*>(keys.data_ptr()));
  } else {
    make_keys_kernel<uint32_t, Op><<<blocks, 256, 0, stream>>>(op, static_cast<int32_t>(n), num_keys,
                                                               reinterpret_cast<uint32_t*>(keys.data_ptr()));
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const SegmentPlan plan = plan_segments(keys, num_keys);
  if (wide) {
    reduce_plan<acc_t, uint64_t>(op, plan, num_keys, D);
  } else {
    reduce_plan<acc_t, uint32_t>(op, plan, num_keys, D);
  }
}

// One thread per element, grid-stride: op(i) computes element i whole. NB: each element's value comes from
// one thread with the contract's tree, so the bits do not depend on the launch shape.
template <typename Op>
__global__ void for_each_kernel(Op op, int64_t n) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    op(i);
  }
}

// One thread per value: integer atomics, exact in any order.
template <typename index_t>
__global__ void count_kernel(const index_t* values, int64_t n, int64_t bins, unsigned long long* counts) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t v = static_cast<int64_t>(values[i]);
    if (v >= 0 && v < bins) atomicAdd(&counts[v], 1ull);
  }
}

// The CUDA engine: what the op computations (ops/*_op.h, `*_compute<Engine>`) call, on the current device
// and stream; cpu::Engine (ops/sort_reduce_cpu.h) has the same members with the same results.
struct Engine {
  static constexpr int kThreads = 256;

  static unsigned grid_for(int64_t n) {
    return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t{1} << 20));
  }

  template <typename acc_t, typename Op>
  static void sort_reduce(const char* name, const Op& op, int64_t n, int64_t num_keys, int64_t D,
                          const at::Tensor& like) {
    plan::record({plan::Kind::kSortReduce, n, num_keys, D, sizeof(acc_t), plan::key_bytes_for(num_keys)});
    cuda::sort_reduce<acc_t>(name, op, n, num_keys, D, like.options());
  }

  template <typename Op>
  static void for_each(const Op& op, int64_t n) {
    plan::record({plan::Kind::kForEach, n, 0, 1, 0, 0});
    if (n == 0) return;
    for_each_kernel<<<grid_for(n), kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(op, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  // counts: int64 device memory, zero-filled by the caller.
  template <typename index_t>
  static void count(const index_t* values, int64_t n, int64_t bins, int64_t* counts) {
    plan::record({plan::Kind::kCount, n, bins, 1, 0, sizeof(index_t)});
    if (n == 0) return;
    static_assert(sizeof(unsigned long long) == sizeof(int64_t));
    count_kernel<<<grid_for(n), kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        values, n, bins, reinterpret_cast<unsigned long long*>(counts));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
};

}  // namespace detops::cuda
