// The CPU paths of the padding and pooling backwards (row and plane loops over host tables, the max pools'
// block scatter) and of max_unpool (one serial pass) against the per-element ops the CUDA kernels run,
// reached here through cpu::Engine: both the op the host picks (32-bit index math, BlockFold only where every
// element has at most kBlock contributions) and the general one (64-bit, StreamingTree). Same bits everywhere.
#include "ops/max_unpool.h"
#include "ops/max_unpool_op.h"
#include "ops/padding.h"
#include "ops/padding_op.h"
#include "ops/pooling.h"
#include "ops/pooling_op.h"
#include "ops/sort_reduce_cpu.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace {

const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16};

void expect_same_bits(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  ASSERT_EQ(got.scalar_type(), want.scalar_type()) << what;
  const at::Tensor a = got.contiguous();
  const at::Tensor b = want.contiguous();
  EXPECT_EQ(std::memcmp(a.const_data_ptr(), b.const_data_ptr(), a.nbytes()), 0) << what;
}

struct PadCase {
  std::vector<int64_t> shape;
  std::vector<int64_t> padding;
  bool reflect;
};

// The case's grad_output shape and its PadDims (the unused leading axes of size 1, no padding).
detops::PadDims pad_dims(const PadCase& c, std::vector<int64_t>& out_shape) {
  const int n = static_cast<int>(c.padding.size() / 2);
  out_shape = c.shape;
  for (int a = 0; a < n; ++a) out_shape[out_shape.size() - 1 - a] += c.padding[2 * a] + c.padding[2 * a + 1];
  detops::PadDims d{};
  for (int k = 0; k < 3; ++k) {
    d.isize[k] = 1;
    d.osize[k] = 1;
    d.before[k] = 0;
  }
  for (int a = 0; a < n; ++a) {
    d.isize[2 - a] = c.shape[c.shape.size() - 1 - a];
    d.osize[2 - a] = out_shape[out_shape.size() - 1 - a];
    d.before[2 - a] = c.padding[2 * a];
  }
  return d;
}

TEST(GathersCpu, PaddingRowsMatchPerElementOps) {
  const std::vector<PadCase> cases = {
      {{2, 3, 40}, {5, 7}, true},
      {{2, 3, 40}, {-3, 4}, true},
      {{2, 3, 9, 11}, {2, 3, 4, 1}, true},
      {{1, 2, 5, 6, 7}, {1, 2, 3, 4, 2, 1}, true},
      {{2, 3, 40}, {40, 3}, false},                      // a border of 41 contributions
      {{1, 2, 8, 8}, {8, 8, 8, 8}, false},               // corners of 81
      {{1, 2, 4, 5, 6}, {1, 2, -1, 3, 2, 1}, false},
      {{3, 1, 1}, {2, 5}, false},
      {{2, 2, 12}, {0, 0}, true},
      {{2, 2, 12}, {-5, -6}, true},
      {{2, 2, 12}, {3, -2}, true},
      {{2, 3, 7, 12}, {1, 1, -2, -2}, true},             // rows cropped away along H
      {{1, 2, 3, 4, 5}, {-1, 4, 2, -1, 0, 2}, true},
      {{2, 2, 12}, {-2, -3}, false},
      {{1, 2, 6, 7}, {0, 0, 3, 5}, false},
      {{1, 2, 5, 6, 7}, {2, 2, 2, 2, 2, 2}, false},      // border rows read 3 x 3 grad_output rows
  };
  at::manual_seed(0);
  for (const auto& c : cases) {
    std::vector<int64_t> out_shape;
    const detops::PadDims d = pad_dims(c, out_shape);
    for (const auto dtype : kDtypes) {
      const at::Tensor self = at::randn(c.shape).to(dtype);
      const at::Tensor grad_out = at::randn(out_shape).to(dtype);
      at::Tensor rows = at::empty_like(self);
      detops::pad_backward_cpu(rows, grad_out, d, c.reflect);
      at::Tensor picked = at::empty_like(self);
      detops::pad_backward_compute<detops::cpu::Engine>(picked, grad_out, d, c.reflect);
      at::Tensor general = at::empty_like(self);
      detops::pad_backward_compute<detops::cpu::Engine>(general, grad_out, d, c.reflect, /*force_general=*/true);
      const std::string what = std::string(c.reflect ? "reflect " : "replicate ") + c10::toString(dtype) + " " +
                               c10::str(c.shape) + " " + c10::str(c.padding);
      expect_same_bits(rows, general, what);
      expect_same_bits(picked, general, what);
    }
  }
}

// The CUDA kernel's warp form for an element with more than kBlock contributions: its blocks folded in any order
// (a lane each, PadBackwardOp::block_sum), their sums taken up the tree in block order (BlockTree), against the
// element's gather() (StreamingTree over its contributions, one thread), bit for bit: 41 to 2,197 contributions,
// a whole number of blocks and of groups of 32 blocks among them, cropping on the other axes.
TEST(GathersCpu, PaddingBlocksInAnyOrderMatchTheGather) {
  const std::vector<PadCase> cases = {
      {{2, 3, 40}, {40, 3}, false},                    // 41: two blocks
      {{1, 2, 9, 9}, {32, 32, 32, 32}, false},         // corners of 33 x 33 = 1,089: 35 blocks
      {{1, 1, 5, 6}, {31, 0, 31, -2}, false},          // 32 x 32 = 1,024: one full group of 32 full blocks
      {{1, 1, 3, 3, 3}, {12, 12, 12, 12, 12, 12}, false},  // 13^3 = 2,197: 69 blocks
      {{1, 2, 4, 5, 6}, {20, -1, 3, 2, 9, 1}, false},
  };
  at::manual_seed(1);
  std::mt19937 rng(5);
  for (const auto& c : cases) {
    std::vector<int64_t> out_shape;
    const detops::PadDims d = pad_dims(c, out_shape);
    for (const auto dtype : kDtypes) {
      at::Tensor grad_in = at::empty(c.shape, at::TensorOptions().dtype(dtype));
      const at::Tensor grad_out = at::randn(out_shape).to(dtype);
      AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "test_pad_blocks", [&] {
        using Op = detops::PadBackwardOp<scalar_t, int32_t, false>;
        const Op op = detops::make_pad_backward_op<scalar_t, int32_t, false>(grad_in, grad_out, d, c.reflect);
        int heavy = 0;
        for (int32_t i = 0; i < static_cast<int32_t>(grad_in.numel()); ++i) {
          int32_t p;
          typename Op::Sources sd, sh, sw;
          op.element(i, p, sd, sh, sw);
          const int32_t total = sd.total() * sh.total() * sw.total();
          if (total <= detops::kBlock) continue;
          ++heavy;
          const scalar_t* plane = op.grad_out + p * op.oplane;
          const int32_t blocks = (total + detops::kBlock - 1) / detops::kBlock;
          std::vector<int32_t> order(blocks);
          std::iota(order.begin(), order.end(), 0);
          std::shuffle(order.begin(), order.end(), rng);
          std::vector<typename Op::acc_t> sums(blocks);
          for (const int32_t b : order) sums[b] = op.block_sum(sd, sh, sw, plane, b);
          typename Op::BlockTree tree;
          for (const auto v : sums) tree.push(v);
          const scalar_t got = tree.value();
          const scalar_t want = op.gather(sd, sh, sw, plane);
          ASSERT_EQ(std::memcmp(&got, &want, sizeof(scalar_t)), 0)
              << c10::toString(dtype) << " " << c10::str(c.shape) << " " << c10::str(c.padding) << ": element " << i
              << " of " << total << " contributions";
        }
        ASSERT_GT(heavy, 0) << c10::str(c.shape) << " " << c10::str(c.padding);
      });
    }
  }
}

struct AvgCase {
  std::vector<int64_t> isize;  // T, H, W
  std::vector<int64_t> osize;
  bool adaptive;
  std::vector<int64_t> kernel, stride, pad;
  bool count_include_pad;
  int64_t divisor_override;
};

TEST(GathersCpu, AveragePoolPlanesMatchPerElementOps) {
  const std::vector<AvgCase> cases = {
      {{1, 7, 7}, {1, 1, 1}, true, {}, {}, {}, false, 0},
      {{4, 7, 7}, {1, 1, 1}, true, {}, {}, {}, false, 0},
      {{8, 14, 14}, {5, 9, 9}, true, {}, {}, {}, false, 0},
      {{1, 5, 3}, {1, 9, 11}, true, {}, {}, {}, false, 0},
      {{1, 1, 2}, {1, 3, 40}, true, {}, {}, {}, false, 0},  // 40 windows per element
      {{8, 16, 16}, {4, 8, 8}, false, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, true, 0},
      {{5, 7, 9}, {3, 4, 5}, false, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, false, 0},
      {{5, 7, 9}, {5, 7, 9}, false, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, false, -3},  // 27 windows
      {{6, 6, 6}, {3, 3, 3}, false, {4, 4, 4}, {1, 1, 1}, {0, 0, 0}, true, 0},    // 27
      {{9, 9, 9}, {6, 6, 6}, false, {4, 4, 4}, {1, 1, 1}, {0, 0, 0}, true, 0},    // 64 windows
      {{3, 9, 9}, {3, 3, 3}, false, {1, 2, 2}, {1, 3, 3}, {0, 0, 0}, true, 0},    // uncovered inputs
      {{2, 5, 5}, {1, 0, 3}, true, {}, {}, {}, false, 0},                          // empty output
  };
  at::manual_seed(1);
  for (const auto& c : cases) {
    detops::PoolDims d{};
    for (int k = 0; k < 3; ++k) {
      d.isize[k] = c.isize[k];
      d.osize[k] = c.osize[k];
      d.kernel[k] = c.adaptive ? 1 : c.kernel[k];
      d.stride[k] = c.adaptive ? 1 : c.stride[k];
      d.pad[k] = c.adaptive ? 0 : c.pad[k];
    }
    for (const auto dtype : kDtypes) {
      for (const int64_t batch : {1, 4}) {  // 3 planes: per row; 12: per position where most have one window
        const at::Tensor self = at::randn({batch, 3, c.isize[0], c.isize[1], c.isize[2]}).to(dtype);
        at::Tensor grad_out = at::randn({batch, 3, c.osize[0], c.osize[1], c.osize[2]}).to(dtype);
        if (grad_out.numel() >= 8) {  // signed zeros, infinities and a NaN among the contributions
          const double special[] = {-0.0, 0.0, -0.0, INFINITY, -INFINITY, NAN};
          for (int s = 0; s < 6; ++s) grad_out.view(-1)[(s * 7919) % grad_out.numel()].fill_(special[s]);
        }
        at::Tensor planes = at::empty_like(self);
        detops::avg_pool_backward_cpu(planes, grad_out, d, c.adaptive, c.count_include_pad, c.divisor_override);
        at::Tensor padded_per_use = at::empty_like(self);  // the padded W rows built per use, not per plane
        detops::avg_pool_backward_cpu(padded_per_use, grad_out, d, c.adaptive, c.count_include_pad,
                                      c.divisor_override, /*row_table=*/0);
        // The CUDA path's ops on the CPU engine: one step or two, the op the call picks or the general one.
        const auto on_engine = [&](detops::AvgPoolSteps steps, bool general) {
          at::Tensor out = at::full_like(self, 7);
          AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "test_avg_pool", [&] {
            detops::avg_pool_backward_run<scalar_t>(
                out, grad_out, d, c.adaptive, c.count_include_pad, c.divisor_override, steps, general,
                [](const auto& op, int64_t n) { detops::cpu::Engine::for_each(op, n); });
          });
          return out;
        };
        const at::Tensor general = on_engine(detops::AvgPoolSteps::kOne, true);
        const std::string what = std::string(c.adaptive ? "adaptive " : "avg ") + c10::toString(dtype) + " " +
                                 c10::str(c.isize) + " -> " + c10::str(c.osize);
        expect_same_bits(planes, general, what);
        expect_same_bits(padded_per_use, general, what);
        expect_same_bits(on_engine(detops::AvgPoolSteps::kOne, false), general, what + ", one step");
        expect_same_bits(on_engine(detops::AvgPoolSteps::kTwo, false), general, what + ", two steps");
        expect_same_bits(on_engine(detops::AvgPoolSteps::kTwo, true), general, what + ", two steps, general");
      }
    }
  }
}

TEST(GathersCpu, MaxPoolScatterMatchesSortReduceEngine) {
  at::manual_seed(2);
  const int64_t planes = 6, input_plane = 50, output_plane = 70;
  for (const auto dtype : kDtypes) {
    for (const int64_t range : {int64_t{50}, int64_t{2}}) {  // 2: some element selected more than kBlock times
      const at::Tensor grad_out = at::randn({planes, output_plane}).to(dtype);
      const at::Tensor indices = at::randint(0, range, {planes, output_plane}, at::kLong);
      at::Tensor scatter = at::empty({planes, input_plane}, grad_out.options());
      const bool done = detops::max_pool_backward_cpu(scatter, grad_out, indices, output_plane, input_plane);
      EXPECT_EQ(done, range == 50);
      at::Tensor engine = at::zeros({planes, input_plane}, grad_out.options());
      detops::max_pool_backward_compute<detops::cpu::Engine>("test", engine, grad_out, indices, output_plane,
                                                             input_plane);
      if (done) expect_same_bits(scatter, engine, c10::toString(dtype));
      // The front end takes the engine where the scatter gives up.
      const at::Tensor self = at::randn({planes, 5, 10}).to(dtype);
      const at::Tensor twin = detops::adaptive_max_pool2d_backward(grad_out.view({planes, 7, 10}), self,
                                                                   indices.view({planes, 7, 10}));
      expect_same_bits(twin.view({planes, input_plane}), engine, c10::toString(dtype));
    }
  }
}

// The max pools' gather (MaxPoolGatherOp) and the engine's call gated on it, run on the CPU as the CUDA path runs
// them (max_pool_backward_gathered over cpu::Engine), one element per call in a shuffled order.
struct MaxGatherCase {
  std::string what;
  detops::MaxPoolBoxes boxes;
  at::Tensor self;     // [planes..., spatial...], float
  at::Tensor indices;  // stock's forward's
  // The CPU front end's result (the block scatter, or the engine), the twin the gather must match.
  std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)> twin;
};

detops::PoolDims max_dims(const at::Tensor& self, const at::Tensor& indices, int nspatial) {
  detops::PoolDims d{};
  for (int k = 0; k < 3; ++k) {
    const bool used = k >= 3 - nspatial;
    d.isize[k] = used ? self.size(self.dim() - 3 + k) : 1;
    d.osize[k] = used ? indices.size(indices.dim() - 3 + k) : 1;
    d.kernel[k] = 1;
    d.stride[k] = 1;
    d.pad[k] = 0;
  }
  return d;
}

std::vector<MaxGatherCase> max_gather_cases() {
  std::vector<MaxGatherCase> cases;
  const auto adaptive2d = [&](std::vector<int64_t> shape, std::vector<int64_t> out) {
    const at::Tensor self = at::randn(shape);
    const at::Tensor indices = std::get<1>(at::adaptive_max_pool2d(self, out));
    cases.push_back({"adaptive_max_pool2d " + c10::str(shape) + " -> " + c10::str(out),
                     {detops::MaxBox::kAdaptive, max_dims(self, indices, 2)}, self, indices,
                     [](const at::Tensor& g, const at::Tensor& x, const at::Tensor& i) {
                       return detops::adaptive_max_pool2d_backward(g, x, i);
                     }});
  };
  adaptive2d({2, 3, 9, 13}, {5, 7});
  adaptive2d({1, 2, 3, 4}, {20, 25});  // every element a candidate of ~56 outputs: StreamingTree
  {
    const at::Tensor self = at::randn({2, 2, 5, 6, 7});
    const at::Tensor indices = std::get<1>(at::adaptive_max_pool3d(self, {3, 4, 5}));
    cases.push_back({"adaptive_max_pool3d", {detops::MaxBox::kAdaptive, max_dims(self, indices, 3)}, self, indices,
                     [](const at::Tensor& g, const at::Tensor& x, const at::Tensor& i) {
                       return detops::adaptive_max_pool3d_backward(g, x, i);
                     }});
  }
  {
    const std::vector<int64_t> k = {2, 3, 3}, st = {1, 2, 2}, pad = {0, 1, 1}, dil = {1, 1, 2};
    const at::Tensor self = at::randn({2, 2, 7, 9, 11});
    const at::Tensor indices = std::get<1>(at::max_pool3d_with_indices(self, k, st, pad, dil, /*ceil_mode=*/true));
    detops::PoolDims d = max_dims(self, indices, 3);
    for (int i = 0; i < 3; ++i) {
      d.kernel[i] = (k[i] - 1) * dil[i] + 1;
      d.stride[i] = st[i];
      d.pad[i] = pad[i];
    }
    cases.push_back({"max_pool3d_with_indices", {detops::MaxBox::kWindow, d}, self, indices,
                     [=](const at::Tensor& g, const at::Tensor& x, const at::Tensor& i) {
                       return detops::max_pool3d_with_indices_backward(g, x, k, st, pad, dil, true, i);
                     }});
  }
  {
    const std::vector<int64_t> k = {3, 2}, out = {8, 12};
    const at::Tensor self = at::randn({2, 3, 17, 23});
    const at::Tensor indices = std::get<1>(at::fractional_max_pool2d(self, k, out, at::rand({2, 3, 2})));
    detops::PoolDims d = max_dims(self, indices, 2);
    d.kernel[1] = k[0];
    d.kernel[2] = k[1];
    cases.push_back({"fractional_max_pool2d", {detops::MaxBox::kFractional, d}, self, indices,
                     [=](const at::Tensor& g, const at::Tensor& x, const at::Tensor& i) {
                       return detops::fractional_max_pool2d_backward(g, x, k, out, i);
                     }});
  }
  {
    const std::vector<int64_t> k = {2, 3, 2}, out = {4, 5, 6};
    const at::Tensor self = at::randn({2, 2, 7, 9, 10});
    const at::Tensor indices = std::get<1>(at::fractional_max_pool3d(self, k, out, at::rand({2, 2, 3})));
    detops::PoolDims d = max_dims(self, indices, 3);
    for (int i = 0; i < 3; ++i) d.kernel[i] = k[i];
    cases.push_back({"fractional_max_pool3d", {detops::MaxBox::kFractional, d}, self, indices,
                     [=](const at::Tensor& g, const at::Tensor& x, const at::Tensor& i) {
                       return detops::fractional_max_pool3d_backward(g, x, k, out, i);
                     }});
  }
  return cases;
}

// The gathered path on the CPU: grad_in first filled with NaN (the gather must write every element). Returns the
// gate the gather left.
int64_t run_max_gathered(const detops::MaxPoolBoxes& boxes, at::Tensor& grad_in, const at::Tensor& grad_out,
                         const at::Tensor& indices, std::mt19937& rng) {
  const detops::MaxPoolTables t = detops::build_max_pool_tables(boxes.kind, boxes.dims);
  EXPECT_TRUE(t.usable);
  std::vector<int64_t> words = t.words;
  grad_in.fill_(std::numeric_limits<double>::quiet_NaN());
  detops::max_pool_backward_gathered<detops::cpu::Engine>(
      "test", grad_in, grad_out, indices, boxes, t, words.data(), [&](const auto& op, int64_t n) {
        using index_t = typename std::decay_t<decltype(op)>::index_type;
        std::vector<int64_t> order(static_cast<size_t>(n));
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng);
        for (const int64_t i : order) op(static_cast<index_t>(i));
      });
  return words[0];
}

// With stock's forward's indices the gather alone gives the twin's bits and leaves the gate closed; with some
// indices moved out of their boxes (still in the plane) it opens the gate and the engine's call rewrites the
// selected elements: the twin's bits again.
TEST(GathersCpu, MaxPoolGatherMatchesTheTwin) {
  at::manual_seed(5);
  std::mt19937 rng(5);
  for (const MaxGatherCase& c : max_gather_cases()) {
    for (const auto dtype : kDtypes) {
      const at::Tensor self = c.self.to(dtype);
      const at::Tensor grad_out = at::randn(c.indices.sizes()).to(dtype);
      const std::string what = c.what + " " + c10::toString(dtype);
      at::Tensor grad_in = at::empty_like(self);
      EXPECT_EQ(run_max_gathered(c.boxes, grad_in, grad_out, c.indices, rng), 0) << what;
      expect_same_bits(grad_in, c.twin(grad_out, self, c.indices), what);

      at::Tensor moved = c.indices.clone();
      const int64_t input_plane = c.boxes.dims.isize[0] * c.boxes.dims.isize[1] * c.boxes.dims.isize[2];
      auto flat = moved.view({-1});
      flat[0] = input_plane - 1;     // the first output's box holds the plane's first corner, not its last
      flat[flat.numel() - 1] = 0;    // and the last output's the last
      EXPECT_EQ(run_max_gathered(c.boxes, grad_in, grad_out, moved, rng), 1) << what;
      expect_same_bits(grad_in, c.twin(grad_out, self, moved), what + ", indices out of their boxes");
    }
  }
}

// Fractional pools' boxes hold the windows stock's forward picks: over many sizes, pool sizes and seeded uniform
// samples (float and double: the forward computes its window starts in the samples' dtype), the gather over stock's
// indices leaves the gate closed. The extreme samples 0 and the largest below 1 may open it where rounding moves a
// window (docs/pooling.md: u = 0 at 35 -> 23 with a pool of 5 in double, at o = 11): the twin's bits either way.
TEST(GathersCpu, FractionalBoxesHoldStockWindows) {
  at::manual_seed(6);
  std::mt19937 rng(6);
  int opened = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t pool = 1 + static_cast<int64_t>(rng() % 5);
    const int64_t in_h = pool + static_cast<int64_t>(rng() % 300);
    const int64_t in_w = pool + static_cast<int64_t>(rng() % 40);
    const int64_t out_h = 1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(in_h - pool + 1));
    const int64_t out_w = 1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(in_w - pool + 1));
    const auto dtype = trial % 2 == 0 ? at::kFloat : at::kDouble;
    const std::vector<int64_t> kernel = {pool, pool}, out = {out_h, out_w};
    const at::Tensor self = at::randn({1, 16, in_h, in_w}, dtype);
    for (const bool extremes : {false, true}) {
      at::Tensor samples = at::rand({1, 16, 2}, dtype);
      if (extremes) {
        samples.view({-1}).narrow(0, 0, 16).fill_(0.0);
        samples.view({-1}).narrow(0, 16, 16)
            .fill_(dtype == at::kFloat ? double{std::nextafter(1.0f, 0.0f)} : std::nextafter(1.0, 0.0));
      }
      const at::Tensor indices = std::get<1>(at::fractional_max_pool2d(self, kernel, out, samples));
      detops::PoolDims d = max_dims(self, indices, 2);
      d.kernel[1] = pool;
      d.kernel[2] = pool;
      at::Tensor grad_in = at::empty_like(self);
      const at::Tensor grad_out = at::randn(indices.sizes(), dtype);
      const std::string what = "pool " + std::to_string(pool) + ", " + std::to_string(in_h) + " x " +
                               std::to_string(in_w) + " -> " + std::to_string(out_h) + " x " + std::to_string(out_w) +
                               (extremes ? ", extreme samples" : "");
      const int64_t gate = run_max_gathered({detops::MaxBox::kFractional, d}, grad_in, grad_out, indices, rng);
      if (!extremes) EXPECT_EQ(gate, 0) << what;
      opened += static_cast<int>(gate);
      expect_same_bits(grad_in, detops::fractional_max_pool2d_backward(grad_out, self, kernel, out, indices), what);
    }
  }
  EXPECT_LT(opened, 60);
}

// The winners as the CUDA path's atomicMax leaves them: per destination, the largest source position.
struct LargestPosition {
  void operator()(const int64_t* indices, int64_t n, int64_t in_image, int64_t out_image, int64_t* winner) const {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t d = detops::max_unpool_dest(i, indices, in_image, out_image);
      if (d >= 0) winner[d] = std::max(winner[d], i);
    }
  }
};

TEST(GathersCpu, MaxUnpoolSerialPassMatchesWinnerGather) {
  at::manual_seed(3);
  const int64_t planes = 6;
  for (const auto dtype : kDtypes) {
    for (const int64_t out_w : {int64_t{6}, int64_t{40}}) {  // 6: several inputs per output; 40: some outputs none
      const at::Tensor self = at::randn({1, planes, 5, 10}).to(dtype);
      const at::Tensor indices = at::randint(0, 5 * out_w, {1, planes, 5, 10}, at::kLong);
      const at::Tensor twin = detops::max_unpool2d(self, indices, {5, out_w});
      at::Tensor gathered = at::empty({1, planes, 5, out_w}, self.options());
      detops::max_unpool_compute<detops::cpu::Engine>(self, indices, gathered, 50, 5 * out_w, LargestPosition());
      expect_same_bits(twin, gathered, std::string(c10::toString(dtype)) + ", width " + std::to_string(out_w));
    }
  }
}

// The CUDA plane path's steps (MaxUnpoolPlaneOp), the (plane, chunk) blocks in a shuffled order, each raising its
// winners from the plane's inputs in a shuffled order and writing its outputs in another, against the serial
// pass: one chunk per plane and chunks of 7 outputs (the last one shorter); repeated indices (several inputs per
// output) and outputs nobody writes.
TEST(GathersCpu, MaxUnpoolPlaneStepsMatchTheSerialPass) {
  at::manual_seed(4);
  std::mt19937 rng(9);
  const int64_t planes = 5;
  for (const auto dtype : kDtypes) {
    for (const int64_t out_w : {int64_t{6}, int64_t{40}}) {
      const at::Tensor self = at::randn({1, planes, 5, 10}).to(dtype);
      const at::Tensor indices = at::randint(0, 5 * out_w, {1, planes, 5, 10}, at::kLong);
      const at::Tensor twin = detops::max_unpool2d(self, indices, {5, out_w});
      const int64_t in_image = 50;
      const int64_t out_image = 5 * out_w;
      ASSERT_TRUE(detops::max_unpool_plane_path(in_image, out_image));
      for (const int64_t max_chunk : {out_image, int64_t{7}}) {
        at::Tensor out = at::full({1, planes, 5, out_w}, 7.0).to(dtype);
        const int64_t chunks = detops::max_unpool_chunks(out_image, max_chunk);
        const int64_t chunk = max_chunk == 7 ? 7 : out_image;
        detops::dispatch_element_bits("max_unpool", out, [&](auto tag) {
          using bits_t = decltype(tag);
          const detops::MaxUnpoolPlaneOp<bits_t> op{static_cast<const bits_t*>(self.const_data_ptr()),
                                                    indices.const_data_ptr<int64_t>(),
                                                    static_cast<bits_t*>(out.data_ptr()), in_image, out_image,
                                                    static_cast<int32_t>(chunk), static_cast<int32_t>(chunks)};
          std::vector<int64_t> blocks(planes * chunks);
          std::iota(blocks.begin(), blocks.end(), 0);
          std::shuffle(blocks.begin(), blocks.end(), rng);
          std::vector<int32_t> order_in(in_image);
          std::iota(order_in.begin(), order_in.end(), 0);
          for (const int64_t q : blocks) {
            const int64_t p = q / chunks;
            const auto c = static_cast<int32_t>(q % chunks);
            std::vector<int32_t> winner(op.size(c), -1), order_out(op.size(c));
            std::shuffle(order_in.begin(), order_in.end(), rng);
            for (const int32_t j : order_in) {
              const int32_t d = op.dest(p, c, j);
              if (d >= 0) winner[d] = std::max(winner[d], j);
            }
            std::iota(order_out.begin(), order_out.end(), 0);
            std::shuffle(order_out.begin(), order_out.end(), rng);
            for (const int32_t o : order_out) op.write(p, c, o, winner[o]);
          }
        });
        expect_same_bits(out, twin, std::string(c10::toString(dtype)) + ", width " + std::to_string(out_w) +
                                        ", chunks of " + std::to_string(chunk));
      }
    }
  }
}

}  // namespace
