// bincount with weights: the per-element arithmetic shared by the CPU and CUDA engines
// (docs/order_contract.md). Key = the input value, contribution = its weight, D = 1.
#pragma once

#include "ops/contract.h"

namespace detops {

// weight_t is float or double (stock widens every other weights dtype to double first), so the
// accumulate type is weight_t itself.
template <typename input_t, typename weight_t>
struct BincountOp {
  using acc_t = acc_type<weight_t>;
  weight_t* out;          // [nbins], zero-filled
  const input_t* input;   // contiguous
  const weight_t* weights;  // contiguous
  int64_t nbins;

  // Destination bin of element i, or -1 if out of range (the front end has validated the values).
  C10_HOST_DEVICE int64_t key(int64_t i) const {
    const int64_t k = static_cast<int64_t>(input[i]);
    return (k >= 0 && k < nbins) ? k : -1;
  }
  C10_HOST_DEVICE acc_t contribution(int64_t i, int64_t) const {
    return to_acc(weights[i]);
  }
  // Step 4 of the contract with y0 = 0.
  C10_HOST_DEVICE void finalize(int64_t k, int64_t, acc_t total) const {
    out[k] = round_to<weight_t>(add_rn(acc_t(0), total));
  }
};

}  // namespace detops

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>

namespace detops {

// Over a zero-filled `out` and contiguous `input` and `weights` (weights of out's dtype).
template <typename input_t, typename weight_t>
BincountOp<input_t, weight_t> make_bincount_op(at::Tensor& out, const at::Tensor& input, const at::Tensor& weights) {
  BincountOp<input_t, weight_t> op;
  op.out = out.data_ptr<weight_t>();
  op.input = input.const_data_ptr<input_t>();
  op.weights = weights.const_data_ptr<weight_t>();
  op.nbins = out.numel();
  return op;
}

// out (zero-filled [nbins] of weights' dtype, float or double) gets the weighted counts on an engine
// (cpu::Engine or cuda::Engine); self and weights are contiguous, self's values already validated.
template <typename Engine>
void bincount_compute(at::Tensor& out, const at::Tensor& self, const at::Tensor& weights) {
  if (self.numel() == 0 || out.numel() == 0) return;
  AT_DISPATCH_FLOATING_TYPES(out.scalar_type(), "detops_bincount", [&] {
    using weight_t = scalar_t;
    AT_DISPATCH_INTEGRAL_TYPES(self.scalar_type(), "detops_bincount_input", [&] {
      const auto op = make_bincount_op<scalar_t, weight_t>(out, self, weights);
      Engine::template sort_reduce<acc_type<weight_t>>("bincount", op, self.numel(), op.nbins, 1, out);
    });
  });
}

namespace cuda {
// bincount_compute on the CUDA engine (cuda/bincount.cu).
void bincount_kernel(at::Tensor& out, const at::Tensor& self, const at::Tensor& weights);
}  // namespace cuda

}  // namespace detops
