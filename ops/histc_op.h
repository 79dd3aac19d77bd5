// histc: the bin of each value, shared by the CPU and CUDA engines, counted exactly as integers where it is
// computed (Engine::count_keys). The bin is stock CUDA's (aten cuda/SummaryOps.cu, getBin), operation for
// operation.
#pragma once

#include "ops/common.h"
#include "ops/contract.h"

#include <cstdint>

namespace detops {

// The bin of x among nbins equal bins over [lo, hi], or -1 where x lies outside (NaN too): stock CUDA's
// (x - lo) * nbins / (hi - lo) in the accumulate type, truncated toward zero, hi itself in the last bin.
// NB: each operation rounded on its own, as nvcc compiles stock's expression (no FMA can form in it), so
// the bins are stock CUDA's bit for bit. Where stock's own conversion would leave [0, nbins] (a quotient
// of NaN or inf when hi - lo overflows) the bin is clamped, never out of bounds.
template <typename acc_t>
C10_HOST_DEVICE inline int64_t histc_bin(acc_t x, acc_t lo, acc_t hi, acc_t nbins_acc, int64_t nbins) {
  if (!(x >= lo && x <= hi)) return -1;
  const acc_t q = div_rn(mul_rn(add_rn(x, -lo), nbins_acc), add_rn(hi, -lo));
  if (!(q >= acc_t(0))) return 0;  // NaN: the device's float-to-int conversion gives 0
  const int64_t bin = q < acc_t(9.0e18) ? static_cast<int64_t>(q) : nbins;
  return bin >= nbins ? nbins - 1 : bin;
}

// The keys Engine::count_keys counts: key(i) = histc_bin of input[i] (contiguous), kSkipKey outside [lo, hi].
template <typename scalar_t>
struct HistcKeys {
  using acc_t = acc_type<scalar_t>;
  const scalar_t* input;
  acc_t lo;
  acc_t hi;
  acc_t nbins_acc;
  int64_t nbins;

  C10_HOST_DEVICE int64_t key(int64_t i) const {
    const int64_t bin = histc_bin<acc_t>(to_acc(input[i]), lo, hi, nbins_acc, nbins);
    return bin < 0 ? kSkipKey : bin;
  }
};

}  // namespace detops

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>

namespace detops {

// lo and hi are the range in the accumulate type, held exactly in a double.
template <typename scalar_t>
HistcKeys<scalar_t> make_histc_keys(const at::Tensor& input, double lo, double hi, int64_t nbins) {
  using acc_t = acc_type<scalar_t>;
  HistcKeys<scalar_t> op;
  op.input = input.const_data_ptr<scalar_t>();
  op.lo = static_cast<acc_t>(lo);
  op.hi = static_cast<acc_t>(hi);
  // NB: converted once, round to nearest, as stock's float * int64_t converts nbins.
  op.nbins_acc = static_cast<acc_t>(nbins);
  op.nbins = nbins;
  return op;
}

// counts (zero-filled int64 [nbins]) gets the histogram of input (contiguous, float or double) over
// [lo, hi] on an engine (cpu::Engine or cuda::Engine); the front end has checked the range.
template <typename Engine>
void histc_compute(at::Tensor& counts, const at::Tensor& input, double lo, double hi) {
  const int64_t n = input.numel();
  if (n == 0) return;
  // NB: integer counts, exact in any order: one pass, each value's bin counted where it is computed.
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "detops_histc", [&] {
    Engine::count_keys(make_histc_keys<scalar_t>(input, lo, hi, counts.numel()), n, counts.numel(),
                       counts.data_ptr<int64_t>());
  });
}

namespace cuda {
// histc_compute on the CUDA engine (cuda/histc.cu).
void histc_kernel(at::Tensor& counts, const at::Tensor& input, double lo, double hi);
}  // namespace cuda

}  // namespace detops
