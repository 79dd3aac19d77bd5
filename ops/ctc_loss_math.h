// exp, log and log-add-exp for the CTC loss backward, as __host__ __device__ code built from rounded
// additions, multiplications and divisions only, so the CPU and the GPU give the same bits
// (docs/order_contract.md, "Log-add-exp"). NB: std::exp / std::log (glibc) and the CUDA math library
// differ in the last bits; these do not depend on either.
#pragma once

#include "ops/contract.h"

#include <cstdint>
#include <cstring>
#include <limits>

// On the host, exp and log inlined into every loop and their polynomials' loops fully unrolled, so that a loop
// over them can vectorise (GCC left exp out of line in a loop of log_sum_exp3s).
#if defined(__CUDACC__) || !defined(__GNUC__) || defined(__clang__)
#define DETOPS_CTC_UNROLL
#define DETOPS_CTC_INLINE inline
#else
#define DETOPS_CTC_UNROLL _Pragma("GCC unroll 16")
#define DETOPS_CTC_INLINE __attribute__((always_inline)) inline
#endif

namespace detops::ctc {

template <typename T>
struct FloatBits;
template <>
struct FloatBits<float> {
  using U = uint32_t;
  static constexpr int kMant = 23;
  static constexpr int kBias = 127;
};
template <>
struct FloatBits<double> {
  using U = uint64_t;
  static constexpr int kMant = 52;
  static constexpr int kBias = 1023;
};

template <typename T>
C10_HOST_DEVICE inline typename FloatBits<T>::U to_bits(T v) {
  typename FloatBits<T>::U u;
  memcpy(&u, &v, sizeof(u));
  return u;
}
template <typename T>
C10_HOST_DEVICE inline T from_bits(typename FloatBits<T>::U u) {
  T v;
  memcpy(&v, &u, sizeof(v));
  return v;
}

template <typename T>
C10_HOST_DEVICE inline T neg_inf() {
  return -std::numeric_limits<T>::infinity();
}
template <typename T>
C10_HOST_DEVICE inline T pos_inf() {
  return std::numeric_limits<T>::infinity();
}
// The one NaN detops writes: the positive quiet NaN. NB: x86 and CUDA produce NaNs of different sign
// and payload (inf - inf), so every NaN result is replaced by this one.
template <typename T>
C10_HOST_DEVICE inline T canonical_nan() {
  using U = typename FloatBits<T>::U;
  const U exp_all = ((U{1} << (sizeof(T) * 8 - 1 - FloatBits<T>::kMant)) - 1) << FloatBits<T>::kMant;
  return from_bits<T>(exp_all | (U{1} << (FloatBits<T>::kMant - 1)));
}
template <typename T>
C10_HOST_DEVICE inline T canonicalize_nan(T v) {
  return v != v ? canonical_nan<T>() : v;
}

// 2^k for k in the normal exponent range.
template <typename T>
C10_HOST_DEVICE inline T pow2(int k) {
  using U = typename FloatBits<T>::U;
  return from_bits<T>(static_cast<U>(k + FloatBits<T>::kBias) << FloatBits<T>::kMant);
}

template <typename T>
struct ExpLogConst;
// ln2_hi has trailing zero bits, so k * ln2_hi is exact for every k that occurs.
template <>
struct ExpLogConst<float> {
  static constexpr float kLn2Hi = 0.693145751953125f;
  static constexpr float kLn2Lo = 1.428606820309417232e-06f;
  static constexpr float kLog2e = 1.44269504088896340736f;
  static constexpr float kShifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  static constexpr float kOverflow = 88.72283935546875f;
  static constexpr float kUnderflow = -103.97208404541015625f;
  static constexpr float kSqrt2 = 1.41421353816986083984f;
  static constexpr float kMinNormal = 1.17549435e-38f;
  static constexpr int kExpDegree = 8;   // Taylor terms r^0..r^8 on |r| <= ln2 / 2
  static constexpr int kLogTerms = 6;    // atanh series s, s^3, ..., s^13 on |s| <= 0.1716
};
template <>
struct ExpLogConst<double> {
  static constexpr double kLn2Hi = 6.93147180369123816490e-01;
  static constexpr double kLn2Lo = 1.90821492927058770002e-10;
  static constexpr double kLog2e = 1.44269504088896338700e+00;
  static constexpr double kShifter = 6755399441055744.0;  // 1.5 * 2^52
  static constexpr double kOverflow = 7.09782712893383973096e+02;
  static constexpr double kUnderflow = -7.45133219101941108420e+02;
  static constexpr double kSqrt2 = 1.41421356237309514547e+00;
  static constexpr double kMinNormal = 2.2250738585072014e-308;
  static constexpr int kExpDegree = 15;
  static constexpr int kLogTerms = 13;
};

// Polynomial coefficients, each the exact rational rounded once to double at compile time (j! < 2^53
// for j <= 18), then once to T.
constexpr double inv_factorial(int j) {
  double f = 1.0;
  for (int i = 2; i <= j; ++i) f *= i;
  return 1.0 / f;
}
constexpr double inv_odd(int j) {
  return 1.0 / (2 * j + 1);
}

// NB: exp, log and the log-sum-exps below are written without branches: every special case (NaN,
// overflow, zero, ...) computes the ordinary path on a harmless input and then selects its own result.
// The selected value is the same arithmetic in the same order either way, so the bits are; on the CPU a
// loop over them then vectorises (ops/ctc_loss.cpp is compiled with -fno-trapping-math so that GCC may
// compute both sides of a selection).

// exp(x): x = k ln2 + r (Cody-Waite), exp(r) by its Taylor polynomial (Horner), times 2^k in two exact
// steps (the second rounds once where the result is subnormal).
template <typename T>
C10_HOST_DEVICE DETOPS_CTC_INLINE T exp(T x) {
  using K = ExpLogConst<T>;
  const bool nan = x != x;
  const bool over = x > K::kOverflow;
  const bool under = x < K::kUnderflow;
  const T xc = (nan | over | under) ? T(0) : x;
  const T kf = add_rn(add_rn(mul_rn(xc, K::kLog2e), K::kShifter), -K::kShifter);
  const int k = static_cast<int>(kf);
  const T r = add_rn(add_rn(xc, -mul_rn(kf, K::kLn2Hi)), -mul_rn(kf, K::kLn2Lo));
  T p = static_cast<T>(inv_factorial(K::kExpDegree));
DETOPS_CTC_UNROLL
  for (int j = K::kExpDegree - 1; j >= 0; --j) p = add_rn(mul_rn(p, r), static_cast<T>(inv_factorial(j)));
  const int k1 = k / 2;
  T v = mul_rn(mul_rn(p, pow2<T>(k1)), pow2<T>(k - k1));
  v = under ? T(0) : v;
  v = over ? pos_inf<T>() : v;
  return nan ? x : v;
}

// log(x): x = m 2^e with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s) with s = (m - 1) / (m + 1).
template <typename T>
C10_HOST_DEVICE DETOPS_CTC_INLINE T log(T x) {
  using K = ExpLogConst<T>;
  using B = FloatBits<T>;
  using U = typename B::U;
  const bool nan = x != x;
  const bool negative = x < T(0);
  const bool zero = x == T(0);
  const bool inf = x == pos_inf<T>();
  const bool subnormal = x < K::kMinNormal;
  const T xs = subnormal ? mul_rn(x, pow2<T>(B::kMant)) : x;  // exact
  const U u = to_bits(xs);
  int e = static_cast<int>(u >> B::kMant) - B::kBias - B::kMant * static_cast<int>(subnormal);
  const U mant_mask = (U{1} << B::kMant) - 1;
  T m = from_bits<T>((u & mant_mask) | (static_cast<U>(B::kBias) << B::kMant));  // [1, 2)
  const bool high = m > K::kSqrt2;
  m = high ? mul_rn(m, T(0.5)) : m;  // exact
  e += static_cast<int>(high);
  const T f = add_rn(m, T(-1));  // exact
  const T s = div_rn(f, add_rn(T(2), f));
  const T z = mul_rn(s, s);
  // P(z) = 1/3 + z/5 + z^2/7 + ..., coefficients rounded once from the exact rationals.
  T p = static_cast<T>(inv_odd(K::kLogTerms));
DETOPS_CTC_UNROLL
  for (int j = K::kLogTerms - 1; j >= 1; --j) p = add_rn(mul_rn(p, z), static_cast<T>(inv_odd(j)));
  const T two_s = add_rn(s, s);
  const T log_m = add_rn(two_s, mul_rn(two_s, mul_rn(z, p)));
  const T ef = static_cast<T>(e);
  T v = add_rn(add_rn(mul_rn(ef, K::kLn2Lo), log_m), mul_rn(ef, K::kLn2Hi));
  v = inf ? x : v;
  v = zero ? neg_inf<T>() : v;
  v = negative ? canonical_nan<T>() : v;
  return nan ? x : v;
}

// Stock's log-add-exp of two log-space values (aten LossCTC.cpp, the collection of alpha * beta):
// -inf on the left gives the right; otherwise log(exp(a - m) + exp(b - m)) + m with m = max(a, b).
// The combine of the contract's tree for the CTC gradient.
struct LogAddExp {
  template <typename T>
  C10_HOST_DEVICE DETOPS_CTC_INLINE T operator()(T a, T b) const {
    const T m = (a < b) ? b : a;
    const T v = add_rn(ctc::log(add_rn(ctc::exp(add_rn(a, -m)), ctc::exp(add_rn(b, -m)))), m);
    return a == neg_inf<T>() ? b : v;
  }
};

// Stock's three-term log-sum-exp of the alpha / beta recursions (Graves eq. 6 and 10), in its order:
// log((exp(l1 - m) + exp(l2 - m)) + exp(l3 - m)) + m, with m = 0 when all three are -inf.
template <typename T>
C10_HOST_DEVICE DETOPS_CTC_INLINE T log_sum_exp3(T l1, T l2, T l3) {
  T m = l1;
  m = l2 > m ? l2 : m;
  m = l3 > m ? l3 : m;
  m = m == neg_inf<T>() ? T(0) : m;
  const T sum = add_rn(add_rn(ctc::exp(add_rn(l1, -m)), ctc::exp(add_rn(l2, -m))), ctc::exp(add_rn(l3, -m)));
  return add_rn(ctc::log(sum), m);
}

}  // namespace detops::ctc
