// _ctc_loss_backward front ends (both overloads), same signatures as aten. They run on CPU and CUDA
// tensors; the aten CUDA overrides call them when the mode says so.
#pragma once

#include "ops/plan_record.h"

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

namespace detops {

// The CUDA path's own work (cuda/ctc_loss.cu; a kernel entry, ops/plan_record.h) for a gradient `out` [T, N, C] with
// log_alpha [N, T, S'] and `targets`: the copy of the lengths table, three kernels (label groups, beta,
// gradient) and four device tensors (the table, log_beta, the groups and their ends). The CPU path records it
// in their place.
plan::EngineCall ctc_loss_backward_kernels(const at::Tensor& out, const at::Tensor& log_alpha,
                                           const at::Tensor& targets);

at::Tensor ctc_loss_backward(const at::Tensor& grad, const at::Tensor& log_probs, const at::Tensor& targets,
                             at::IntArrayRef input_lengths, at::IntArrayRef target_lengths,
                             const at::Tensor& neg_log_likelihood, const at::Tensor& log_alpha, int64_t blank,
                             bool zero_infinity);
at::Tensor ctc_loss_backward_tensor(const at::Tensor& grad, const at::Tensor& log_probs, const at::Tensor& targets,
                                    const at::Tensor& input_lengths, const at::Tensor& target_lengths,
                                    const at::Tensor& neg_log_likelihood, const at::Tensor& log_alpha,
                                    int64_t blank, bool zero_infinity);

}  // namespace detops
