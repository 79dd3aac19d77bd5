// histc (functional, .out): checks, routing and the CPU path. The CUDA path is cuda/histc.cu; both compute
// each value's bin with stock CUDA's arithmetic (ops/histc_op.h) and count the bins as exact integers,
// so the counts do not depend on any order.
#include "ops/histc.h"

#include "ops/common.h"
#include "ops/histc_op.h"
#include "ops/sort_reduce_cpu.h"

#include <ATen/native/Resize.h>
#include <ATen/ops/aminmax.h>
#include <ATen/ops/histc_cpu_dispatch.h>
#include <ATen/ops/histc_cuda_dispatch.h>
#include <ATen/ops/zeros.h>

#include <cmath>
#include <utility>

namespace detops {
namespace {

constexpr const char* kOp = "histc";

// Dtypes detops computes: the floating dtypes stock CUDA histc takes (float and double; it rejects half
// and bfloat16, which the CPU twin counts as float). Integer histc is deterministic in stock CUDA (integer
// atomics) and goes there.
bool histc_engine_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble;
}

// Stock CUDA's range (aten _histc_cuda_template), in the accumulate type: min and max converted with
// Scalar's checked conversion; min == max means the data's range (one device-to-host copy); an empty range
// widened by 1 on each side; then the finite and order checks. NB: stock CPU works in double here, so a
// min and max that are distinct doubles but equal floats give other bins on the CPU (tests/python/test_histc.py).
template <typename scalar_t>
std::pair<double, double> histc_range(const at::Tensor& self, const at::Scalar& min, const at::Scalar& max) {
  using acc_t = acc_type<scalar_t>;
  const acc_t min_value = min.to<acc_t>();
  const acc_t max_value = max.to<acc_t>();
  acc_t lo = min_value;
  acc_t hi = max_value;
  if (min_value == max_value && self.numel() > 0) {
    const auto [lo_t, hi_t] = at::aminmax(self);
    lo = lo_t.item<scalar_t>();
    hi = hi_t.item<scalar_t>();
  }
  if (lo == hi) {
    lo = lo - 1;
    hi = hi + 1;
  }
  TORCH_CHECK(!(std::isinf(lo) || std::isinf(hi) || std::isnan(lo) || std::isnan(hi)), kOp, "(): range of [", lo,
              ", ", hi, "] is not finite");
  TORCH_CHECK(lo < hi, kOp, "(): max must be larger than min, but got min ", lo, " and max ", hi);
  return {static_cast<double>(lo), static_cast<double>(hi)};
}

bool cpu_reduced_precision(const at::Tensor& self) {
  return !self.is_cuda() && (self.scalar_type() == at::kHalf || self.scalar_type() == at::kBFloat16);
}

}  // namespace

at::Tensor histc(const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max) {
  if (cpu_reduced_precision(self)) {
    // NB: stock CPU histc bins half/bfloat16 against edges rounded to the input dtype and, for bfloat16,
    // puts values in wrong bins and writes past the histogram (heap corruption in torch 2.11; stock CUDA
    // rejects both dtypes). The twin counts the values, converted exactly to float, as for float input.
    return detops::histc(self.to(at::kFloat), bins, min, max).to(self.scalar_type());
  }
  if (!histc_engine_dtype(self.scalar_type())) {
    return self.is_cuda() ? at::cuda::histc(self, bins, min, max) : at::cpu::histc(self, bins, min, max);
  }
  TORCH_CHECK(bins > 0, kOp, "(): bins must be > 0, but got ", bins);
  std::pair<double, double> range;
  AT_DISPATCH_FLOATING_TYPES(self.scalar_type(), "detops_histc_range",
                             [&] { range = histc_range<scalar_t>(self, min, max); });
  if (self.numel() == 0) return at::zeros({bins}, self.options());
  at::Tensor counts = at::zeros({bins}, self.options().dtype(at::kLong));
  const at::Tensor input = self.contiguous();
  if (input.is_cuda()) {
    cuda::histc_kernel(counts, input, range.first, range.second);
  } else {
    histc_compute<cpu::Engine>(counts, input, range.first, range.second);
  }
  // NB: exact counts, rounded once to the input's dtype (stock's float atomics stop counting at 2^24).
  return counts.to(self.scalar_type());
}

// As stock CUDA's _histc_out_cuda: the functional result, out resized to it and copied in (any dtype).
at::Tensor& histc_out(const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max,
                      at::Tensor& out) {
  if (!histc_engine_dtype(self.scalar_type()) && !cpu_reduced_precision(self)) {
    return self.is_cuda() ? at::cuda::histc_outf(self, bins, min, max, out)
                          : at::cpu::histc_outf(self, bins, min, max, out);
  }
  const at::Tensor result = detops::histc(self, bins, min, max);
  at::native::resize_output(out, result.sizes());
  out.copy_(result);
  return out;
}

}  // namespace detops
