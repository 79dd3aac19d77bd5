// The torch.ops.detops namespace: a twin of every overridden aten overload, with the identical schema,
// running the detops kernels on CPU and CUDA tensors regardless of the mode; and the mode API.
#include "detops/detops.h"
#include "ops/ctc_loss.h"
#include "ops/ops.h"

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
  m.impl("scatter_add.out", TORCH_FN(detops::scatter_add_out));

TORCH_LIBRARY_IMPL(detops, CPU, m) {
  DETOPS_TWINS(m)
}

TORCH_LIBRARY_IMPL(detops, CUDA, m) {
  DETOPS_TWINS(m)
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
