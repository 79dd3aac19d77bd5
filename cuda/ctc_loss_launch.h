// CUDA entry point of _ctc_loss_backward, called by ops/ctc_loss.cpp after its checks.
#pragma once

#include "ops/ctc_loss_op.h"

#include <ATen/core/Tensor.h>

namespace detops::cuda {

// Writes the gradient into `out` ([max_T, batch, num_labels], contiguous). log_probs, log_alpha and
// neg_log_likelihood are contiguous and of out's dtype (float or double).
void ctc_loss_backward_kernel(at::Tensor& out, const at::Tensor& grad_out, const at::Tensor& log_probs,
                              const at::Tensor& targets, const CtcPlan& plan, const at::Tensor& neg_log_likelihood,
                              const at::Tensor& log_alpha, int64_t blank, bool zero_infinity);

}  // namespace detops::cuda
