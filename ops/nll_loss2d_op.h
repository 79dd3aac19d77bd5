// nll_loss2d_forward: the per-pixel arithmetic shared by the CPU and CUDA engines (docs/order_contract.md).
//
// Pixel i runs over [N, H, W] in row-major order; its class is t = target[i]. A pixel with t == ignore_index
// is not a contribution. Every other pixel contributes, in source order (ascending i), two columns:
//   column 0: -(input[n, t, h, w] * w[t])   (the loss; w[t] = 1 without weights)
//   column 1: w[t]                          (the total weight)
// Both are summed by the contract's tree over the non-ignored pixels only: the sort-reduce engine with key 0
// for counted pixels and key 1 for ignored ones (never written), D = 2. Then one finishing step: the two sums
// (y0 = 0, step 4 of the contract), mean = loss / total_weight in the accumulate type, each rounded once to
// the input's dtype. reduction 'none' needs no sum: each pixel's -(input * w[t]) is rounded on its own.
#pragma once

#include "ops/contract.h"
#include "ops/ctc_loss_math.h"

#include <cstdint>

namespace detops {

// The reads of one call: contiguous input [N, C, H, W], target [N, H, W] (int64), weight [C] or null.
template <typename scalar_t>
struct NllLoss2dTerms {
  using acc_t = acc_type<scalar_t>;
  const scalar_t* input;
  const int64_t* target;
  const scalar_t* weight;
  int64_t classes;  // C
  int64_t plane;    // H * W
  int64_t ignore_index;

  // The class of pixel i, or -1 where the pixel is ignored. A class outside [0, C) (checked on the host for
  // CPU tensors and in strict mode) asserts on the device and counts as ignored, so nothing is read out of
  // bounds.
  C10_HOST_DEVICE int64_t class_of(int64_t i) const {
    const int64_t t = target[i];
    if (t == ignore_index) return -1;
    const bool ok = t >= 0 && t < classes;
#if defined(__CUDA_ARCH__)
    CUDA_KERNEL_ASSERT(ok && "detops: nll_loss2d_forward target out of range (set DETOPS_STRICT=1 for a host-side error)");
#endif
    return ok ? t : -1;
  }
  C10_HOST_DEVICE acc_t weight_of(int64_t t) const {
    return weight != nullptr ? to_acc(weight[t]) : acc_t(1);
  }
  // -(input * w[t]), one rounded multiplication: stock's -value * cur_weight.
  C10_HOST_DEVICE acc_t loss(int64_t i, int64_t t) const {
    const int64_t n = i / plane;
    const int64_t p = i - n * plane;
    return -mul_rn(to_acc(input[(n * classes + t) * plane + p]), weight_of(t));
  }
};

// reduction 'none': out[i] = the loss of pixel i, 0 where ignored (Engine::for_each). NB: every NaN is
// written as the positive quiet NaN (x86 and CUDA propagate NaNs with different bits).
template <typename scalar_t>
struct NllLoss2dPixelOp {
  NllLoss2dTerms<scalar_t> terms;
  scalar_t* out;  // contiguous [N, H, W]

  C10_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t t = terms.class_of(i);
    out[i] = t < 0 ? scalar_t(0) : round_to<scalar_t>(ctc::canonicalize_nan(terms.loss(i, t)));
  }
};

// reduction 'mean' or 'sum': the sort-reduce op. Key 0: a counted pixel; key 1: an ignored one, whose sums
// are dropped. NB: ignored pixels are keyed, not given zero contributions, so the tree's shape depends on the
// number of counted pixels alone.
template <typename scalar_t>
struct NllLoss2dSumOp {
  using acc_t = acc_type<scalar_t>;
  NllLoss2dTerms<scalar_t> terms;
  acc_t* sums;  // [2]: loss, total weight; zero-filled

  C10_HOST_DEVICE int64_t key(int64_t i) const {
    return terms.class_of(i) < 0 ? 1 : 0;
  }
  C10_HOST_DEVICE acc_t contribution(int64_t i, int64_t c) const {
    const int64_t t = terms.class_of(i);
    if (t < 0) return acc_t(0);
    return c == 0 ? terms.loss(i, t) : terms.weight_of(t);
  }
  C10_HOST_DEVICE void finalize(int64_t k, int64_t c, acc_t total) const {
    if (k == 0) sums[c] = total;
  }
};

// The finishing step, once (Engine::for_each over one element): both sums rounded to the output dtype, the
// mean divided in the accumulate type first. No counted pixel: loss 0, total weight 0, mean 0 / 0 = NaN as
// stock. NB: NaNs written as the positive quiet NaN, as above.
template <typename scalar_t>
struct NllLoss2dFinishOp {
  using acc_t = acc_type<scalar_t>;
  const acc_t* sums;
  scalar_t* output;
  scalar_t* total_weight;
  bool mean;

  C10_HOST_DEVICE void operator()(int64_t) const {
    const acc_t loss = add_rn(acc_t(0), sums[0]);
    const acc_t weight = add_rn(acc_t(0), sums[1]);
    *output = round_to<scalar_t>(ctc::canonicalize_nan(mean ? div_rn(loss, weight) : loss));
    *total_weight = round_to<scalar_t>(ctc::canonicalize_nan(weight));
  }
};

}  // namespace detops

#include "ops/plan_record.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Reduction.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>
#include <c10/core/ScalarType.h>

#include <vector>

namespace detops {

// Over contiguous input, target (int64) and weight (undefined, or contiguous of input's dtype).
template <typename scalar_t>
NllLoss2dTerms<scalar_t> make_nll_loss2d_terms(const at::Tensor& input, const at::Tensor& target,
                                               const at::Tensor& weight, int64_t ignore_index) {
  NllLoss2dTerms<scalar_t> terms;
  terms.input = input.const_data_ptr<scalar_t>();
  terms.target = target.const_data_ptr<int64_t>();
  terms.weight = weight.defined() ? weight.const_data_ptr<scalar_t>() : nullptr;
  terms.classes = input.size(1);
  terms.plane = input.size(2) * input.size(3);
  terms.ignore_index = ignore_index;
  return terms;
}

// The engine calls of nll_loss2d_forward_compute, in order (ops/plan.h): for 'none' the gather over the pixels;
// for the reductions the sort-reduce of every pixel's loss and weight (two keys: counted, ignored), then the
// finishing step. The CPU path, which folds without the engine, records them in their place.
template <typename scalar_t>
std::vector<plan::EngineCall> nll_loss2d_forward_calls(int64_t pixels, int64_t reduction) {
  if (reduction == at::Reduction::None) return {plan::for_each_call(pixels)};
  return {plan::sort_reduce_call(pixels, 2, 2, sizeof(acc_type<scalar_t>)), plan::for_each_call(1)};
}

// output ([N, H, W] for 'none', [] otherwise) and total_weight ([]) of input's dtype, on an engine (cpu::Engine
// or cuda::Engine); input, target and weight as above, target values already validated where the host does.
// Any reduction other than none (0) and mean (1) sums, as stock's kernels read it.
template <typename Engine>
void nll_loss2d_forward_compute(at::Tensor& output, at::Tensor& total_weight, const at::Tensor& input,
                                const at::Tensor& target, const at::Tensor& weight, int64_t reduction,
                                int64_t ignore_index) {
  const int64_t pixels = target.numel();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "detops_nll_loss2d_forward", [&] {
    using acc_t = acc_type<scalar_t>;
    const auto terms = make_nll_loss2d_terms<scalar_t>(input, target, weight, ignore_index);
    const std::vector<plan::EngineCall> calls = nll_loss2d_forward_calls<scalar_t>(pixels, reduction);
    if (reduction == at::Reduction::None) {
      Engine::for_each(NllLoss2dPixelOp<scalar_t>{terms, output.mutable_data_ptr<scalar_t>()}, calls[0].n);
      return;
    }
    at::Tensor sums = at::zeros({2}, input.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
    const NllLoss2dSumOp<scalar_t> op{terms, sums.mutable_data_ptr<acc_t>()};
    Engine::template sort_reduce<acc_t>("nll_loss2d_forward", op, calls[0].n, calls[0].num_keys, calls[0].D, input);
    Engine::for_each(NllLoss2dFinishOp<scalar_t>{sums.const_data_ptr<acc_t>(), output.mutable_data_ptr<scalar_t>(),
                                                 total_weight.mutable_data_ptr<scalar_t>(),
                                                 reduction == at::Reduction::Mean},
                     calls[1].n);
  });
}

// The CPU computation: the same pixels, contributions and tree without the sort. 'mean' and 'sum' walk the
// pixels once in source order, pushing each counted pixel's two columns to the contract's tree, the sequence
// the sort-reduce engine's key-0 segment holds (docs/order_contract.md), then the finishing step. It records
// the engine calls it stands for (ops/plan.h), and in plan-only mode returns then.
template <typename scalar_t>
void nll_loss2d_forward_cpu(at::Tensor& output, at::Tensor& total_weight, const at::Tensor& input,
                            const at::Tensor& target, const at::Tensor& weight, int64_t reduction,
                            int64_t ignore_index) {
  using acc_t = acc_type<scalar_t>;
  bool plan_only = false;
  for (const plan::EngineCall& call : nll_loss2d_forward_calls<scalar_t>(target.numel(), reduction)) {
    plan_only = plan::record(call);
  }
  if (plan_only) return;
  const auto terms = make_nll_loss2d_terms<scalar_t>(input, target, weight, ignore_index);
  const int64_t batch = input.size(0);
  if (reduction == at::Reduction::None) {
    const NllLoss2dPixelOp<scalar_t> op{terms, output.mutable_data_ptr<scalar_t>()};
    at::parallel_for(0, target.numel(), 4096, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) op(i);
    });
    return;
  }
  StreamingTree<acc_t> loss, weights;
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t p = 0; p < terms.plane; ++p) {
      const int64_t t = terms.class_of(n * terms.plane + p);
      if (t < 0) continue;
      const acc_t w = terms.weight_of(t);
      loss.push(-mul_rn(to_acc(terms.input[(n * terms.classes + t) * terms.plane + p]), w));
      weights.push(w);
    }
  }
  const acc_t sums[2] = {loss.empty() ? acc_t(0) : loss.finish(), weights.empty() ? acc_t(0) : weights.finish()};
  NllLoss2dFinishOp<scalar_t>{sums, output.mutable_data_ptr<scalar_t>(), total_weight.mutable_data_ptr<scalar_t>(),
                              reduction == at::Reduction::Mean}(0);
}

namespace cuda {
// nll_loss2d_forward_compute on the CUDA engine (cuda/nll_loss2d.cu).
void nll_loss2d_forward_kernel(at::Tensor& output, at::Tensor& total_weight, const at::Tensor& input,
                               const at::Tensor& target, const at::Tensor& weight, int64_t reduction,
                               int64_t ignore_index);
}  // namespace cuda

}  // namespace detops
