// The scatter family's layouts (ops/scatter_add_op.h): a broadcast index takes the row layout (n rows along
// dim, D columns), anything else the general one (n elements, one column). The compute functions run on an
// engine that records its calls and forwards them to the CPU engine.
#include "ops/scatter_add_op.h"
#include "ops/scatter_op.h"
#include "ops/scatter_reduce_op.h"
#include "ops/sort_reduce_cpu.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

namespace {

struct Call {
  int64_t n, num_keys, D;
};

std::vector<Call>& calls() {
  static std::vector<Call> c;
  return c;
}

struct RecordingEngine {
  template <typename acc_t, typename Op>
  static void sort_reduce(const char* name, const Op& op, int64_t n, int64_t num_keys, int64_t D,
                          const at::Tensor& like) {
    calls().push_back({n, num_keys, D});
    detops::cpu::Engine::sort_reduce<acc_t>(name, op, n, num_keys, D, like);
  }
  template <typename Op>
  static void last_writer(const char* name, const Op& op, int64_t n, int64_t num_keys, int64_t D,
                          const at::Tensor& like) {
    calls().push_back({n, num_keys, D});
    detops::cpu::Engine::last_writer(name, op, n, num_keys, D, like);
  }
  // Recorded with D = 0: a count, not a reduction.
  template <typename Keys>
  static void count_keys(const Keys& keys, int64_t n, int64_t num_keys, int64_t* counts) {
    calls().push_back({n, num_keys, 0});
    detops::cpu::Engine::count_keys(keys, n, num_keys, counts);
  }
};

// Runs every compute function of the family on (self, dim, index, src) and returns the calls' (n, D),
// checking that they all agree; the mean reduction counts each key's contributions first (count_keys).
Call engine_call(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  std::vector<Call> seen;
  const auto run = [&](auto compute) {
    calls().clear();
    at::Tensor work = self.clone();
    compute(work);
    seen.insert(seen.end(), calls().begin(), calls().end());
  };
  run([&](at::Tensor& w) { detops::scatter_add_compute<RecordingEngine>(w, dim, index, src); });
  run([&](at::Tensor& w) { detops::scatter_compute<RecordingEngine>(w, dim, index, src); });
  run([&](at::Tensor& w) {
    detops::scatter_reduce_compute<RecordingEngine>(w, dim, index, src, detops::Reduction::Prod, true, {});
  });
  EXPECT_EQ(seen.size(), 3u);
  calls().clear();
  at::Tensor work = self.clone();
  detops::scatter_reduce_compute<RecordingEngine>(work, dim, index, src, detops::Reduction::Mean, false, {});
  EXPECT_EQ(calls().size(), 2u);  // the count, then the mean
  for (const Call& c : calls()) {
    EXPECT_EQ(c.n, seen[0].n);
    EXPECT_EQ(c.num_keys, seen[0].num_keys);
  }
  EXPECT_EQ(calls()[0].D, 0);
  EXPECT_EQ(calls()[1].D, seen[0].D);
  for (const Call& c : seen) {
    EXPECT_EQ(c.n, seen[0].n);
    EXPECT_EQ(c.num_keys, seen[0].num_keys);
    EXPECT_EQ(c.D, seen[0].D);
  }
  return seen[0];
}

TEST(ScatterRows, MessagePassingIndexRunsOneKeyPerEdge) {
  const int64_t nodes = 30, edges = 200, features = 16;
  const at::Tensor dst = at::randint(0, nodes, {edges});
  const at::Tensor index = dst.unsqueeze(1).expand({edges, features});
  const at::Tensor src = at::randn({edges, features});
  const at::Tensor self = at::zeros({nodes, features});
  const Call c = engine_call(self, 0, index, src);
  EXPECT_EQ(c.n, edges);
  EXPECT_EQ(c.num_keys, nodes);
  EXPECT_EQ(c.D, features);
  // The materialized index: one key per element.
  const Call g = engine_call(self, 0, index.contiguous(), src);
  EXPECT_EQ(g.n, edges * features);
  EXPECT_EQ(g.num_keys, nodes * features);
  EXPECT_EQ(g.D, 1);
}

TEST(ScatterRows, AnyDimAndSizeOneDimsAndSmallerIndex) {
  // dim 1 of a 3-D index [2, 50, 3] broadcast along dims 0 and 2, over self [4, 6, 5] and src [3, 51, 4].
  const at::Tensor rows = at::randint(0, 6, {50});
  const at::Tensor index = rows.view({1, 50, 1}).expand({2, 50, 3});
  const Call c = engine_call(at::zeros({4, 6, 5}), 1, index, at::randn({3, 51, 4}));
  EXPECT_EQ(c.n, 50);
  EXPECT_EQ(c.num_keys, 6);
  EXPECT_EQ(c.D, 6);
  // dim -1: index [4, 1, 40] (a size-1 dim counts as broadcast).
  const at::Tensor last = at::randint(0, 5, {40}).view({1, 1, 40}).expand({4, 1, 40});
  const Call l = engine_call(at::zeros({4, 3, 5}), 2, last, at::randn({4, 3, 40}));
  EXPECT_EQ(l.n, 40);
  EXPECT_EQ(l.num_keys, 5);
  EXPECT_EQ(l.D, 4);
}

TEST(ScatterRows, GeneralLayoutWhereTheIndexIsNotBroadcast) {
  // Broadcast along one of two other dims only; a 1-D index; one column.
  const at::Tensor partial = at::randint(0, 4, {10, 1, 3}).expand({10, 2, 3});
  EXPECT_EQ(engine_call(at::zeros({4, 2, 3}), 0, partial, at::randn({10, 2, 3})).D, 1);
  EXPECT_EQ(engine_call(at::zeros({4}), 0, at::randint(0, 4, {10}), at::randn({10})).n, 10);
  const at::Tensor column = at::randint(0, 4, {10}).view({10, 1});
  const Call one = engine_call(at::zeros({4, 3}), 0, column, at::randn({10, 3}));
  EXPECT_EQ(one.n, 10);
  EXPECT_EQ(one.D, 1);
  EXPECT_FALSE(detops::scatter_rows_apply(column, 0));
  EXPECT_TRUE(detops::scatter_rows_apply(column.expand({10, 3}), 0));
  EXPECT_FALSE(detops::scatter_rows_apply(column.expand({10, 3}).contiguous(), 0));
  // An int32 index converts to int64 with its broadcast kept (scatter_reduce_ and scatter_ read int64).
  const at::Tensor wide = detops::scatter_index_int64(column.to(at::kInt).expand({10, 3}));
  EXPECT_EQ(wide.scalar_type(), at::kLong);
  EXPECT_TRUE(detops::scatter_rows_apply(wide, 0));
  EXPECT_TRUE(at::equal(wide, column.expand({10, 3})));
}

}  // namespace
