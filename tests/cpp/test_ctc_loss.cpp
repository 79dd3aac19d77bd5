// The CTC loss backward's own arithmetic (ops/ctc_loss_math.h): exp and log built from rounded operations
// only, accurate to a few ulps; log-add-exp as the combine of the contract's tree.
#include "ops/contract.h"
#include "ops/ctc_loss_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace {

using detops::ctc::LogAddExp;

template <typename T>
double max_rel_error_exp(T lo, T hi, int n) {
  double worst = 0;
  for (int i = 0; i <= n; ++i) {
    const T x = static_cast<T>(lo + (hi - lo) * (static_cast<long double>(i) / n));
    const long double exact = std::exp(static_cast<long double>(x));
    const long double got = detops::ctc::exp(x);
    worst = std::max(worst, static_cast<double>(std::fabs(got - exact) / exact));
  }
  return worst;
}

template <typename T>
double max_abs_or_rel_error_log(int n) {
  double worst = 0;
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> exponent(-300, 300);
  for (int i = 0; i < n; ++i) {
    double e = exponent(rng);
    if (sizeof(T) == 4) e = std::fmod(e, 37.0);
    const T x = static_cast<T>(std::pow(10.0, e));
    const long double exact = std::log(static_cast<long double>(x));
    const long double got = detops::ctc::log(x);
    worst = std::max(worst, static_cast<double>(std::fabs(got - exact) / std::max<long double>(1, std::fabs(exact))));
  }
  for (int i = 0; i < n; ++i) {  // near 1, where log is small
    const T x = static_cast<T>(0.75 + 0.5 * i / n);
    const long double exact = std::log(static_cast<long double>(x));
    const long double got = detops::ctc::log(x);
    if (exact != 0) worst = std::max(worst, static_cast<double>(std::fabs(got - exact) / std::fabs(exact)));
  }
  return worst;
}

TEST(CtcMath, ExpIsAccurate) {
  EXPECT_LT(max_rel_error_exp<float>(-87.0f, 88.0f, 200000), 3 * std::numeric_limits<float>::epsilon());
  EXPECT_LT(max_rel_error_exp<double>(-700.0, 709.0, 200000), 4 * std::numeric_limits<double>::epsilon());
  EXPECT_LT(max_rel_error_exp<float>(-1.0f, 1.0f, 100000), 2 * std::numeric_limits<float>::epsilon());
}

TEST(CtcMath, LogIsAccurate) {
  EXPECT_LT(max_abs_or_rel_error_log<float>(100000), 3 * std::numeric_limits<float>::epsilon());
  EXPECT_LT(max_abs_or_rel_error_log<double>(100000), 4 * std::numeric_limits<double>::epsilon());
}

template <typename T>
void check_special_values() {
  const T inf = std::numeric_limits<T>::infinity();
  const T nan = std::numeric_limits<T>::quiet_NaN();
  EXPECT_EQ(detops::ctc::exp(T(0)), T(1));
  EXPECT_EQ(detops::ctc::exp(-inf), T(0));
  EXPECT_EQ(detops::ctc::exp(inf), inf);
  EXPECT_EQ(detops::ctc::exp(T(1000)), inf);
  EXPECT_EQ(detops::ctc::exp(T(-1000)), T(0));
  EXPECT_TRUE(std::isnan(detops::ctc::exp(nan)));
  EXPECT_GT(detops::ctc::exp(T(sizeof(T) == 4 ? -103 : -744)), T(0));  // subnormal results
  EXPECT_EQ(detops::ctc::log(T(1)), T(0));
  EXPECT_EQ(detops::ctc::log(T(0)), -inf);
  EXPECT_EQ(detops::ctc::log(inf), inf);
  EXPECT_TRUE(std::isnan(detops::ctc::log(T(-1))));
  EXPECT_TRUE(std::isnan(detops::ctc::log(nan)));
  const T tiny = std::numeric_limits<T>::denorm_min();
  EXPECT_NEAR(detops::ctc::log(tiny), std::log(static_cast<long double>(tiny)), 1e-4);
  EXPECT_NEAR(detops::ctc::log(T(2)), std::log(2.0L), 2 * std::numeric_limits<T>::epsilon());
}

TEST(CtcMath, SpecialValues) {
  check_special_values<float>();
  check_special_values<double>();
}

TEST(CtcMath, CanonicalNanIsThePositiveQuietNan) {
  const float f = detops::ctc::canonical_nan<float>();
  const double d = detops::ctc::canonical_nan<double>();
  EXPECT_EQ(detops::float_bits(f), 0x7fc00000u);
  uint64_t u;
  std::memcpy(&u, &d, sizeof(u));
  EXPECT_EQ(u, 0x7ff8000000000000ull);
  EXPECT_EQ(detops::float_bits(detops::ctc::canonicalize_nan(-std::numeric_limits<float>::quiet_NaN())), 0x7fc00000u);
}

TEST(CtcMath, LogAddExpFollowsStock) {
  const double inf = std::numeric_limits<double>::infinity();
  const LogAddExp lae;
  EXPECT_EQ(lae(-inf, 3.5), 3.5);
  EXPECT_EQ(lae(3.5, -inf), 3.5);
  EXPECT_EQ(lae(-inf, -inf), -inf);
  EXPECT_NEAR(lae(1.0, 2.0), std::log(std::exp(1.0) + std::exp(2.0)), 1e-15);
  EXPECT_NEAR(lae(-800.0, -801.0), -800.0 + std::log1p(std::exp(-1.0)), 1e-12);
  EXPECT_NEAR(detops::ctc::log_sum_exp3(-1.0, -2.0, -inf), std::log(std::exp(-1.0) + std::exp(-2.0)), 1e-15);
  EXPECT_EQ(detops::ctc::log_sum_exp3(-inf, -inf, -inf), -inf);
}

TEST(CtcMath, TreeWithLogAddExpStreamsToTheSameBits) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(-20.0f, 10.0f);
  for (int64_t n : {1, 2, 31, 32, 33, 100, 1024, 1025, 5000}) {
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    if (n > 1) v[n / 2] = -std::numeric_limits<float>::infinity();  // an impossible position
    std::vector<float> buf((n + detops::kBlock - 1) / detops::kBlock);
    const float tree = detops::tree_reduce<float>(n, [&](int64_t i) { return v[i]; }, buf.data(), LogAddExp());
    detops::StreamingTree<float, 7, LogAddExp> stream;
    for (float x : v) stream.push(x);
    EXPECT_EQ(detops::float_bits(stream.finish()), detops::float_bits(tree)) << n;
    double exact = 0;
    double m = -1e300;
    for (float x : v) m = std::max(m, static_cast<double>(x));
    for (float x : v) exact += std::exp(static_cast<double>(x) - m);
    EXPECT_NEAR(tree, m + std::log(exact), 1e-4 * std::max(1.0, std::fabs(m))) << n;
  }
}

}  // namespace
