// nll_loss2d_forward (functional, .output): checks and the CPU path. The CUDA path is cuda/nll_loss2d.cu;
// both run the per-pixel code of ops/nll_loss2d_op.h over the same contributions and tree, so the loss and
// total weight have the same bits on both (docs/order_contract.md). Every reduction is computed here, 'none' included (stock CUDA does not
// alert for 'none', but computing it keeps CPU == CUDA and the target check in one place).
#include "ops/nll_loss2d.h"

#include "ops/common.h"
#include "ops/nll_loss2d_op.h"

#include <ATen/native/Resize.h>
#include <ATen/ops/_to_copy.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

namespace detops {
namespace {

constexpr const char* kOp = "nll_loss2d_forward";

// Stock's checks in stock's order (aten LossNLL2d.cpp: check_inputs_nll_loss2d, then the dtypes its kernel
// reads), plus same-device checks. Messages keep stock's words after the op's name.
void check_nll_loss2d(const at::Tensor& self, const at::Tensor& target, const at::Tensor& weight) {
  TORCH_CHECK(target.dim() == 3, kOp,
              "(): only batches of spatial targets supported (3D tensors) but got targets of dimension: ",
              target.dim());
  TORCH_CHECK(self.dim() == 4, kOp,
              "(): only batches of spatial inputs supported (4D tensors), but got input of dimension: ", self.dim());
  TORCH_CHECK(!weight.defined() || weight.numel() == self.size(1), kOp,
              "(): weight tensor should be defined either for all or no classes, but got ", weight.numel(),
              " weights for ", self.size(1), " classes");
  TORCH_CHECK(self.size(0) == target.size(0) && self.size(2) == target.size(1) && self.size(3) == target.size(2),
              kOp, "(): size mismatch (got input: ", self.sizes(), " , target: ", target.sizes(), ")");
  TORCH_CHECK_NOT_IMPLEMENTED(engine_dtype(self.scalar_type()), kOp, "(): not implemented for '",
                              self.scalar_type(), "' (float, double, half and bfloat16 inputs, as stock)");
  TORCH_CHECK(!weight.defined() || weight.scalar_type() == self.scalar_type(), kOp, "(): expected scalar type ",
              self.scalar_type(), " for weight (self's dtype) but found ", weight.scalar_type());
  TORCH_CHECK(target.scalar_type() == at::kLong, kOp, "(): expected scalar type Long for target but found ",
              target.scalar_type());
  check_same_device(kOp, self, target, "target");
  if (weight.defined()) check_same_device(kOp, self, weight, "weight");
}

// Each target is ignore_index or a class in [0, classes), where validates_on_host(target); raises for the
// first other value (row-major position over [N, H, W]).
void check_target_values(const at::Tensor& target, int64_t classes, int64_t ignore_index) {
  if (target.numel() == 0 || !validates_on_host(target)) return;
  const at::Tensor host =
      (target.is_cpu() ? target : at::_to_copy(target, target.options().device(at::kCPU))).contiguous();
  const int64_t* p = host.const_data_ptr<int64_t>();
  const int64_t n = host.numel();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = p[i];
    TORCH_CHECK(t == ignore_index || (t >= 0 && t < classes), kOp, "(): target ", t, " at position ", i,
                " is out of bounds of [0, ", classes, ") and is not ignore_index (", ignore_index, ")");
  }
}

void check_result(const at::Tensor& self, const at::Tensor& result, const char* name) {
  TORCH_CHECK(result.scalar_type() == self.scalar_type(), kOp, "(): expected ", name, " of scalar type ",
              self.scalar_type(), " (self's) but found ", result.scalar_type());
  check_same_device(kOp, self, result, name);
}

// The computation into output ([N, H, W] for 'none', [] otherwise) and total_weight ([]), both contiguous
// of self's dtype on self's device, after the checks.
void nll_loss2d_compute(at::Tensor& output, at::Tensor& total_weight, const at::Tensor& self,
                        const at::Tensor& target, const at::Tensor& weight, int64_t reduction,
                        int64_t ignore_index) {
  if (reduction == at::Reduction::None && output.numel() == 0) return;
  const at::Tensor input = self.contiguous();
  const at::Tensor target_c = target.contiguous();
  const at::Tensor weight_c = weight.defined() ? weight.contiguous() : weight;
  if (input.is_cuda()) {
    cuda::nll_loss2d_forward_kernel(output, total_weight, input, target_c, weight_c, reduction, ignore_index);
  } else {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "detops_nll_loss2d_forward", [&] {
      nll_loss2d_forward_cpu<scalar_t>(output, total_weight, input, target_c, weight_c, reduction, ignore_index);
    });
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> nll_loss2d_forward(const at::Tensor& self, const at::Tensor& target,
                                                      const std::optional<at::Tensor>& weight_opt, int64_t reduction,
                                                      int64_t ignore_index) {
  const at::Tensor weight = weight_opt.has_value() && weight_opt->defined() ? *weight_opt : at::Tensor();
  check_nll_loss2d(self, target, weight);
  check_target_values(target, self.size(1), ignore_index);
  const bool none = reduction == at::Reduction::None;
  at::Tensor output = none ? at::empty({self.size(0), self.size(2), self.size(3)}, self.options())
                           : at::empty({}, self.options());
  // 'none' leaves total_weight 0, as stock; the reductions write it.
  at::Tensor total_weight = none ? at::zeros({}, self.options()) : at::empty({}, self.options());
  nll_loss2d_compute(output, total_weight, self, target, weight, reduction, ignore_index);
  return {output, total_weight};
}

// As stock's .output kernel: output resized to the result's shape, total_weight to []. Both are checked before
// anything is written, so bad arguments leave them untouched.
std::tuple<at::Tensor&, at::Tensor&> nll_loss2d_forward_out(const at::Tensor& self, const at::Tensor& target,
                                                            const std::optional<at::Tensor>& weight,
                                                            int64_t reduction, int64_t ignore_index,
                                                            at::Tensor& output, at::Tensor& total_weight) {
  check_result(self, output, "output");
  check_result(self, total_weight, "total_weight");
  if (reduction != at::Reduction::None) {
    // Both results are 0-d: computed in place once the arguments are checked.
    const at::Tensor weight_t = weight.has_value() && weight->defined() ? *weight : at::Tensor();
    check_nll_loss2d(self, target, weight_t);
    check_target_values(target, self.size(1), ignore_index);
    at::native::resize_output(output, {});
    total_weight.resize_({});
    nll_loss2d_compute(output, total_weight, self, target, weight_t, reduction, ignore_index);
    return {output, total_weight};
  }
  const auto [out, tw] = detops::nll_loss2d_forward(self, target, weight, reduction, ignore_index);
  at::native::resize_output(output, out.sizes());
  output.copy_(out);
  total_weight.resize_({});
  total_weight.copy_(tw);
  return {output, total_weight};
}

}  // namespace detops
