// _ctc_loss_backward (IntArrayRef and .Tensor overloads): checks, routing and the CPU path. The CUDA
// path is cuda/ctc_loss.cu; both run CtcBackwardOp (ops/ctc_loss_op.h), so they give the same bits
// (docs/order_contract.md, "Log-add-exp").
#include "ops/ctc_loss.h"

#include "ops/common.h"
#include "ops/ctc_loss_op.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/_to_copy.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>

#include <algorithm>
#include <string>
#include <vector>

namespace detops {
namespace {

constexpr const char* kOp = "_ctc_loss_backward";

// Stock's argument checks (aten LossCTC.cpp, ctc_loss_allocate_outputs), plus the ones stock's backward
// leaves out and that keep every read in bounds: shapes of grad, neg_log_likelihood and log_alpha, dtypes
// and devices.
CtcPlan check_ctc_loss_backward(const at::Tensor& grad, const at::Tensor& log_probs, const at::Tensor& targets,
                                at::IntArrayRef input_lengths, at::IntArrayRef target_lengths,
                                const at::Tensor& nll, const at::Tensor& log_alpha, int64_t blank) {
  TORCH_CHECK(log_probs.dim() == 3, kOp, "(): expected log_probs of 3 dims (input_length, batch, num_labels), got ",
              log_probs.dim());
  const auto dtype = log_probs.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kDouble, kOp,
              "(): log_probs must be float or double (as stock's kernels), got ", dtype);
  TORCH_CHECK(grad.scalar_type() == dtype && nll.scalar_type() == dtype && log_alpha.scalar_type() == dtype, kOp,
              "(): grad (", grad.scalar_type(), "), neg_log_likelihood (", nll.scalar_type(), ") and log_alpha (",
              log_alpha.scalar_type(), ") must have log_probs' dtype ", dtype);
  TORCH_CHECK(targets.scalar_type() == at::kLong || targets.scalar_type() == at::kInt, kOp,
              "(): targets must be int32 or int64, got ", targets.scalar_type());
  TORCH_CHECK(targets.dim() == 1 || targets.dim() == 2, kOp, "(): targets must have 1 or 2 dims, got ",
              targets.dim());
  check_same_device(kOp, log_probs, grad, "grad");
  check_same_device(kOp, log_probs, targets, "targets");
  check_same_device(kOp, log_probs, nll, "neg_log_likelihood");
  check_same_device(kOp, log_probs, log_alpha, "log_alpha");

  const int64_t max_T = log_probs.size(0);
  const int64_t batch = log_probs.size(1);
  const int64_t num_labels = log_probs.size(2);
  TORCH_CHECK(0 <= blank && blank < num_labels, kOp, "(): blank must be in label range [0, ", num_labels,
              "), got ", blank);
  TORCH_CHECK(static_cast<int64_t>(input_lengths.size()) == batch, kOp,
              "(): input_lengths must be of size batch_size (", batch, "), got ", input_lengths.size());
  TORCH_CHECK(static_cast<int64_t>(target_lengths.size()) == batch, kOp,
              "(): target_lengths must be of size batch_size (", batch, "), got ", target_lengths.size());
  TORCH_CHECK(grad.dim() == 1 && grad.size(0) == batch, kOp, "(): grad must have shape [", batch, "], got ",
              grad.sizes());
  TORCH_CHECK(nll.dim() == 1 && nll.size(0) == batch, kOp, "(): neg_log_likelihood must have shape [", batch,
              "], got ", nll.sizes());

  CtcPlan plan;
  plan.batch = batch;
  plan.meta.resize(3 * batch);
  int64_t pos = 0;
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(input_lengths[b] >= 0 && input_lengths[b] <= max_T, kOp, "(): input_lengths[", b, "] = ",
                input_lengths[b], " is outside [0, ", max_T, "]");
    TORCH_CHECK(target_lengths[b] >= 0, kOp, "(): target_lengths[", b, "] = ", target_lengths[b],
                " is negative");
    plan.meta[b] = input_lengths[b];
    plan.meta[batch + b] = target_lengths[b];
    plan.max_target_length = std::max(plan.max_target_length, target_lengths[b]);
    if (targets.dim() == 1) {
      // NB: stock's addressing (offset in elements, then stride(0) per element), so that the labels read
      // here are the ones stock's forward read when it made log_alpha.
      plan.meta[2 * batch + b] = pos;
      pos += target_lengths[b];
    } else {
      plan.meta[2 * batch + b] = b * targets.stride(0);
    }
  }
  if (targets.dim() == 1) {
    TORCH_CHECK(targets.size(0) >= pos, kOp, "(): concatenated targets have ", targets.size(0),
                " elements, but target_lengths sum to ", pos);
    plan.tg_stride = targets.stride(0);
  } else {
    TORCH_CHECK(targets.size(0) == batch, kOp, "(): targets must have batch_size (", batch, ") rows, got ",
                targets.size(0));
    TORCH_CHECK(targets.size(1) >= plan.max_target_length, kOp, "(): targets must have at least ",
                plan.max_target_length, " columns (the longest target), got ", targets.size(1));
    plan.tg_stride = targets.stride(1);
  }
  TORCH_CHECK(log_alpha.dim() == 3 && log_alpha.size(0) == batch && log_alpha.size(1) == max_T &&
                  log_alpha.size(2) >= 2 * plan.max_target_length + 1,
              kOp, "(): log_alpha must have shape [", batch, ", ", max_T, ", >= ", 2 * plan.max_target_length + 1,
              "] (from _ctc_loss), got ", log_alpha.sizes());
  return plan;
}

// Each used target must lie in [0, num_labels) (common.h's check, per batch element). NB: reads the
// elements the kernels read, with stock's addressing (offset + j * stride), from a host copy with the same
// strides.
void check_target_values(const at::Tensor& targets, const CtcPlan& plan, int64_t num_labels) {
  if (!validates_on_host(targets)) return;
  at::Tensor host = targets;
  if (!targets.is_cpu()) {
    host = at::empty_strided(targets.sizes(), targets.strides(), targets.options().device(at::kCPU));
    host.copy_(targets);
  }
  for (int64_t b = 0; b < plan.batch; ++b) {
    const at::Tensor used = host.as_strided({plan.meta[plan.batch + b]}, {plan.tg_stride},
                                            host.storage_offset() + plan.meta[2 * plan.batch + b]);
    check_index_values(kOp, "target", used, 0, num_labels,
                       "in batch element " + std::to_string(b) + " of the label range [0, " +
                           std::to_string(num_labels) + ")");
  }
}

// Per batch element, a stable counting sort of the extended positions by label.
template <typename Op>
void group_by_label(const Op& op, int64_t n, int32_t* perm, int32_t* group_end) {
  const int64_t positions = 2 * op.target_lengths[n] + 1;
  int32_t* cursor = group_end + n * op.num_labels;
  std::fill(cursor, cursor + op.num_labels, 0);
  for (int64_t s = 0; s < positions; ++s) ++cursor[op.label(n, s)];
  int32_t run = 0;
  for (int64_t c = 0; c < op.num_labels; ++c) {
    const int32_t count = cursor[c];
    cursor[c] = run;
    run += count;
  }
  // Afterwards cursor[c] is the end of label c's group.
  for (int64_t s = 0; s < positions; ++s) perm[n * op.S + cursor[op.label(n, s)]++] = static_cast<int32_t>(s);
}

}  // namespace

plan::EngineCall ctc_loss_backward_kernels(const at::Tensor& out, const at::Tensor& log_alpha,
                                           const at::Tensor& targets) {
  const int64_t batch = out.size(1);
  const int64_t es = log_alpha.element_size();
  const int64_t table = 3 * batch * 8;
  const int64_t groups = batch * log_alpha.size(2) * 4;
  const int64_t group_ends = batch * out.size(2) * 4;
  const int64_t cells = log_alpha.numel() * es;
  // Traffic: the table; targets read, groups written; beta reads log_probs and writes log_beta per cell; the
  // gradient reads log_probs and writes out per element, and reads log_alpha and log_beta per cell.
  const int64_t moved = table + targets.numel() * targets.element_size() + groups + group_ends + 2 * cells +
                        2 * out.numel() * es + 2 * cells;
  return plan::kernel_call(/*launches=*/3, /*copies=*/1, /*allocations=*/4, table + cells + groups + group_ends,
                           moved);
}

// Cells [0, side) of a beta row from the row below (side + 2 <= the row's positions): row[s] = beta_value of
// below[s], below[s + 1] where m1[s], below[s + 2] where m2[s] (else -inf) and lp[s]; m1 and m2 are 0 or 1. The
// loads are unconditional and the selections branch-free, so the loop vectorises.
template <typename Op, typename T, typename Mask>
void beta_cells_side_by_side(T* __restrict row, const T* __restrict below, const Mask* __restrict m1,
                             const Mask* __restrict m2, const T* __restrict lp, int64_t side) {
  const Mask neg_inf = ctc::to_bits(ctc::neg_inf<T>());
  for (int64_t s = 0; s < side; ++s) {
    // NB: the selections as bit masks: as branches GCC threads the -inf through log_sum_exp3 and then cannot
    // vectorise; the value selected is the same.
    const Mask keep1 = Mask(0) - m1[s];
    const Mask keep2 = Mask(0) - m2[s];
    const T l2 = ctc::from_bits<T>((ctc::to_bits(below[s + 1]) & keep1) | (neg_inf & ~keep1));
    const T l3 = ctc::from_bits<T>((ctc::to_bits(below[s + 2]) & keep2) | (neg_inf & ~keep2));
    row[s] = Op::beta_value(below[s], l2, l3, lp[s]);
  }
}

void ctc_loss_backward_cpu(at::Tensor& out, const at::Tensor& grad, const at::Tensor& log_probs,
                           const at::Tensor& targets, const CtcPlan& plan, const at::Tensor& nll,
                           const at::Tensor& log_alpha, int64_t blank, bool zero_infinity, CtcGradPath path) {
  const int64_t batch = log_probs.size(1);
  at::Tensor log_beta = at::empty(log_alpha.sizes(), log_alpha.options());
  const at::Tensor perm = at::empty({batch, log_alpha.size(2)}, log_probs.options().dtype(at::kInt));
  const at::Tensor group_end = at::empty({batch, log_probs.size(2)}, log_probs.options().dtype(at::kInt));
  AT_DISPATCH_FLOATING_TYPES(log_probs.scalar_type(), "detops_ctc_loss_backward_cpu", [&] {
    AT_DISPATCH_INDEX_TYPES(targets.scalar_type(), "detops_ctc_loss_backward_cpu_targets", [&] {
      const auto op = make_ctc_backward_op<scalar_t, index_t>(out, grad, log_probs, targets, plan.meta.data(), plan,
                                                              nll, log_alpha, log_beta, perm, group_end, blank,
                                                              zero_infinity);
      int32_t* perm_data = perm.mutable_data_ptr<int32_t>();
      int32_t* end_data = group_end.mutable_data_ptr<int32_t>();
      // NB: every value below is computed by one fixed formula; the split over threads only decides who.
      using Op = CtcBackwardOp<scalar_t, index_t>;
      using Mask = typename ctc::FloatBits<scalar_t>::U;  // a selection as wide as the values, so the loop vectorises
      at::parallel_for(0, batch, 1, [&](int64_t begin, int64_t end) {
        std::vector<typename Op::BetaFacts> facts;
        std::vector<Mask> below1, below2;
        std::vector<scalar_t> lp_cur;
        for (int64_t n = begin; n < end; ++n) {
          group_by_label(op, n, perm_data, end_data);
          const int64_t input_length = op.input_lengths[n];
          if (input_length > 0) {
            // The facts of each position once, then every row from the one below: as the CUDA kernel does.
            const int64_t positions = 2 * op.target_lengths[n] + 1;
            facts.resize(static_cast<size_t>(positions));
            below1.resize(static_cast<size_t>(positions));
            below2.resize(static_cast<size_t>(positions));
            lp_cur.resize(static_cast<size_t>(positions));
            for (int64_t s = 0; s < positions; ++s) {
              facts[s] = op.beta_facts(n, s);
              below1[s] = facts[s].below1;
              below2[s] = facts[s].below2;
              op.beta_last(n, s);
            }
            // The cells whose s + 2 is in the row side by side (the same beta_value as beta_from; the row below's
            // s + 1 and s + 2 read unconditionally, then selected), the last two by beta_from.
            const int64_t side = std::max<int64_t>(positions - 2, 0);
            for (int64_t t = input_length - 2; t >= 0; --t) {
              if (path == CtcGradPath::kElements) {  // cell by cell, as the CUDA kernel's formula
                for (int64_t s = 0; s < positions; ++s) op.beta_cell(n, t, s);
                continue;
              }
              const scalar_t* __restrict below = op.log_beta + op.ab_index(n, t + 1, 0);
              scalar_t* __restrict row = op.log_beta + op.ab_index(n, t, 0);
              for (int64_t s = 0; s < positions; ++s) lp_cur[s] = op.lp(t, n, facts[s].label);
              const Mask* m1 = below1.data();
              const Mask* m2 = below2.data();
              const scalar_t* lp = lp_cur.data();
              beta_cells_side_by_side<Op>(row, below, m1, m2, lp, side);
              for (int64_t s = side; s < positions; ++s) row[s] = op.beta_from(facts[s], below, s, lp[s]);
            }
          }
          if (path == CtcGradPath::kLanes) ctc_grad_lanes_cpu(op, n);
          if (path == CtcGradPath::kBlocks) {
            for (int64_t t = 0; t < op.max_T; ++t) ctc_grad_blocks_cpu(op, t, n);
          }
        }
      });
      if (path == CtcGradPath::kElements) {
        at::parallel_for(0, out.numel(), 4096, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) op.grad_at(i);
        });
      }
    });
  });
}

at::Tensor ctc_loss_backward(const at::Tensor& grad, const at::Tensor& log_probs, const at::Tensor& targets,
                             at::IntArrayRef input_lengths, at::IntArrayRef target_lengths,
                             const at::Tensor& neg_log_likelihood, const at::Tensor& log_alpha, int64_t blank,
                             bool zero_infinity) {
  const CtcPlan plan = check_ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths,
                                               neg_log_likelihood, log_alpha, blank);
  check_target_values(targets, plan, log_probs.size(2));
  at::Tensor out = at::empty(log_probs.sizes(), log_probs.options().memory_format(at::MemoryFormat::Contiguous));
  if (out.numel() == 0) return out;
  const at::Tensor lp = log_probs.contiguous();
  const at::Tensor la = log_alpha.contiguous();
  const at::Tensor nll = neg_log_likelihood.contiguous();
  if (out.is_cuda()) {
    cuda::ctc_loss_backward_kernel(out, grad, lp, targets, plan, nll, la, blank, zero_infinity);
  } else if (!plan::record(ctc_loss_backward_kernels(out, la, targets))) {
    // NB: the CPU path records the CUDA path's kernels it stands for (ops/plan.h); in plan-only mode that is all.
    ctc_loss_backward_cpu(out, grad, lp, targets, plan, nll, la, blank, zero_infinity);
  }
  return out;
}

at::Tensor ctc_loss_backward_tensor(const at::Tensor& grad, const at::Tensor& log_probs, const at::Tensor& targets,
                                    const at::Tensor& input_lengths, const at::Tensor& target_lengths,
                                    const at::Tensor& neg_log_likelihood, const at::Tensor& log_alpha,
                                    int64_t blank, bool zero_infinity) {
  TORCH_CHECK(at::isIntegralType(input_lengths.scalar_type(), /*includeBool=*/false), kOp,
              "(): input_lengths must be integral, got ", input_lengths.scalar_type());
  TORCH_CHECK(at::isIntegralType(target_lengths.scalar_type(), /*includeBool=*/false), kOp,
              "(): target_lengths must be integral, got ", target_lengths.scalar_type());
  const at::Tensor il = at::_to_copy(input_lengths, input_lengths.options().dtype(at::kLong).device(at::kCPU)).contiguous();
  const at::Tensor tl = at::_to_copy(target_lengths, target_lengths.options().dtype(at::kLong).device(at::kCPU)).contiguous();
  return ctc_loss_backward(grad, log_probs, targets, at::IntArrayRef(il.const_data_ptr<int64_t>(), il.numel()),
                           at::IntArrayRef(tl.const_data_ptr<int64_t>(), tl.numel()), neg_log_likelihood,
                           log_alpha, blank, zero_infinity);
}

}  // namespace detops
