// bincount: checks, routing and the CPU path. With weights, both devices run the sort-reduce engine over
// BincountOp (docs/order_contract.md); without weights the counts are integers, exact in any order, and
// the stock kernel of the tensor's device computes them (stock CUDA does not alert for that case).
#include "ops/bincount.h"

#include "ops/bincount_op.h"
#include "ops/common.h"
#include "ops/sort_reduce_cpu.h"

#include <ATen/ops/_to_copy.h>
#include <ATen/ops/aminmax.h>
#include <ATen/ops/bincount_cpu_dispatch.h>
#include <ATen/ops/bincount_cuda_dispatch.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>

#include <algorithm>

namespace detops {
namespace {

constexpr const char* kOp = "bincount";

// Smallest and largest value of a non-empty 1-d integral tensor, on the host (one copy for CUDA).
std::pair<int64_t, int64_t> value_range(const at::Tensor& self) {
  const auto [lo, hi] = at::aminmax(self);
  const at::Tensor both = at::_to_copy(at::stack({lo, hi}), lo.options().dtype(at::kLong).device(at::kCPU));
  const int64_t* p = both.const_data_ptr<int64_t>();
  return {p[0], p[1]};
}

}  // namespace

// Stock's checks in stock's order (aten _bincount_cpu / _bincount_cuda), plus same-device checks.
at::Tensor bincount(const at::Tensor& self, const std::optional<at::Tensor>& weights_opt, int64_t minlength) {
  TORCH_CHECK(minlength >= 0, kOp, "(): minlength should be >= 0, got ", minlength);
  TORCH_CHECK_NOT_IMPLEMENTED(at::isIntegralType(self.scalar_type(), /*includeBool=*/false), kOp,
                              "(): expected an integral input, but got ", self.scalar_type());
  const bool has_weights = weights_opt.has_value() && weights_opt->defined();
  if (has_weights) check_same_device(kOp, self, *weights_opt, "weights");
  if (self.dim() == 1 && self.numel() == 0) {
    return at::zeros({minlength}, self.options().dtype(at::kLong));
  }
  TORCH_CHECK(self.dim() == 1, kOp, "(): bincount only supports 1-d non-negative integral inputs, but got a ",
              self.dim(), "-d input");
  if (!has_weights) {
    return self.is_cuda() ? at::cuda::bincount(self, std::nullopt, minlength)
                          : at::cpu::bincount(self, std::nullopt, minlength);
  }
  const at::Tensor& weights_in = *weights_opt;
  const auto [lo, hi] = value_range(self);
  TORCH_CHECK(lo >= 0, kOp, "(): bincount only supports 1-d non-negative integral inputs, but the input contains ",
              lo);
  TORCH_CHECK(weights_in.dim() == 1 && weights_in.size(0) == self.size(0), kOp,
              "(): weights should be 1-d and have the same length as input, but got weights of shape ",
              weights_in.sizes(), " for an input of length ", self.size(0));
  // NB: as stock: float weights give a float result, every other dtype is widened to double first.
  const at::ScalarType out_type = weights_in.scalar_type() == at::kFloat ? at::kFloat : at::kDouble;
  const at::Tensor weights = weights_in.to(out_type).contiguous();
  const int64_t nbins = std::max(hi + 1, minlength);
  at::Tensor out = at::zeros({nbins}, weights.options());
  const at::Tensor input = self.contiguous();
  if (out.is_cuda()) {
    cuda::bincount_kernel(out, input, weights);
  } else {
    bincount_compute<cpu::Engine>(out, input, weights);
  }
  return out;
}

}  // namespace detops
