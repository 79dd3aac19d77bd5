// The torch.ops.detops namespace: a twin of every overridden aten overload, with the identical schema,
// running the detops kernels on CPU and CUDA tensors regardless of the mode; and the mode API.
#include "detops/detops.h"
#include "ops/ctc_loss.h"
#include "ops/ops.h"
#include "ops/bincount.h"
#include "ops/embedding_bag.h"
#include "ops/pooling.h"

#include <torch/library.h>

TORCH_LIBRARY(detops, m) {
  m.def("index_add(Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1) -> Tensor");
  m.def("index_add_(Tensor(a!) self, int dim, Tensor index, Tensor source, *, Scalar alpha=1) -> Tensor(a!)");
  m.def(
      "index_add.out(Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1, Tensor(a!) out) "
      "-> Tensor(a!)");
  m.def("scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor");
  m.def("scatter_add_(Tensor(a!) self, int dim, Tensor index, Tensor src) -> Tensor(a!)");
  m.def("scatter_add.out(Tensor self, int dim, Tensor index, Tensor src, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("bincount(Tensor self, Tensor? weights=None, SymInt minlength=0) -> Tensor");
  m.def(
      "_embedding_bag_dense_backward(Tensor grad, Tensor indices, Tensor offset2bag, Tensor bag_size, "
      "Tensor maximum_indices, SymInt num_weights, bool scale_grad_by_freq, int mode, Tensor? per_sample_weights, "
      "int padding_idx=-1) -> Tensor");
  m.def("_adaptive_avg_pool2d_backward(Tensor grad_output, Tensor self) -> Tensor");
  m.def("_adaptive_avg_pool3d_backward(Tensor grad_output, Tensor self) -> Tensor");
  m.def(
      "adaptive_avg_pool3d_backward.grad_input(Tensor grad_output, Tensor self, *, Tensor(a!) grad_input) -> "
      "Tensor(a!)");
  m.def(
      "avg_pool3d_backward(Tensor grad_output, Tensor self, int[3] kernel_size, int[3] stride, int[3] padding, "
      "bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor");
  m.def(
      "avg_pool3d_backward.grad_input(Tensor grad_output, Tensor self, int[3] kernel_size, int[3] stride, "
      "int[3] padding, bool ceil_mode, bool count_include_pad, int? divisor_override, *, Tensor(a!) grad_input) "
      "-> Tensor(a!)");
  m.def("adaptive_max_pool2d_backward(Tensor grad_output, Tensor self, Tensor indices) -> Tensor");
  m.def(
      "adaptive_max_pool2d_backward.grad_input(Tensor grad_output, Tensor self, Tensor indices, *, "
      "Tensor(a!) grad_input) -> Tensor(a!)");
  m.def("adaptive_max_pool3d_backward(Tensor grad_output, Tensor self, Tensor indices) -> Tensor");
  m.def(
      "adaptive_max_pool3d_backward.grad_input(Tensor grad_output, Tensor self, Tensor indices, *, "
      "Tensor(a!) grad_input) -> Tensor(a!)");
  m.def(
      "fractional_max_pool2d_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] output_size, "
      "Tensor indices) -> Tensor");
  m.def(
      "fractional_max_pool2d_backward.grad_input(Tensor grad_output, Tensor self, int[2] kernel_size, "
      "int[2] output_size, Tensor indices, *, Tensor(a!) grad_input) -> Tensor(a!)");
  m.def(
      "fractional_max_pool3d_backward(Tensor grad_output, Tensor self, int[3] kernel_size, int[3] output_size, "
      "Tensor indices) -> Tensor");
  m.def(
      "fractional_max_pool3d_backward.grad_input(Tensor grad_output, Tensor self, int[3] kernel_size, "
      "int[3] output_size, Tensor indices, *, Tensor(a!) grad_input) -> Tensor(a!)");
  m.def(
      "max_pool3d_with_indices_backward(Tensor grad_output, Tensor self, int[3] kernel_size, int[3] stride, "
      "int[3] padding, int[3] dilation, bool ceil_mode, Tensor indices) -> Tensor");
  m.def(
      "max_pool3d_with_indices_backward.grad_input(Tensor grad_output, Tensor self, int[3] kernel_size, "
      "int[3] stride, int[3] padding, int[3] dilation, bool ceil_mode, Tensor indices, *, Tensor(a!) grad_input) "
      "-> Tensor(a!)");

  m.def("set_mode(str mode) -> ()", [](std::string mode) { detops::set_mode(mode); });
  m.def("get_mode() -> str", [] { return detops::get_mode(); });
  m.def("set_strict(bool strict) -> ()", [](bool strict) { detops::set_strict(strict); });
  m.def("get_strict() -> bool", [] { return detops::get_strict(); });
  m.def("covered_ops() -> str[]", [] { return detops::covered_ops(); });
  m.def("version() -> str", [] { return detops::version(); });
}

#define DETOPS_TWINS(m)                                           \
  m.impl("index_add", TORCH_FN(detops::index_add));               \
  m.impl("index_add_", TORCH_FN(detops::index_add_));             \
  m.impl("index_add.out", TORCH_FN(detops::index_add_out));       \
  m.impl("scatter_add", TORCH_FN(detops::scatter_add));           \
  m.impl("scatter_add_", TORCH_FN(detops::scatter_add_));         \
  m.impl("scatter_add.out", TORCH_FN(detops::scatter_add_out));   \
  m.impl("bincount", TORCH_FN(detops::bincount));                 \
  m.impl("_embedding_bag_dense_backward", TORCH_FN(detops::embedding_bag_dense_backward));

#define DETOPS_POOLING_TWINS(m)                                                                                \
  m.impl("_adaptive_avg_pool2d_backward", TORCH_FN(detops::adaptive_avg_pool2d_backward));                     \
  m.impl("_adaptive_avg_pool3d_backward", TORCH_FN(detops::adaptive_avg_pool3d_backward));                     \
  m.impl("adaptive_avg_pool3d_backward.grad_input", TORCH_FN(detops::adaptive_avg_pool3d_backward_out));       \
  m.impl("avg_pool3d_backward", TORCH_FN(detops::avg_pool3d_backward));                                        \
  m.impl("avg_pool3d_backward.grad_input", TORCH_FN(detops::avg_pool3d_backward_out));                         \
  m.impl("adaptive_max_pool2d_backward", TORCH_FN(detops::adaptive_max_pool2d_backward));                      \
  m.impl("adaptive_max_pool2d_backward.grad_input", TORCH_FN(detops::adaptive_max_pool2d_backward_out));       \
  m.impl("adaptive_max_pool3d_backward", TORCH_FN(detops::adaptive_max_pool3d_backward));                      \
  m.impl("adaptive_max_pool3d_backward.grad_input", TORCH_FN(detops::adaptive_max_pool3d_backward_out));       \
  m.impl("fractional_max_pool2d_backward", TORCH_FN(detops::fractional_max_pool2d_backward));                  \
  m.impl("fractional_max_pool2d_backward.grad_input", TORCH_FN(detops::fractional_max_pool2d_backward_out));   \
  m.impl("fractional_max_pool3d_backward", TORCH_FN(detops::fractional_max_pool3d_backward));                  \
  m.impl("fractional_max_pool3d_backward.grad_input", TORCH_FN(detops::fractional_max_pool3d_backward_out));   \
  m.impl("max_pool3d_with_indices_backward", TORCH_FN(detops::max_pool3d_with_indices_backward));              \
  m.impl("max_pool3d_with_indices_backward.grad_input", TORCH_FN(detops::max_pool3d_with_indices_backward_out));

TORCH_LIBRARY_IMPL(detops, CPU, m) {
  DETOPS_TWINS(m)
  DETOPS_POOLING_TWINS(m)
}

TORCH_LIBRARY_IMPL(detops, CUDA, m) {
  DETOPS_TWINS(m)
  DETOPS_POOLING_TWINS(m)
}

// _ctc_loss_backward (ops/ctc_loss.h).
TORCH_LIBRARY_FRAGMENT(detops, m) {
  m.def(
      "_ctc_loss_backward(Tensor grad, Tensor log_probs, Tensor targets, int[] input_lengths, int[] target_lengths, "
      "Tensor neg_log_likelihood, Tensor log_alpha, int blank, bool zero_infinity=False) -> Tensor");
  m.def(
      "_ctc_loss_backward.Tensor(Tensor grad, Tensor log_probs, Tensor targets, Tensor input_lengths, "
      "Tensor target_lengths, Tensor neg_log_likelihood, Tensor log_alpha, int blank, bool zero_infinity=False) "
      "-> Tensor");
}

#define DETOPS_CTC_LOSS_TWINS(m)                                                   \
  m.impl("_ctc_loss_backward", TORCH_FN(detops::ctc_loss_backward));               \
  m.impl("_ctc_loss_backward.Tensor", TORCH_FN(detops::ctc_loss_backward_tensor));

TORCH_LIBRARY_IMPL(detops, CPU, m) {
  DETOPS_CTC_LOSS_TWINS(m)
}

TORCH_LIBRARY_IMPL(detops, CUDA, m) {
  DETOPS_CTC_LOSS_TWINS(m)
}
