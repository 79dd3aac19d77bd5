// Index math for the gathers (padding, pooling, upsample, antialiased upsample): shared by their CPU paths and
// CUDA kernels.
#pragma once

#include <ATen/cuda/detail/IntegerDivider.cuh>
#include <c10/macros/Macros.h>

#include <cstdint>

// Unrolls a loop on the device (arrays indexed by its counter then stay in registers); nothing on the host.
#if defined(__CUDACC__)
#define DETOPS_UNROLL _Pragma("unroll")
#else
#define DETOPS_UNROLL
#endif

namespace detops {

// q = n / d and r = n % d for n >= 0: plain division in 64 bits; in 32 bits a precomputed multiplier
// (IntDivider), so the CUDA kernels never divide.
template <typename index_t>
struct Divider {
  index_t d = 1;
  Divider() = default;
  explicit Divider(index_t v) : d(v) {}
  C10_HOST_DEVICE void divmod(index_t n, index_t& q, index_t& r) const {
    q = n / d;
    r = n - q * d;
  }
  C10_HOST_DEVICE index_t div(index_t n) const { return n / d; }
  C10_HOST_DEVICE index_t mod(index_t n) const { return n - div(n) * d; }
};
template <>
struct Divider<int32_t> {
  at::cuda::detail::IntDivider<uint32_t> u;
  Divider() = default;
  explicit Divider(int32_t v) : u(static_cast<uint32_t>(v)) {}
  C10_HOST_DEVICE void divmod(int32_t n, int32_t& q, int32_t& r) const {
    const auto qr = u.divmod(static_cast<uint32_t>(n));
    q = static_cast<int32_t>(qr.div);
    r = static_cast<int32_t>(qr.mod);
  }
  C10_HOST_DEVICE int32_t div(int32_t n) const { return static_cast<int32_t>(u.div(static_cast<uint32_t>(n))); }
  C10_HOST_DEVICE int32_t mod(int32_t n) const { return static_cast<int32_t>(u.mod(static_cast<uint32_t>(n))); }
};

}  // namespace detops
