// _ctc_loss_backward on CUDA: launch glue over CtcBackwardOp (ops/ctc_loss_op.h). Checks are done by
// ops/ctc_loss.cpp. No atomics on floating-point values: every output is computed by one thread with the
// contract's tree (docs/order_contract.md, "Log-add-exp").
#include "cuda/gather_launch.cuh"
#include "ops/ctc_loss.h"
#include "ops/ctc_loss_op.h"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>

namespace detops::cuda {
namespace {

constexpr int kGroupThreads = 256;
constexpr int kBetaThreads = 256;
constexpr int kGradThreads = 256;

// One block per batch element: label counts (integer atomics, exact), a block-wide exclusive scan, then
// warp 0 places the extended positions 32 at a time in ascending s, ranking equal labels within a chunk
// with __match_any_sync. NB: gives the CPU's stable counting sort exactly (integers only).
template <typename Op>
__global__ void __launch_bounds__(kGroupThreads) ctc_group_kernel(Op op, int32_t* perm, int32_t* group_end) {
  __shared__ int32_t partial[kGroupThreads];
  const int64_t n = blockIdx.x;
  const int64_t C = op.num_labels;
  const int64_t positions = 2 * op.target_lengths[n] + 1;
  int32_t* cursor = group_end + n * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) cursor[c] = 0;
  __syncthreads();
  for (int64_t s = threadIdx.x; s < positions; s += blockDim.x) atomicAdd(&cursor[op.label(n, s)], 1);
  __syncthreads();
  const int64_t chunk = (C + blockDim.x - 1) / blockDim.x;
  const int64_t lo = std::min<int64_t>(C, threadIdx.x * chunk);
  const int64_t hi = std::min<int64_t>(C, lo + chunk);
  int32_t sum = 0;
  for (int64_t c = lo; c < hi; ++c) sum += cursor[c];
  partial[threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t run = 0;
    for (unsigned i = 0; i < blockDim.x; ++i) {
      const int32_t v = partial[i];
      partial[i] = run;
      run += v;
    }
  }
  __syncthreads();
  int32_t run = partial[threadIdx.x];
  for (int64_t c = lo; c < hi; ++c) {
    const int32_t v = cursor[c];
    cursor[c] = run;
    run += v;
  }
  __syncthreads();
  if (threadIdx.x >= 32) return;
  const unsigned lane = threadIdx.x;
  for (int64_t base = 0; base < positions; base += 32) {
    const int64_t s = base + lane;
    const bool active = s < positions;
    // Inactive lanes get a label of their own, so they never share a group.
    const int64_t c = active ? op.label(n, s) : -1 - static_cast<int64_t>(lane);
    const unsigned peers = __match_any_sync(0xffffffffu, static_cast<unsigned long long>(c));
    const int rank = __popc(peers & ((1u << lane) - 1u));
    int32_t start = 0;
    if (active) {
      start = cursor[c];
      perm[n * op.S + start + rank] = static_cast<int32_t>(s);
    }
    __syncwarp();
    if (active && rank == 0) cursor[c] = start + __popc(peers);
    __syncwarp();
  }
}

// The beta rows kernel keeps the facts of this many positions per thread: targets of up to
// kBetaThreads * kBetaCells / 2 - 1 labels (longer ones take ctc_beta_kernel).
constexpr int kBetaCells = 4;

// One block per batch element; thread j takes the extended positions s = j + k * blockDim.x (k < kBetaCells), and
// their facts (label, which cells of the row below enter: beta_facts) once. Rows t from input_length - 1 down to 0,
// one barrier per row: each cell from the row below, held in shared memory (two rows, alternating), written to
// log_beta and to the other row; each thread loads its cells' log-probabilities for the next row before the
// barrier. It was a thread per cell reading its labels (two dependent loads each) and the row below from global
// memory after every barrier. NB: beta_from over the same operands as the CPU path's, so the same bits.
template <typename Op>
__global__ void __launch_bounds__(kBetaThreads) ctc_beta_rows_kernel(Op op) {
  using T = typename Op::T;
  extern __shared__ unsigned char beta_rows_raw[];
  T* rows = reinterpret_cast<T*>(beta_rows_raw);  // [2][positions]
  const int64_t n = blockIdx.x;
  const int64_t input_length = op.input_lengths[n];
  if (input_length == 0) return;
  const int64_t positions = 2 * op.target_lengths[n] + 1;
  const int64_t last = input_length - 1;
  typename Op::BetaFacts facts[kBetaCells];
  T lp_next[kBetaCells];
#pragma unroll
  for (int k = 0; k < kBetaCells; ++k) {
    const int64_t s = threadIdx.x + int64_t{k} * blockDim.x;
    if (s < positions) {
      facts[k] = op.beta_facts(n, s);
      const T v = op.beta_last_value(n, s);
      op.log_beta[op.ab_index(n, last, s)] = v;
      rows[(last % 2) * positions + s] = v;
      if (last > 0) lp_next[k] = op.lp(last - 1, n, facts[k].label);
    }
  }
  for (int64_t t = last - 1; t >= 0; --t) {
    __syncthreads();
    const T* below = rows + ((t + 1) % 2) * positions;
    T* row = rows + (t % 2) * positions;
#pragma unroll
    for (int k = 0; k < kBetaCells; ++k) {
      const int64_t s = threadIdx.x + int64_t{k} * blockDim.x;
      if (s < positions) {
        const T v = Op::beta_from(facts[k], below, s, lp_next[k]);
        op.log_beta[op.ab_index(n, t, s)] = v;
        row[s] = v;
        if (t > 0) lp_next[k] = op.lp(t - 1, n, facts[k].label);
      }
    }
  }
}

// Targets longer than the rows kernel takes: one block per batch element; threads over the extended positions s,
// rows t from input_length - 1 down to 0 with one barrier per row, the row below read from log_beta.
template <typename Op>
__global__ void __launch_bounds__(kBetaThreads) ctc_beta_kernel(Op op) {
  const int64_t n = blockIdx.x;
  const int64_t input_length = op.input_lengths[n];
  if (input_length == 0) return;
  const int64_t positions = 2 * op.target_lengths[n] + 1;
  for (int64_t s = threadIdx.x; s < positions; s += blockDim.x) op.beta_last(n, s);
  for (int64_t t = input_length - 2; t >= 0; --t) {
    __syncthreads();
    for (int64_t s = threadIdx.x; s < positions; s += blockDim.x) op.beta_cell(n, t, s);
  }
}

// One warp per output row (t, n), grid-stride. Lane l takes the labels c = l, l + 32, ... whose groups hold at most
// kBlock positions: each one's collection (its one block, collect_block) and output. Then each longer group (the
// blank's, past 31 target labels), in turn: lane l folds its blocks l, l + 32, ..., and lane 0 takes the block sums
// up the tree in block order (BlockLevels) and writes the output. A thread per (t, n, c) left each warp waiting on
// the blank's lane: about 100 log-add-exp in sequence at S = 100, against a block's 32 now. NB: the same blocks and
// the same tree as grad_at, whichever lane folds them, so the same bits (ctc_grad_blocks_cpu runs these steps on
// the CPU in another order).
template <typename Op>
__global__ void __launch_bounds__(kGradThreads) ctc_grad_warp_kernel(Op op) {
  using T = typename Op::T;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t C = op.num_labels;
  const int64_t rows = op.max_T * op.batch;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x / 32);
  // The trip counts depend on the warp only: every lane reaches the votes.
  for (int64_t tn = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32; tn < rows; tn += warps) {
    const int64_t t = tn / op.batch;
    const int64_t n = tn - t * op.batch;
    T* out = op.grad + tn * C;
    if (!op.active(t, n)) {
      for (int64_t c = lane; c < C; c += 32) out[c] = ctc::canonicalize_nan(T(0));
      continue;
    }
    for (int64_t c0 = 0; c0 < C; c0 += 32) {
      const int64_t c = c0 + lane;
      int64_t start = 0, stop = 0;
      if (c < C) op.group(n, c, start, stop);
      const bool long_group = c < C && stop - start > kBlock;
      if (c < C && !long_group) {
        const T collected = stop > start ? op.collect_block(t, n, start, stop, 0) : ctc::neg_inf<T>();
        out[c] = ctc::canonicalize_nan(op.grad_value(t, n, c, collected));
      }
      for (unsigned longs = __ballot_sync(0xffffffffu, long_group); longs != 0; longs &= longs - 1) {
        const int from = __ffs(longs) - 1;
        const int64_t lc = c0 + from;
        const int64_t ls = __shfl_sync(0xffffffffu, start, from);
        const int64_t le = __shfl_sync(0xffffffffu, stop, from);
        const int64_t blocks = (le - ls + kBlock - 1) / kBlock;
        typename Op::BlockLevels levels;
        warp_block_sums<T>(
            blocks, lane, [&](int64_t b) { return op.collect_block(t, n, ls, le, b); },
            [&](T sum) { levels.push(sum, 1); });
        if (lane == 0) out[lc] = ctc::canonicalize_nan(op.grad_value(t, n, lc, levels.finish()));
      }
    }
  }
}

}  // namespace

void ctc_loss_backward_kernel(at::Tensor& out, const at::Tensor& grad_out, const at::Tensor& log_probs,
                              const at::Tensor& targets, const CtcPlan& plan, const at::Tensor& neg_log_likelihood,
                              const at::Tensor& log_alpha, int64_t blank, bool zero_infinity) {
  const c10::cuda::CUDAGuard guard(out.device());
  const int64_t batch = plan.batch;
  if (out.numel() == 0 || batch == 0) return;
  plan::record(ctc_loss_backward_kernels(out, log_alpha, targets));
  const at::Tensor meta = at::empty({3 * batch}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
  std::copy(plan.meta.begin(), plan.meta.end(), meta.mutable_data_ptr<int64_t>());
  const at::Tensor meta_dev = meta.to(out.device(), /*non_blocking=*/true);
  at::Tensor log_beta = at::empty(log_alpha.sizes(), log_alpha.options());
  const at::Tensor perm = at::empty({batch, log_alpha.size(2)}, out.options().dtype(at::kInt));
  const at::Tensor group_end = at::empty({batch, out.size(2)}, out.options().dtype(at::kInt));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const int beta_threads =
      static_cast<int>(std::min<int64_t>(kBetaThreads, std::max<int64_t>(32, (2 * plan.max_target_length + 32) / 32 * 32)));
  // Two rows of every position in shared memory: at most 2 x 1,024 doubles (16 KB).
  const int64_t max_positions = 2 * plan.max_target_length + 1;
  const bool rows_kernel = max_positions <= int64_t{beta_threads} * kBetaCells;
  const int64_t warps_per_block = kGradThreads / 32;
  const int64_t grad_blocks =
      std::min<int64_t>((out.size(0) * batch + warps_per_block - 1) / warps_per_block, int64_t{1} << 20);
  AT_DISPATCH_FLOATING_TYPES(log_probs.scalar_type(), "detops_ctc_loss_backward_cuda", [&] {
    AT_DISPATCH_INDEX_TYPES(targets.scalar_type(), "detops_ctc_loss_backward_cuda_targets", [&] {
      const auto op = make_ctc_backward_op<scalar_t, index_t>(out, grad_out, log_probs, targets,
                                                              meta_dev.const_data_ptr<int64_t>(), plan,
                                                              neg_log_likelihood, log_alpha, log_beta, perm,
                                                              group_end, blank, zero_infinity);
      ctc_group_kernel<<<static_cast<unsigned>(batch), kGroupThreads, 0, stream>>>(
          op, perm.mutable_data_ptr<int32_t>(), group_end.mutable_data_ptr<int32_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      if (rows_kernel) {
        ctc_beta_rows_kernel<<<static_cast<unsigned>(batch), beta_threads, 2 * max_positions * sizeof(scalar_t),
                               stream>>>(op);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      } else {
        ctc_beta_kernel<<<static_cast<unsigned>(batch), beta_threads, 0, stream>>>(op);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      }
      ctc_grad_warp_kernel<<<static_cast<unsigned>(grad_blocks), kGradThreads, 0, stream>>>(op);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
}

}  // namespace detops::cuda
