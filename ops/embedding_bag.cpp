// _embedding_bag_dense_backward: checks, routing and the CPU path. The CUDA path is cuda/embedding_bag.cu;
// both run the sort-reduce engine over EmbeddingBagSumOp / EmbeddingBagMaxOp (docs/order_contract.md).
#include "ops/embedding_bag.h"

#include "ops/common.h"
#include "ops/embedding_bag_op.h"
#include "ops/sort_reduce_cpu.h"

#include <ATen/ops/zeros.h>

namespace detops {
namespace {

constexpr const char* kOp = "_embedding_bag_dense_backward";

enum Mode : int64_t { kSum = 0, kMean = 1, kMax = 2 };

bool is_index_type(at::ScalarType t) {
  return t == at::kLong || t == at::kInt;
}

// The index tensors in the dtype of `indices`, contiguous (a no-op for the tensors aten's forward saves).
at::Tensor as_index(const at::Tensor& t, at::ScalarType type) {
  return (t.scalar_type() == type ? t : t.to(type)).contiguous();
}

at::Tensor sum_mean_backward(const at::Tensor& grad, const at::Tensor& indices_in, const at::Tensor& offset2bag_in,
                             const at::Tensor& bag_size_in, int64_t num_weights, bool scale_grad_by_freq,
                             bool mean, const at::Tensor& per_sample_weights_in, int64_t padding_idx) {
  const int64_t num_bags = grad.size(0);
  const int64_t n = indices_in.numel();
  TORCH_CHECK(offset2bag_in.numel() == n, kOp, "(): expected offset2bag with one entry per index (", n,
              "), but got ", offset2bag_in.numel());
  if (mean) {
    TORCH_CHECK(bag_size_in.numel() >= num_bags || n == 0, kOp, "(): expected bag_size with at least ", num_bags,
                " entries (one per bag), but got ", bag_size_in.numel());
  }
  at::Tensor out = at::zeros({num_weights, grad.size(1)}, grad.options());
  if (n == 0 || out.numel() == 0) return out;
  const at::ScalarType itype = indices_in.scalar_type();
  const at::Tensor indices = indices_in.contiguous();
  const at::Tensor offset2bag = as_index(offset2bag_in, itype);
  const at::Tensor bag_size = mean ? as_index(bag_size_in, itype) : at::Tensor();
  check_index_values(kOp, "indices value", indices, 0, num_weights);
  check_index_values(kOp, "offset2bag value", offset2bag, 0, num_bags);
  const at::Tensor psw = per_sample_weights_in.defined() ? per_sample_weights_in.contiguous() : at::Tensor();
  if (out.is_cuda()) {
    cuda::embedding_bag_sum_backward_kernel(out, grad, indices, offset2bag, bag_size, scale_grad_by_freq, psw,
                                            padding_idx);
  } else {
    embedding_bag_sum_backward_compute<cpu::Engine>(out, grad, indices, offset2bag, bag_size, scale_grad_by_freq,
                                                    psw, padding_idx);
  }
  return out;
}

at::Tensor max_backward(const at::Tensor& grad, const at::Tensor& max_indices_in, const at::Tensor& bag_size_in,
                        int64_t num_weights, int64_t padding_idx) {
  const int64_t num_bags = grad.size(0);
  TORCH_CHECK(max_indices_in.sizes() == grad.sizes(), kOp, "(): expected maximum_indices of the shape of grad (",
              grad.sizes(), ") in mode 'max', but got ", max_indices_in.sizes());
  TORCH_CHECK(bag_size_in.numel() >= num_bags, kOp, "(): expected bag_size with at least ", num_bags,
              " entries (one per bag), but got ", bag_size_in.numel());
  at::Tensor out = at::zeros({num_weights, grad.size(1)}, grad.options());
  if (grad.numel() == 0 || out.numel() == 0) return out;
  const at::ScalarType itype = max_indices_in.scalar_type();
  const at::Tensor max_indices = max_indices_in.contiguous();
  const at::Tensor bag_size = as_index(bag_size_in, itype);
  check_index_values(kOp, "maximum_indices value", max_indices, -1, num_weights);
  if (out.is_cuda()) {
    cuda::embedding_bag_max_backward_kernel(out, grad, max_indices, bag_size, padding_idx);
  } else {
    embedding_bag_max_backward_compute<cpu::Engine>(out, grad, max_indices, bag_size, padding_idx);
  }
  return out;
}

}  // namespace

at::Tensor embedding_bag_dense_backward(const at::Tensor& grad_in, const at::Tensor& indices,
                                        const at::Tensor& offset2bag, const at::Tensor& bag_size,
                                        const at::Tensor& maximum_indices, int64_t num_weights,
                                        bool scale_grad_by_freq, int64_t mode,
                                        const std::optional<at::Tensor>& per_sample_weights_opt, int64_t padding_idx) {
  TORCH_CHECK(mode == kSum || mode == kMean || mode == kMax, kOp, "(): unknown mode ", mode,
              "; expected 0 (sum), 1 (mean) or 2 (max)");
  TORCH_CHECK(grad_in.dim() == 2, kOp, "(): expected a 2-d grad [bags, embedding_dim], but got ", grad_in.dim(), "-d");
  TORCH_CHECK(engine_dtype(grad_in.scalar_type()), kOp,
              "(): expected grad of dtype float, double, half or bfloat16, but got ", grad_in.scalar_type());
  TORCH_CHECK(num_weights >= 0, kOp, "(): num_weights must be non-negative, got ", num_weights);
  check_same_device(kOp, grad_in, indices, "indices");
  check_same_device(kOp, grad_in, offset2bag, "offset2bag");
  check_same_device(kOp, grad_in, bag_size, "bag_size");
  check_same_device(kOp, grad_in, maximum_indices, "maximum_indices");
  const bool has_psw = per_sample_weights_opt.has_value() && per_sample_weights_opt->defined();
  const at::Tensor grad = grad_in.contiguous();
  if (mode == kMax) {
    TORCH_CHECK(!has_psw, kOp, "(): per_sample_weights are only supported for mode='sum'");
    TORCH_CHECK(is_index_type(maximum_indices.scalar_type()) && is_index_type(bag_size.scalar_type()), kOp,
                "(): expected int32/int64 maximum_indices and bag_size, but got ", maximum_indices.scalar_type(),
                " and ", bag_size.scalar_type());
    return max_backward(grad, maximum_indices, bag_size, num_weights, padding_idx);
  }
  TORCH_CHECK(indices.dim() == 1, kOp, "(): expected 1-d indices, but got ", indices.dim(), "-d");
  TORCH_CHECK(is_index_type(indices.scalar_type()) && is_index_type(offset2bag.scalar_type()), kOp,
              "(): expected int32/int64 indices and offset2bag, but got ", indices.scalar_type(), " and ",
              offset2bag.scalar_type());
  if (mode == kMean) {
    TORCH_CHECK(is_index_type(bag_size.scalar_type()), kOp, "(): expected int32/int64 bag_size, but got ",
                bag_size.scalar_type());
  }
  at::Tensor psw;
  if (has_psw) {
    psw = *per_sample_weights_opt;
    TORCH_CHECK(mode == kSum, kOp, "(): per_sample_weights are only supported for mode='sum'");
    check_same_device(kOp, grad_in, psw, "per_sample_weights");
    TORCH_CHECK(psw.scalar_type() == grad.scalar_type(), kOp, "(): expected per_sample_weights of dtype ",
                grad.scalar_type(), " (grad's), but got ", psw.scalar_type());
    TORCH_CHECK(psw.dim() == 1 && psw.numel() == indices.numel(), kOp,
                "(): expected 1-d per_sample_weights with one entry per index (", indices.numel(),
                "), but got shape ", psw.sizes());
  }
  return sum_mean_backward(grad, indices, offset2bag, bag_size, num_weights, scale_grad_by_freq, mode == kMean, psw,
                           padding_idx);
}

}  // namespace detops
