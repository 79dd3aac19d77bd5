// The CPU paths that fold without the engine (max pools, the grid sampler's input gradient, nll_loss2d_forward)
// record the engine calls their CUDA path makes for the same arguments (ops/plan.h): the calls recorded from
// each equal those of the same computation through cpu::Engine, and in plan-only mode the CPU path records them
// and computes nothing, its checks still running.
#include "ops/grid_sampler_op.h"
#include "ops/nll_loss2d_op.h"
#include "ops/plan_record.h"
#include "ops/pooling.h"
#include "ops/pooling_op.h"
#include "ops/sort_reduce_cpu.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

namespace {

using detops::plan::EngineCall;

std::vector<std::vector<int64_t>> lists(const std::vector<EngineCall>& calls) {
  std::vector<std::vector<int64_t>> out;
  for (const EngineCall& c : calls) out.push_back(detops::plan::to_list(c));
  return out;
}

template <typename F>
std::vector<std::vector<int64_t>> recorded(F&& f, bool plan_only = false) {
  detops::plan::start_recording(plan_only);
  try {
    f();
  } catch (...) {
    detops::plan::stop_recording();
    throw;
  }
  return lists(detops::plan::stop_recording());
}

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() &&
         at::equal(a.reshape({-1}).contiguous().view(at::kByte), b.reshape({-1}).contiguous().view(at::kByte));
}

TEST(PlanRecord, MaxPoolCpuPathRecordsTheEngineCall) {
  at::manual_seed(0);
  for (auto dtype : {at::kFloat, at::kDouble, at::kHalf}) {
    // Outputs per plane 9 (every input element selected at most kBlock times: the CPU path) and 400 with every
    // index 0 (more than kBlock: the engine).
    for (int64_t out_side : {3, 20}) {
      const at::Tensor self = at::randn({2, 3, 5, 6}).to(dtype);
      const at::Tensor grad_output = at::randn({2, 3, out_side, out_side}).to(dtype);
      const at::Tensor indices = out_side == 3 ? at::randint(0, 30, {2, 3, 3, 3}) : at::zeros({2, 3, 20, 20}, at::kLong);
      at::Tensor got;
      const auto front = recorded([&] { got = detops::adaptive_max_pool2d_backward(grad_output, self, indices); });
      at::Tensor want = at::zeros_like(self);
      const auto engine = recorded([&] {
        detops::max_pool_backward_compute<detops::cpu::Engine>("adaptive_max_pool2d_backward", want, grad_output,
                                                               indices, out_side * out_side, 30);
      });
      ASSERT_EQ(engine.size(), 1u);
      EXPECT_EQ(front, engine) << dtype << " " << out_side;
      EXPECT_TRUE(same_bits(got, want)) << dtype << " " << out_side;
      // Plan-only: the same call, and the .grad_input overload leaves grad_input as it was.
      at::Tensor into = at::full_like(self, 7);
      const auto planned = recorded(
          [&] { detops::adaptive_max_pool2d_backward_out(grad_output, self, indices, into); }, /*plan_only=*/true);
      EXPECT_EQ(planned, engine);
      EXPECT_TRUE(at::equal(into, at::full_like(self, 7)));
    }
  }
}

TEST(PlanRecord, MaxPoolPlanOnlyStillChecksIndices) {
  const at::Tensor self = at::randn({1, 2, 5, 6});
  const at::Tensor grad_output = at::randn({1, 2, 3, 3});
  at::Tensor indices = at::zeros({1, 2, 3, 3}, at::kLong);
  indices.view(-1)[4] = 30;
  for (bool plan_only : {false, true}) {
    EXPECT_THROW(recorded([&] { detops::adaptive_max_pool2d_backward(grad_output, self, indices); }, plan_only),
                 c10::Error);
    at::Tensor into = at::empty_like(self);
    EXPECT_THROW(recorded([&] { detops::adaptive_max_pool2d_backward_out(grad_output, self, indices, into); },
                          plan_only),
                 c10::Error);
  }
}

TEST(PlanRecord, GridSamplerStreamingRecordsTheEngineCall) {
  at::manual_seed(1);
  for (int dims : {2, 3}) {
    for (bool clustered : {false, true}) {
      detops::GridGeom g{};
      g.dims = dims;
      g.N = 2;
      g.C = 3;
      g.in[0] = dims == 3 ? 4 : 1;
      g.in[1] = 5;
      g.in[2] = 6;
      g.out[0] = dims == 3 ? 3 : 1;
      g.out[1] = clustered ? 30 : 3;
      g.out[2] = clustered ? 40 : 4;
      g.interpolation = detops::kGridBilinear;
      g.padding = detops::kGridZeros;
      g.align_corners = false;
      std::vector<int64_t> in_sizes{g.N, g.C}, out_sizes{g.N, g.C}, grid_sizes{g.N};
      for (int k = 3 - dims; k < 3; ++k) {
        in_sizes.push_back(g.in[k]);
        out_sizes.push_back(g.out[k]);
        grid_sizes.push_back(g.out[k]);
      }
      grid_sizes.push_back(dims);
      const at::Tensor input = at::randn(in_sizes);
      const at::Tensor grad_output = at::randn(out_sizes);
      // Clustered: some pixels collect more than kBlock^2 contributions, and the streaming path gives way to
      // the engine.
      const at::Tensor grid = clustered ? at::rand(grid_sizes) * 0.01 : at::rand(grid_sizes) * 2.4 - 1.2;
      std::vector<std::vector<std::vector<int64_t>>> calls;
      std::vector<at::Tensor> results;
      for (bool streaming : {true, false}) {
        at::Tensor grad_grid = at::empty_like(grid);
        at::Tensor grad_input = at::zeros_like(input);
        calls.push_back(recorded([&] {
          detops::grid_sampler_backward_compute<detops::cpu::Engine, true>(g, grad_output, input, grid, grad_grid,
                                                                           grad_input, std::nullopt, streaming);
        }));
        results.push_back(grad_input);
      }
      ASSERT_EQ(calls[1].size(), 2u);  // the grad_grid gather, the input gradient's sort-reduce
      EXPECT_EQ(calls[0], calls[1]) << dims << " " << clustered;
      EXPECT_TRUE(same_bits(results[0], results[1]));
      at::Tensor grad_grid = at::empty_like(grid);
      at::Tensor grad_input = at::zeros_like(input);
      const auto planned = recorded(
          [&] {
            detops::grid_sampler_backward_compute<detops::cpu::Engine, true>(g, grad_output, input, grid, grad_grid,
                                                                             grad_input);
          },
          /*plan_only=*/true);
      EXPECT_EQ(planned, calls[1]);
      EXPECT_EQ(grad_input.count_nonzero().item<int64_t>(), 0);
    }
  }
}

TEST(PlanRecord, NllLoss2dCpuPathRecordsTheEngineCalls) {
  at::manual_seed(2);
  const at::Tensor input = at::randn({2, 5, 6, 7});
  at::Tensor target = at::randint(0, 5, {2, 6, 7});
  target.view(-1).slice(0, 0, 10).fill_(-100);
  const at::Tensor weight = at::rand({5}) + 0.5;
  for (int64_t reduction : {0, 1, 2}) {
    const std::vector<int64_t> out_sizes = reduction == 0 ? std::vector<int64_t>{2, 6, 7} : std::vector<int64_t>{};
    at::Tensor out_cpu = at::empty(out_sizes), tw_cpu = at::scalar_tensor(0.0);
    at::Tensor out_engine = at::empty(out_sizes), tw_engine = at::scalar_tensor(0.0);
    const auto cpu = recorded([&] {
      detops::nll_loss2d_forward_cpu<float>(out_cpu, tw_cpu, input, target, weight, reduction, -100);
    });
    const auto engine = recorded([&] {
      detops::nll_loss2d_forward_compute<detops::cpu::Engine>(out_engine, tw_engine, input, target, weight, reduction,
                                                              -100);
    });
    ASSERT_EQ(engine.size(), reduction == 0 ? 1u : 2u);
    EXPECT_EQ(cpu, engine) << reduction;
    EXPECT_TRUE(same_bits(out_cpu, out_engine) && same_bits(tw_cpu, tw_engine)) << reduction;
    at::Tensor out = at::full(out_sizes, 7.0), tw = at::scalar_tensor(7.0);
    const auto planned = recorded(
        [&] { detops::nll_loss2d_forward_cpu<float>(out, tw, input, target, weight, reduction, -100); },
        /*plan_only=*/true);
    EXPECT_EQ(planned, engine);
    EXPECT_TRUE(at::equal(out, at::full(out_sizes, 7.0)) && tw.item<double>() == 7.0);
  }
}

}  // namespace
