// _ctc_loss_backward: the per-element arithmetic shared by the CPU path (ops/ctc_loss.cpp) and the CUDA
// kernels (cuda/ctc_loss.cu). Graves et al. 2006: beta recursion (eq. 10, 11), then eq. 16 with the
// collection over target positions done by the order contract with log-add-exp as the combine
// (docs/order_contract.md, "Log-add-exp").
#pragma once

#include "ops/contract.h"
#include "ops/ctc_loss_math.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace detops {

template <typename scalar_t, typename target_t>
struct CtcBackwardOp {
  using T = scalar_t;  // float or double: computed in its own type, as stock does
  const T* log_probs;           // [max_T, batch, num_labels], contiguous
  const target_t* targets;      // element j of batch element n at tg_offsets[n] + j * tg_stride
  const int64_t* input_lengths;   // [batch]
  const int64_t* target_lengths;  // [batch]
  const int64_t* tg_offsets;      // [batch]
  int64_t tg_stride;
  const T* log_alpha;  // [batch, max_T, S], contiguous
  T* log_beta;         // [batch, max_T, S], contiguous; rows t < input_length, columns s <= 2L written
  const T* nll;        // [batch], contiguous
  const T* grad_out;
  int64_t grad_out_stride;
  // Per batch element n: perm[n * S + k] lists the extended positions s grouped by label l'(s), ascending
  // s within each group; label c's group is perm[start, group_end[n * num_labels + c]) with start the end
  // of label c - 1's group (0 for c = 0).
  const int32_t* perm;
  const int32_t* group_end;
  T* grad;  // [max_T, batch, num_labels], contiguous
  int64_t max_T;
  int64_t batch;
  int64_t num_labels;
  int64_t S;  // log_alpha.size(2) >= 2 * max target length + 1
  int64_t blank;
  bool zero_infinity;

  // l'(s) of the extended label sequence: blank at even s, target (s - 1) / 2 at odd s. A label outside
  // [0, num_labels) (checked on the host for CPU tensors and in strict mode) asserts on the device and
  // is read as blank, so nothing is read or written out of bounds.
  C10_HOST_DEVICE int64_t label(int64_t n, int64_t s) const {
    if (s % 2 == 0) return blank;
    const int64_t c = static_cast<int64_t>(targets[tg_offsets[n] + tg_stride * (s / 2)]);
    const bool ok = c >= 0 && c < num_labels;
#if defined(__CUDA_ARCH__)
    CUDA_KERNEL_ASSERT(ok && "detops: ctc_loss target out of range (set DETOPS_STRICT=1 for a host-side error)");
#endif
    return ok ? c : blank;
  }
  C10_HOST_DEVICE T lp(int64_t t, int64_t n, int64_t c) const {
    return log_probs[(t * batch + n) * num_labels + c];
  }
  C10_HOST_DEVICE int64_t ab_index(int64_t n, int64_t t, int64_t s) const {
    return (n * max_T + t) * S + s;
  }

  // The initialisation before eq. (10), at t = input_length - 1 (> = 0), for s in [0, 2L].
  C10_HOST_DEVICE T beta_last_value(int64_t n, int64_t s) const {
    const int64_t L = target_lengths[n];
    const int64_t t = input_lengths[n] - 1;
    T v = ctc::neg_inf<T>();
    if (s == 2 * L) {
      v = lp(t, n, blank);
    } else if (s == 2 * L - 1) {
      v = lp(t, n, label(n, s));
    }
    return v;
  }
  C10_HOST_DEVICE void beta_last(int64_t n, int64_t s) const {
    log_beta[ab_index(n, input_lengths[n] - 1, s)] = beta_last_value(n, s);
  }

  // What every row of the beta recursion reads of extended position s: its label l'(s), and whether cells s + 1
  // and s + 2 of the row below enter its sum (eq. 10 / 11).
  struct BetaFacts {
    int64_t label;
    bool below1;
    bool below2;
  };
  C10_HOST_DEVICE BetaFacts beta_facts(int64_t n, int64_t s) const {
    const int64_t L = target_lengths[n];
    const int64_t cur = label(n, s);
    return {cur, s < 2 * L, s < 2 * L - 1 && label(n, s + 2) != cur};
  }
  // Eq. (10) / (11) for cell s of a row t < input_length - 1: from the row below (t + 1), its facts and
  // lp(t, n, l'(s)); stock's operation order.
  C10_HOST_DEVICE static T beta_from(const BetaFacts& f, const T* below, int64_t s, T lp_cur) {
    const T l1 = below[s];
    const T l2 = f.below1 ? below[s + 1] : ctc::neg_inf<T>();
    const T l3 = f.below2 ? below[s + 2] : ctc::neg_inf<T>();
    return beta_value(l1, l2, l3, lp_cur);
  }
  // The cell from the three cells of the row below that enter it (-inf for one that does not).
  C10_HOST_DEVICE static T beta_value(T l1, T l2, T l3, T lp_cur) {
    return add_rn(ctc::log_sum_exp3(l1, l2, l3), lp_cur);
  }
  C10_HOST_DEVICE void beta_cell(int64_t n, int64_t t, int64_t s) const {
    const BetaFacts f = beta_facts(n, s);
    log_beta[ab_index(n, t, s)] = beta_from(f, log_beta + ab_index(n, t + 1, 0), s, lp(t, n, f.label));
  }

  // True where row t of batch element n has a gradient (else it is 0).
  C10_HOST_DEVICE bool active(int64_t t, int64_t n) const {
    return t < input_lengths[n] && !(zero_infinity && nll[n] == ctc::pos_inf<T>());
  }
  // Label c's group of extended positions of batch element n: perm[n * S + k] for k in [start, stop).
  C10_HOST_DEVICE void group(int64_t n, int64_t c, int64_t& start, int64_t& stop) const {
    const int64_t row = n * num_labels;
    start = c == 0 ? 0 : group_end[row + c - 1];
    stop = group_end[row + c];
  }
  // Contribution k of the collection at (t, n): log_alpha + log_beta at the k-th grouped position.
  C10_HOST_DEVICE T contribution(int64_t t, int64_t n, int64_t k) const {
    const int64_t a = ab_index(n, t, perm[n * S + k]);
    return add_rn(log_alpha[a], log_beta[a]);
  }
  // Eq. (16) for an active (t, n, c) from its collected log-sum.
  C10_HOST_DEVICE T grad_value(int64_t t, int64_t n, int64_t c, T collected) const {
    const T l = lp(t, n, c);
    const T sub = ctc::exp(add_rn(add_rn(collected, nll[n]), -l));
    return mul_rn(add_rn(ctc::exp(l), -sub), grad_out[n * grad_out_stride]);
  }

  // Block b of the collection at (t, n) over the group [start, stop): its kBlock contributions from the b-th on
  // (fewer in the last), level 0 of the contract's tree, a left fold with log-add-exp.
  C10_HOST_DEVICE T collect_block(int64_t t, int64_t n, int64_t start, int64_t stop, int64_t b) const {
    const int64_t first = start + b * kBlock;
    const int count = static_cast<int>(stop - first < kBlock ? stop - first : kBlock);
    return fold_block<T>([&](int j) { return contribution(t, n, first + j); }, count, ctc::LogAddExp());
  }
  // The levels above a group's blocks: push(sum, 1) every block's sum in block order, then finish(). With
  // collect_block, the bits of grad_at's StreamingTree over the contributions.
  using BlockLevels = StreamingTree<T, 7, ctc::LogAddExp>;

  // Output element i of grad ([max_T, batch, num_labels] row-major): eq. (16),
  // (exp(lp) - exp(collected + nll - lp)) * grad_out, where collected is the log-sum over the positions s
  // with l'(s) == c of log_alpha + log_beta, folded in ascending s by the contract's tree (-inf if none).
  C10_HOST_DEVICE void grad_at(int64_t i) const {
    const int64_t c = i % num_labels;
    const int64_t tn = i / num_labels;
    const int64_t n = tn % batch;
    const int64_t t = tn / batch;
    T v = T(0);
    if (active(t, n)) {
      int64_t start, stop;
      group(n, c, start, stop);
      T collected = ctc::neg_inf<T>();
      // NB: contributions in ascending s, the fixed tree, log-add-exp as the combine. Up to kBlock of them
      // the tree is one fold_block (no scratch); beyond, StreamingTree gives tree_reduce's bits.
      if (stop - start > kBlock) {
        StreamingTree<T, 7, ctc::LogAddExp> tree;
        for (int64_t k = start; k < stop; ++k) tree.push(contribution(t, n, k));
        collected = tree.finish();
      } else if (stop > start) {
        collected = collect_block(t, n, start, stop, 0);
      }
      v = grad_value(t, n, c, collected);
    }
    grad[i] = ctc::canonicalize_nan(v);
  }
};

}  // namespace detops

#include <ATen/core/Tensor.h>

namespace detops {

// What the front end validated: per batch element the lengths and the offset of its targets, in one
// int64 array [input_lengths | target_lengths | tg_offsets] of 3 * batch entries.
struct CtcPlan {
  std::vector<int64_t> meta;
  int64_t batch = 0;
  int64_t tg_stride = 0;
  int64_t max_target_length = 0;
};

// Builds the op over contiguous log_probs, log_alpha, neg_log_likelihood and the scratch tensors; `meta`
// points at the plan's array on the tensors' device.
template <typename scalar_t, typename target_t>
CtcBackwardOp<scalar_t, target_t> make_ctc_backward_op(at::Tensor& out, const at::Tensor& grad_out,
                                                       const at::Tensor& log_probs, const at::Tensor& targets,
                                                       const int64_t* meta, const CtcPlan& plan,
                                                       const at::Tensor& nll, const at::Tensor& log_alpha,
                                                       at::Tensor& log_beta, const at::Tensor& perm,
                                                       const at::Tensor& group_end, int64_t blank,
                                                       bool zero_infinity) {
  CtcBackwardOp<scalar_t, target_t> op;
  op.log_probs = log_probs.const_data_ptr<scalar_t>();
  op.targets = targets.const_data_ptr<target_t>();
  op.input_lengths = meta;
  op.target_lengths = meta + plan.batch;
  op.tg_offsets = meta + 2 * plan.batch;
  op.tg_stride = plan.tg_stride;
  op.log_alpha = log_alpha.const_data_ptr<scalar_t>();
  op.log_beta = log_beta.mutable_data_ptr<scalar_t>();
  op.nll = nll.const_data_ptr<scalar_t>();
  op.grad_out = grad_out.const_data_ptr<scalar_t>();
  op.grad_out_stride = grad_out.stride(0);
  op.perm = perm.const_data_ptr<int32_t>();
  op.group_end = group_end.const_data_ptr<int32_t>();
  op.grad = out.mutable_data_ptr<scalar_t>();
  op.max_T = log_probs.size(0);
  op.batch = log_probs.size(1);
  op.num_labels = log_probs.size(2);
  op.S = log_alpha.size(2);
  op.blank = blank;
  op.zero_infinity = zero_infinity;
  return op;
}

// The CPU's gradient: per batch element n and label c, rows t taken kLanes at a time, their collections
// folded side by side (the same group of positions, so the same count and the same tree for every row;
// up to kBlock * kBlock contributions the two-level tree with shared counters, longer groups row by row).
// NB: each row's sequence of operations is grad_at's, so the bits are (tests/cpp/test_cpu_paths.cpp); the
// lanes only give the processor independent log-add-exp chains to overlap.
template <typename scalar_t, typename target_t>
void ctc_grad_lanes_cpu(const CtcBackwardOp<scalar_t, target_t>& op, int64_t n) {
  using T = scalar_t;
  constexpr int64_t kLanes = 8;
  const ctc::LogAddExp combine;
  const int64_t C = op.num_labels;
  for (int64_t t = 0; t < op.max_T; ++t) {
    if (op.active(t, n)) continue;
    for (int64_t c = 0; c < C; ++c) op.grad[(t * op.batch + n) * C + c] = T(0);
  }
  const bool any = op.active(0, n);
  const int64_t rows = any ? op.input_lengths[n] : 0;
  for (int64_t c = 0; c < C; ++c) {
    int64_t start, stop;
    op.group(n, c, start, stop);
    const int64_t count = stop - start;
    for (int64_t t0 = 0; t0 < rows; t0 += kLanes) {
      const int64_t lanes = std::min(kLanes, rows - t0);
      T collected[kLanes];
      if (count == 0) {
        for (int64_t l = 0; l < lanes; ++l) collected[l] = ctc::neg_inf<T>();
      } else if (count > kBlock * kBlock) {
        for (int64_t l = 0; l < lanes; ++l) {
          StreamingTree<T, 7, ctc::LogAddExp> tree;
          for (int64_t k = start; k < stop; ++k) tree.push(op.contribution(t0 + l, n, k));
          collected[l] = tree.finish();
        }
      } else {
        T block[kLanes], top[kLanes];
        int in_block = 0;
        bool any_top = false;
        for (int64_t k = start; k < stop; ++k) {
          if (in_block == 0) {
            for (int64_t l = 0; l < lanes; ++l) block[l] = op.contribution(t0 + l, n, k);
          } else {
            for (int64_t l = 0; l < lanes; ++l) block[l] = combine(block[l], op.contribution(t0 + l, n, k));
          }
          if (++in_block == kBlock) {
            for (int64_t l = 0; l < lanes; ++l) top[l] = any_top ? combine(top[l], block[l]) : block[l];
            any_top = true;
            in_block = 0;
          }
        }
        for (int64_t l = 0; l < lanes; ++l) {
          collected[l] = in_block == 0 ? top[l] : (any_top ? combine(top[l], block[l]) : block[l]);
        }
      }
      for (int64_t l = 0; l < lanes; ++l) {
        const int64_t t = t0 + l;
        op.grad[(t * op.batch + n) * C + c] = ctc::canonicalize_nan(op.grad_value(t, n, c, collected[l]));
      }
    }
  }
}

// Row (t, n) of the gradient the way the CUDA warp kernel (ctc_grad_warp_kernel) computes it, on one thread: each
// label's collection from its blocks (collect_block; a group of at most kBlock positions is its one block), the
// blocks folded from the last to the first, their sums then taken up the tree in block order (BlockLevels).
// NB: the same blocks and the same tree as grad_at, whoever folds each block when, so the same bits.
template <typename scalar_t, typename target_t>
void ctc_grad_blocks_cpu(const CtcBackwardOp<scalar_t, target_t>& op, int64_t t, int64_t n) {
  using T = scalar_t;
  T* out = op.grad + (t * op.batch + n) * op.num_labels;
  std::vector<T> sums;
  for (int64_t c = 0; c < op.num_labels; ++c) {
    if (!op.active(t, n)) {
      out[c] = ctc::canonicalize_nan(T(0));
      continue;
    }
    int64_t start, stop;
    op.group(n, c, start, stop);
    T collected = ctc::neg_inf<T>();
    if (stop - start > kBlock) {
      sums.assign(static_cast<size_t>((stop - start + kBlock - 1) / kBlock), T(0));
      for (int64_t b = static_cast<int64_t>(sums.size()) - 1; b >= 0; --b) {
        sums[b] = op.collect_block(t, n, start, stop, b);
      }
      typename CtcBackwardOp<scalar_t, target_t>::BlockLevels levels;
      for (const T sum : sums) levels.push(sum, 1);
      collected = levels.finish();
    } else if (stop > start) {
      collected = op.collect_block(t, n, start, stop, 0);
    }
    out[c] = ctc::canonicalize_nan(op.grad_value(t, n, c, collected));
  }
}

// How the CPU path (ops/ctc_loss.cpp) computes the gradient, with the same bits each way: rows as lanes
// (ctc_grad_lanes_cpu, the default), element by element (grad_at, and the beta recursion cell by cell by
// beta_cell instead of a row's cells side by side), or by the CUDA warp kernel's blocks (ctc_grad_blocks_cpu).
enum class CtcGradPath { kLanes, kElements, kBlocks };

// The CPU path: writes the gradient into `out` as the CUDA path does.
void ctc_loss_backward_cpu(at::Tensor& out, const at::Tensor& grad, const at::Tensor& log_probs,
                           const at::Tensor& targets, const CtcPlan& plan, const at::Tensor& nll,
                           const at::Tensor& log_alpha, int64_t blank, bool zero_infinity,
                           CtcGradPath path = CtcGradPath::kLanes);

namespace cuda {
// The CUDA path (cuda/ctc_loss.cu): writes the gradient into `out` ([max_T, batch, num_labels],
// contiguous). log_probs, log_alpha and neg_log_likelihood are contiguous and of out's dtype.
void ctc_loss_backward_kernel(at::Tensor& out, const at::Tensor& grad_out, const at::Tensor& log_probs,
                              const at::Tensor& targets, const CtcPlan& plan, const at::Tensor& neg_log_likelihood,
                              const at::Tensor& log_alpha, int64_t blank, bool zero_infinity);
}  // namespace cuda

}  // namespace detops
