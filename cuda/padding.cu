// Padding backwards on CUDA: the computation of ops/padding_op.h, launch glue only (one thread per
// grad_input element, cuda/gather_launch.cuh; a warp per element where it has more than 256 contributions).
// Checks are done by ops/padding.cpp.
#include "cuda/gather_launch.cuh"
#include "ops/padding_op.h"
#include "ops/plan_record.h"

#include <c10/cuda/CUDAGuard.h>

namespace detops::cuda {

namespace {

// An element with more than this many contributions is taken by its whole warp. Below it a thread folds its
// own: where a warp's lanes all hold such elements (the rows along a border), they load side by side, and the
// warp taking them one after another would cost more than it saves.
constexpr int64_t kWarpGatherMin = 8 * kBlock;

// Where some elements have more than kBlock contributions (replicate borders): one thread per grad_input
// element, grid-stride by whole warps. An element with more than kWarpGatherMin contributions is taken by its
// whole warp, one such element after another: lane l folds the element's blocks l, l + 32, ... (block_sum:
// level 0 of the contract's tree, 8 loads in flight at a time), and lane 0 takes the sums up the tree in block
// order (BlockTree). A thread alone walked them one after another: 1,089 loads for a corner of a replicate
// padding of 32 on each side. NB: the same blocks and the same tree above them as gather(), so the same bits
// whichever lanes fold them.
template <typename Op>
__global__ void __launch_bounds__(256, 4) pad_backward_warp_kernel(Op op, int64_t n) {
  using index_t = typename Op::index_type;
  using acc_t = typename Op::acc_t;
  using Sources = typename Op::Sources;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  // The trip count depends on the warp only: every lane reaches the votes.
  for (int64_t base = int64_t{blockIdx.x} * blockDim.x + threadIdx.x - lane; base < n; base += stride) {
    const int64_t i = base + lane;
    index_t p = 0;
    Sources sd{}, sh{}, sw{};
    index_t total = 0;
    if (i < n) {
      op.element(static_cast<index_t>(i), p, sd, sh, sw);
      total = sd.total() * sh.total() * sw.total();
      if (total <= kWarpGatherMin) op.grad_in[i] = op.gather(sd, sh, sw, op.grad_out + p * op.oplane);
    }
    for (unsigned heavy = __ballot_sync(0xffffffffu, total > kWarpGatherMin); heavy != 0; heavy &= heavy - 1) {
      const int from = __ffs(heavy) - 1;
      const auto e = static_cast<index_t>(base + from);
      index_t ep;
      Sources ed, eh, ew;
      op.element(e, ep, ed, eh, ew);
      const auto* plane = op.grad_out + ep * op.oplane;
      const index_t blocks = (ed.total() * eh.total() * ew.total() + kBlock - 1) / kBlock;
      typename Op::BlockTree tree;
      warp_block_sums<acc_t>(
          blocks, lane, [&](index_t b) { return op.block_sum(ed, eh, ew, plane, b); },
          [&](acc_t sum) { tree.push(sum); });
      if (lane == 0) op.grad_in[e] = tree.value();
    }
  }
}

template <typename Op>
void launch_pad_backward(const Op& op, int64_t n) {
  if constexpr (Op::kBoundedSources) {
    launch_gather(op, n);
  } else {
    constexpr int kThreads = 256;
    const auto blocks = static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t{1} << 20));
    pad_backward_warp_kernel<<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(op, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

}  // namespace

void pad_backward_kernel(at::Tensor& grad_in, const at::Tensor& grad_out, const PadDims& dims, bool reflect) {
  const c10::cuda::CUDAGuard guard(grad_in.device());
  const int64_t n = grad_in.numel();
  if (n == 0) return;
  plan::record(plan::for_each_call(n));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_in.scalar_type(), "detops_padding_backward", [&] {
    with_pad_backward_op<scalar_t>(grad_in, grad_out, dims, reflect, /*force_general=*/false,
                                   [&](const auto& op) { launch_pad_backward(op, n); });
  });
}

}  // namespace detops::cuda
