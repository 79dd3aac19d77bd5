// The CPU twins against stock CPU ops, and their errors.
#include "detops/detops.h"
#include "ops/index_add.h"
#include "ops/scatter_add.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace {

// `want` is stock's result on float64 copies of the inputs. detops accumulates in float (double for
// double) and rounds once, so it lands within one unit in the last place of the output type.
void expect_close(const at::Tensor& got, const at::Tensor& want) {
  ASSERT_EQ(got.sizes(), want.sizes());
  const auto t = got.scalar_type();
  const double rtol = t == at::kDouble ? 1e-12 : t == at::kFloat ? 1e-5 : t == at::kHalf ? 1.0 / 1024 : 1.0 / 128;
  EXPECT_TRUE(at::allclose(got.to(at::kDouble), want.to(at::kDouble), rtol, 1e-5))
      << "max abs diff " << (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
}

at::Tensor f64(const at::Tensor& t) {
  return t.is_floating_point() ? t.to(at::kDouble) : t;
}

TEST(OpsCpu, IndexAddMatchesStockAcrossDtypesDimsAndLayouts) {
  at::manual_seed(0);
  for (auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16}) {
    for (int64_t dim : {0, 1, 2, -1, -3}) {
      const at::Tensor self = at::randn({6, 5, 4}).to(dtype);
      const int64_t wrapped = dim < 0 ? dim + 3 : dim;
      auto source_sizes = self.sizes().vec();
      source_sizes[wrapped] = 40;
      const at::Tensor source = at::randn(source_sizes).to(dtype);
      const at::Tensor index = at::randint(0, self.size(wrapped), {40}).to(at::kInt);
      expect_close(detops::index_add(self, dim, index, source, 1.5), at::index_add(f64(self), dim, index, f64(source), 1.5));
      // Non-contiguous self and source, in place.
      at::Tensor self_t = self.transpose(0, 2).contiguous().transpose(0, 2);
      ASSERT_FALSE(self_t.is_contiguous());
      at::Tensor expected = f64(self);
      expected.index_add_(dim, index, f64(source), 1.5);
      detops::index_add_(self_t, dim, index, source.transpose(0, 1).contiguous().transpose(0, 1), 1.5);
      expect_close(self_t, expected);
    }
  }
}

TEST(OpsCpu, ScatterAddMatchesStockIncludingSmallerIndexAndStridedSrc) {
  at::manual_seed(1);
  for (auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16}) {
    const at::Tensor self = at::randn({7, 6}).to(dtype);
    const at::Tensor src = at::randn({12, 9}).to(dtype).t();  // [9, 12], strided
    const at::Tensor index = at::randint(0, 7, {8, 5});
    for (int64_t dim : {0, -2}) {
      expect_close(detops::scatter_add(self, dim, index, src), at::scatter_add(f64(self), dim, index, f64(src)));
    }
    const at::Tensor index1 = at::randint(0, 6, {7, 6});
    expect_close(detops::scatter_add(self, 1, index1, src), at::scatter_add(f64(self), 1, index1, f64(src)));
  }
}

TEST(OpsCpu, OutVariantsResizeAndMatch) {
  const at::Tensor self = at::randn({5, 3});
  const at::Tensor index = at::tensor({0, 4, 4, 1}, at::kLong);
  const at::Tensor source = at::randn({4, 3});
  at::Tensor out = at::empty({0});
  detops::index_add_out(self, 0, index, source, 1, out);
  expect_close(out, at::index_add(self, 0, index, source));
  at::Tensor out2 = at::empty({0});
  const at::Tensor sindex = at::randint(0, 5, {4, 3});
  detops::scatter_add_out(self, 0, sindex, source, out2);
  expect_close(out2, at::scatter_add(self, 0, sindex, source));
}

TEST(OpsCpu, IntegerDtypesGoToStockAndAreExact) {
  const at::Tensor self = at::randint(-5, 5, {6, 2}, at::kLong);
  const at::Tensor index = at::randint(0, 6, {30});
  const at::Tensor source = at::randint(-5, 5, {30, 2}, at::kLong);
  EXPECT_TRUE(at::equal(detops::index_add(self, 0, index, source, 3), at::index_add(self, 0, index, source, 3)));
}

TEST(OpsCpu, EmptyAndScalarTensors) {
  const at::Tensor self = at::randn({4, 3});
  EXPECT_TRUE(at::equal(detops::index_add(self, 0, at::empty({0}, at::kLong), at::empty({0, 3}), 1), self));
  EXPECT_TRUE(at::equal(detops::scatter_add(self, 0, at::empty({0, 3}, at::kLong), at::randn({2, 3})), self));
  const at::Tensor scalar = at::tensor(2.5);
  expect_close(detops::index_add(scalar, 0, at::tensor({0}, at::kLong), at::tensor(1.0), 2),
               at::index_add(scalar, 0, at::tensor({0}, at::kLong), at::tensor(1.0), 2));
  expect_close(detops::scatter_add(scalar, 0, at::tensor(0, at::kLong), at::tensor(1.0)),
               at::scatter_add(scalar, 0, at::tensor(0, at::kLong), at::tensor(1.0)));
  EXPECT_EQ(detops::index_add(at::empty({0, 3}), 1, at::tensor({0, 2}, at::kLong), at::empty({0, 2}), 1).numel(), 0);
}

void expect_error(const std::function<void()>& fn, const std::string& fragment) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing '" << fragment << "'";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(OpsCpu, BadInputsRaiseErrorsNamingTheOpAndTheValue) {
  const at::Tensor self = at::zeros({5, 3});
  const at::Tensor src = at::ones({2, 3});
  expect_error([&] { detops::index_add(self, 0, at::tensor({0, 5}, at::kLong), src, 1); }, "index_add_(): index 5");
  expect_error([&] { detops::index_add(self, 0, at::tensor({-1, 0}, at::kLong), src, 1); }, "index -1");
  expect_error([&] { detops::index_add(self, 0, at::tensor({0., 1.}), src, 1); }, "int32/int64");
  expect_error([&] { detops::index_add(self, 0, at::zeros({1, 2}, at::kLong), src, 1); }, "vector");
  expect_error([&] { detops::index_add(self, 0, at::zeros({3}, at::kLong), src, 1); }, "Number of indices (3)");
  expect_error([&] { detops::index_add(self, 0, at::zeros({2}, at::kLong), at::ones({2, 4}), 1); }, "shape");
  expect_error([&] { detops::index_add(self, 2, at::zeros({2}, at::kLong), src, 1); }, "Dimension out of range");
  expect_error([&] { detops::index_add(self, 0, at::zeros({2}, at::kLong), src.to(at::kDouble), 1); },
               "same scalar type");
  expect_error([&] { detops::scatter_add(self, 0, at::tensor({0, 7, 1}, at::kLong).view({1, 3}), src); },
               "scatter_add_(): index 7");
  expect_error([&] { detops::scatter_add(self, 0, at::zeros({3}, at::kLong), src); }, "number of dimensions");
  expect_error([&] { detops::scatter_add(self, 0, at::zeros({3, 3}, at::kLong), src); }, "no larger");
  expect_error([&] { detops::scatter_add(self, 0, at::zeros({1, 3}), src); }, "int32/int64");
  expect_error([&] { detops::scatter_add(self, 0, at::zeros({1, 3}, at::kLong), src.to(at::kHalf)); }, "dtype");
  const auto meta = at::TensorOptions().device(at::kMeta);
  expect_error([&] { detops::index_add(self, 0, at::zeros({2}, meta.dtype(at::kLong)), src, 1); },
               "index_add_(): expected index on the same device as self (cpu), but got meta");
  expect_error([&] { detops::scatter_add(self, 0, at::zeros({1, 3}, at::kLong), at::ones({2, 3}, meta)); },
               "scatter_add_(): expected src on the same device as self (cpu), but got meta");
  at::Tensor out = at::empty({5, 3}, at::kDouble);
  expect_error([&] { detops::scatter_add_out(self, 0, at::zeros({1, 3}, at::kLong), src, out); }, "out (Double)");
}

}  // namespace
