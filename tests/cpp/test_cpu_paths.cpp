// The CPU's fast paths against the general ones, on the same inputs, bit for bit: the resampling gathers
// (ops/upsample_op.h, ops/upsample_aa_op.h) by rows, with channels or planes as lanes, and as the CUDA
// kernel's one element per index with 32-bit and 64-bit index math; median by selection, by the stable sort
// and, for short rows, by counting ranks (ops/median_op.h); the grid sampler's grad_grid with each form of
// the tree and its grad_input with and without the sort, and its reflection in integers against std::fmod
// (ops/grid_sampler_op.h);
// the CTC loss gradient with rows as lanes, element by element and by the CUDA warp kernel's blocks
// (ops/ctc_loss_op.h).
#include "ops/ctc_loss_op.h"
#include "ops/grid_sampler_op.h"
#include "ops/median_op.h"
#include "ops/upsample_aa_op.h"
#include "ops/sort_reduce_cpu.h"
#include "ops/upsample_op.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace {

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.strides() == b.strides() &&
         at::equal(a.contiguous().view(at::kByte), b.contiguous().view(at::kByte));
}

// A linear-family call (linear maps, or the identity where an axis keeps its size; cubic with `cubic`).
detops::UpsampleSpec spec_for(const std::vector<int64_t>& in, const std::vector<int64_t>& out, bool cubic,
                              bool align_corners) {
  detops::UpsampleSpec spec{};
  spec.align_corners = align_corners;
  const int n = static_cast<int>(in.size());
  for (int k = 0; k < 3; ++k) {
    const int a = k - (3 - n);
    spec.in[k] = a >= 0 ? in[a] : 1;
    spec.out[k] = a >= 0 ? out[a] : 1;
    spec.map[k] = a < 0 || spec.in[k] == spec.out[k] ? detops::UpsampleMap::Identity
                  : cubic                          ? detops::UpsampleMap::Cubic
                                                   : detops::UpsampleMap::Linear;
  }
  return spec;
}

void expect_paths_agree(const std::vector<int64_t>& in, const std::vector<int64_t>& out, bool cubic,
                        bool align_corners, bool channels_last, at::ScalarType dtype, int64_t channels) {
  using detops::GatherPath;
  const detops::UpsampleSpec spec = spec_for(in, out, cubic, align_corners);
  std::vector<int64_t> go_sizes{2, channels}, gi_sizes{2, channels};
  go_sizes.insert(go_sizes.end(), out.begin(), out.end());
  gi_sizes.insert(gi_sizes.end(), in.begin(), in.end());
  const auto fmt = !channels_last ? at::MemoryFormat::Contiguous
                   : in.size() == 3 ? at::MemoryFormat::ChannelsLast3d
                                    : at::MemoryFormat::ChannelsLast;
  at::Tensor go = at::randn(go_sizes);
  go.view(-1).index_put_({at::indexing::Slice(0, at::indexing::None, 37)}, 1e30);  // inf in half: NaN paths
  go = go.to(dtype).contiguous(fmt);
  at::Tensor reference;
  for (GatherPath path : {GatherPath::Auto, GatherPath::Rows, GatherPath::Pixels, GatherPath::Elements32,
                          GatherPath::Elements64}) {
    if (path == GatherPath::Rows && channels_last) continue;
    at::Tensor gi = at::empty(gi_sizes, go.options().memory_format(fmt));
    detops::upsample_backward_cpu(gi, go, spec, channels_last, path);
    if (!reference.defined()) {
      reference = gi;
    } else {
      EXPECT_TRUE(same_bits(gi, reference)) << "path " << static_cast<int>(path) << " dtype " << dtype;
    }
  }
}

TEST(CpuPaths, UpsampleLinearFamilyPathsGiveTheSameBits) {
  at::manual_seed(0);
  for (auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16}) {
    for (bool ac : {false, true}) {
      // 1-D; 2-D linear and cubic, up (a few, > kBlock and > kBlock^2 contributions per element) and down.
      expect_paths_agree({7}, {23}, false, ac, false, dtype, 3);
      expect_paths_agree({5, 7}, {11, 13}, false, ac, false, dtype, 5);
      expect_paths_agree({5, 7}, {11, 13}, false, ac, true, dtype, 5);
      expect_paths_agree({4, 4}, {40, 36}, false, ac, false, dtype, 2);
      expect_paths_agree({4, 4}, {40, 36}, false, ac, true, dtype, 6);
      expect_paths_agree({16, 9}, {4, 30}, true, ac, false, dtype, 4);
      expect_paths_agree({3, 3}, {80, 90}, true, ac, false, dtype, 5);
      // 3-D, with an axis that keeps its size (the identity map).
      expect_paths_agree({3, 4, 5}, {7, 4, 6}, false, ac, false, dtype, 4);
      expect_paths_agree({3, 4, 5}, {7, 4, 6}, false, ac, true, dtype, 3);
      expect_paths_agree({2, 2, 2}, {24, 24, 24}, false, ac, false, dtype, 1);
    }
  }
}

void expect_aa_paths_agree(int64_t planes, int64_t ih, int64_t iw, int64_t oh, int64_t ow, detops::AaFilter filter,
                           bool align_corners, at::ScalarType dtype) {
  using detops::AaPath;
  at::Tensor go = at::randn({planes, 1, oh, ow}).to(dtype);
  const detops::UpsampleAaTables t =
      dtype == at::kDouble
          ? detops::build_aa_tables<double>(filter, ih, iw, oh, ow, align_corners, {}, {}, go.device())
          : detops::build_aa_tables<float>(filter, ih, iw, oh, ow, align_corners, {}, {}, go.device());
  at::Tensor reference;
  for (AaPath path : {AaPath::Auto, AaPath::Planes, AaPath::Columns, AaPath::Elements32, AaPath::Elements64}) {
    at::Tensor gi = at::empty({planes, 1, ih, iw}, go.options());
    detops::upsample_aa_backward_cpu(gi, go, t, path);
    if (!reference.defined()) {
      reference = gi;
    } else {
      EXPECT_TRUE(same_bits(gi, reference)) << "path " << static_cast<int>(path) << " dtype " << dtype;
    }
  }
}

TEST(CpuPaths, AntialiasedUpsamplePathsGiveTheSameBits) {
  at::manual_seed(1);
  for (auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16}) {
    for (auto filter : {detops::AaFilter::kBilinear, detops::AaFilter::kBicubic}) {
      for (bool ac : {false, true}) {
        // Down (windows of 16 / 32; column groups of 8, 16 and 4), up (lists over kBlock), odd sizes, more
        // planes than one group of lanes, and lists over kBlock * kBlock (element by element).
        expect_aa_paths_agree(3, 64, 64, 8, 8, filter, ac, dtype);
        expect_aa_paths_agree(3, 64, 64, 16, 4, filter, ac, dtype);
        expect_aa_paths_agree(3, 32, 64, 8, 16, filter, ac, dtype);
        expect_aa_paths_agree(2, 8, 8, 32, 32, filter, ac, dtype);
        expect_aa_paths_agree(70, 17, 23, 7, 40, filter, ac, dtype);
        expect_aa_paths_agree(37, 50, 203, 9, 11, filter, ac, dtype);
        expect_aa_paths_agree(2, 3, 2, 100, 90, filter, ac, dtype);
      }
    }
  }
}

void expect_median_paths_agree(const at::Tensor& rows, bool ignore_nan) {
  const int64_t R = rows.size(0);
  at::Tensor v1 = at::empty({R}, rows.options()), i1 = at::empty({R}, rows.options().dtype(at::kLong));
  at::Tensor v2 = at::empty({R}, rows.options()), i2 = at::empty({R}, rows.options().dtype(at::kLong));
  detops::median_select_cpu(rows, v1, i1, ignore_nan);
  detops::median_sort_compute<detops::cpu::Engine>(rows, v2, i2, ignore_nan, detops::MedianStableSortRows());
  EXPECT_TRUE(same_bits(v1, v2)) << rows.scalar_type() << " n " << rows.size(1) << " nan " << ignore_nan;
  EXPECT_TRUE(same_bits(i1, i2)) << rows.scalar_type() << " n " << rows.size(1) << " nan " << ignore_nan;
  if (rows.size(1) > detops::kMedianShortRow) return;
  at::Tensor v3 = at::empty({R}, rows.options()), i3 = at::empty({R}, rows.options().dtype(at::kLong));
  detops::median_short_rows_compute<detops::cpu::Engine>(rows, v3, i3, ignore_nan);
  EXPECT_TRUE(same_bits(v3, v2)) << "short " << rows.scalar_type() << " n " << rows.size(1) << " nan " << ignore_nan;
  EXPECT_TRUE(same_bits(i3, i2)) << "short " << rows.scalar_type() << " n " << rows.size(1) << " nan " << ignore_nan;
}

TEST(CpuPaths, MedianBySelectionEqualsMedianBySort) {
  at::manual_seed(2);
  for (int64_t n : {1, 2, 3, 9, 10, 31, 32, 33, 100, 1025}) {
    for (auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16}) {
      // Few distinct values (ties everywhere), signed zeros, NaN in some rows and all of one row.
      at::Tensor rows = at::randint(-3, 4, {6, n}).to(dtype);
      rows.index_put_({0}, at::where(at::rand({n}) < 0.5, at::zeros({n}), -at::zeros({n})).to(dtype));
      rows.index_put_({1}, at::where(at::rand({n}) < 0.3, at::full({n}, NAN), at::randn({n})).to(dtype));
      rows.index_put_({2}, at::full({n}, NAN).to(dtype));
      for (bool ignore_nan : {false, true}) expect_median_paths_agree(rows, ignore_nan);
    }
    for (auto dtype : {at::kByte, at::kChar, at::kShort, at::kInt, at::kLong}) {
      expect_median_paths_agree(at::randint(0, 5, {4, n}).to(dtype), false);
    }
  }
}

TEST(CpuPaths, GridSamplerFoldsAndStreamingInputGradGiveTheSameBits) {
  at::manual_seed(3);
  for (auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16}) {
    for (int dims : {2, 3}) {
      for (int interpolation : {detops::kGridBilinear, detops::kGridNearest, detops::kGridBicubic}) {
        if (dims == 3 && interpolation == detops::kGridBicubic) continue;
        // C * taps below kBlock, above, and above kBlock^2 (bicubic); grid points spread over the input, or
        // clustered so that pixels collect more than kBlock contributions.
        for (int64_t C : {1, 3, 7, 70}) {
          for (bool clustered : {false, true}) {
            detops::GridGeom g{};
            g.dims = dims;
            g.N = 2;
            g.C = C;
            g.in[0] = dims == 3 ? 4 : 1;
            g.in[1] = 5;
            g.in[2] = 6;
            g.out[0] = dims == 3 ? 3 : 1;
            g.out[1] = clustered ? 9 : 3;
            g.out[2] = clustered ? 8 : 4;
            g.interpolation = interpolation;
            g.padding = C == 3 ? detops::kGridReflection : detops::kGridZeros;
            g.align_corners = C == 7;
            std::vector<int64_t> in_sizes{g.N, C}, out_sizes{g.N, C}, grid_sizes{g.N};
            for (int k = 3 - dims; k < 3; ++k) {
              in_sizes.push_back(g.in[k]);
              out_sizes.push_back(g.out[k]);
              grid_sizes.push_back(g.out[k]);
            }
            grid_sizes.push_back(dims);
            const at::Tensor input = at::randn(in_sizes).to(dtype);
            const at::Tensor grad_output = at::randn(out_sizes).to(dtype);
            const at::Tensor grid =
                (clustered ? at::rand(grid_sizes) * 0.1 + 0.2 : at::rand(grid_sizes) * 2.4 - 1.2).to(dtype);
            at::Tensor ref_grid, ref_input;
            for (auto fold : {detops::TreeForm::Streaming, detops::TreeForm::TwoLevel, detops::TreeForm::Block}) {
              if (fold == detops::TreeForm::Block && C * g.taps() > detops::kBlock) continue;
              if (fold == detops::TreeForm::TwoLevel && C * g.taps() > detops::kBlock * detops::kBlock) continue;
              for (bool streaming : {false, true}) {
                at::Tensor grad_grid = at::empty_like(grid);
                at::Tensor grad_input = at::zeros_like(input);
                detops::grid_sampler_backward_compute<detops::cpu::Engine, true>(g, grad_output, input, grid, grad_grid,
                                                                                 grad_input, fold, streaming);
                if (!ref_grid.defined()) {
                  ref_grid = grad_grid;
                  ref_input = grad_input;
                } else {
                  EXPECT_TRUE(same_bits(grad_grid, ref_grid)) << dtype << " dims " << dims << " C " << C;
                  EXPECT_TRUE(same_bits(grad_input, ref_input)) << dtype << " dims " << dims << " C " << C;
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST(CpuPaths, CtcGradientByLanesEqualsElementByElement) {
  at::manual_seed(4);
  for (auto dtype : {at::kFloat, at::kDouble}) {
    for (bool zero_infinity : {false, true}) {
      // Short targets (groups within one block) and long ones (the blank's group of 41 positions, two blocks, and
      // of 101, four blocks: their order shows in the tree); an input too short for its target (infinite loss) and
      // an empty one.
      const int64_t T = 240, N = 6, C = 6, S = 100;
      // Nearly uniform probabilities spread each collection over many positions, so no block dominates its sum.
      const at::Tensor log_probs =
          at::randn({T, N, C}, at::TensorOptions().dtype(dtype)).mul_(0.05).log_softmax(2);
      const at::Tensor targets = at::randint(1, C, {N, S}, at::kLong);
      const std::vector<int64_t> il{70, 61, 9, 0, 33, 240}, tl{8, 40, 12, 0, 3, 100};
      const auto [nll, log_alpha] = at::_ctc_loss(log_probs, targets, il, tl, 0, zero_infinity);
      const at::Tensor grad = at::rand({N}, at::TensorOptions().dtype(dtype)).add_(0.5);
      detops::CtcPlan plan;
      plan.batch = N;
      plan.tg_stride = targets.stride(1);
      plan.meta.resize(3 * N);
      for (int64_t b = 0; b < N; ++b) {
        plan.meta[b] = il[b];
        plan.meta[N + b] = tl[b];
        plan.meta[2 * N + b] = b * targets.stride(0);
        plan.max_target_length = std::max(plan.max_target_length, tl[b]);
      }
      at::Tensor a = at::empty_like(log_probs), b = at::empty_like(log_probs), w = at::empty_like(log_probs);
      using Path = detops::CtcGradPath;
      detops::ctc_loss_backward_cpu(a, grad, log_probs, targets, plan, nll, log_alpha, 0, zero_infinity, Path::kLanes);
      detops::ctc_loss_backward_cpu(b, grad, log_probs, targets, plan, nll, log_alpha, 0, zero_infinity,
                                    Path::kElements);
      detops::ctc_loss_backward_cpu(w, grad, log_probs, targets, plan, nll, log_alpha, 0, zero_infinity,
                                    Path::kBlocks);
      EXPECT_TRUE(same_bits(a, b)) << dtype << " zero_infinity " << zero_infinity
                                   << ": beta side by side, gradient by lanes";
      EXPECT_TRUE(same_bits(w, b)) << dtype << " zero_infinity " << zero_infinity << ": the warp kernel's blocks";
    }
  }
}

// Stock's reflection (reflect_coordinates_set_grad) with its two std::fmod, as reflect_set_grad was written
// before it took the remainder and the parity in integers.
template <typename acc_t>
acc_t reflect_by_fmod(acc_t in, int64_t twice_low, int64_t twice_high, acc_t* grad) {
  if (twice_low == twice_high) {
    *grad = acc_t(0);
    return acc_t(0);
  }
  const acc_t min = static_cast<acc_t>(twice_low) / 2;
  const acc_t span = static_cast<acc_t>(twice_high - twice_low) / 2;
  in = in - min;
  acc_t sign = acc_t(1);
  if (in < acc_t(0)) {
    sign = acc_t(-1);
    in = -in;
  }
  const acc_t extra = std::fmod(in, span);
  const acc_t flips = std::floor(in / span);
  if (std::fmod(flips, acc_t(2)) == acc_t(0)) {
    *grad = sign;
    return extra + min;
  }
  *grad = -sign;
  return span - extra + min;
}

template <typename acc_t>
bool bits_equal(acc_t a, acc_t b) {
  return std::memcmp(&a, &b, sizeof(acc_t)) == 0;
}

template <typename acc_t>
void check_reflection(int64_t m, std::mt19937_64& rng, int64_t& checked) {
  constexpr acc_t kInf = std::numeric_limits<acc_t>::infinity();
  const auto span = static_cast<acc_t>(m) / 2;
  const auto limit = static_cast<acc_t>(detops::grid::kReflectIntegerLimit);
  std::vector<acc_t> values = {acc_t(0), -acc_t(0), span, -span, 2 * span, 3 * span, acc_t(0.5), acc_t(-0.5),
                               std::numeric_limits<acc_t>::denorm_min(), std::numeric_limits<acc_t>::min(),
                               limit, -limit, std::nextafter(limit, acc_t(0)), std::nextafter(-limit, acc_t(0)),
                               acc_t(1e20), kInf, -kInf, std::numeric_limits<acc_t>::quiet_NaN()};
  // Near the multiples of the span, where the quotient's rounding and the remainder disagree.
  for (int64_t k = 1; k <= 9; ++k) {
    const acc_t x = static_cast<acc_t>(k) * span;
    for (acc_t v : {x, std::nextafter(x, acc_t(0)), std::nextafter(x, kInf)}) {
      values.push_back(v);
      values.push_back(-v);
      values.push_back(v - acc_t(0.5));
    }
  }
  std::uniform_real_distribution<double> near(-4.0 * static_cast<double>(m), 4.0 * static_cast<double>(m));
  std::uniform_real_distribution<double> far(-static_cast<double>(limit), static_cast<double>(limit));
  for (int i = 0; i < 4000; ++i) values.push_back(static_cast<acc_t>(i % 4 == 0 ? far(rng) : near(rng)));
  for (int64_t twice_low : {int64_t{-1}, int64_t{0}}) {
    for (acc_t v : values) {
      acc_t got_grad, want_grad;
      const acc_t got = detops::grid::reflect_set_grad(v, twice_low, twice_low + m, &got_grad);
      const acc_t want = reflect_by_fmod(v, twice_low, twice_low + m, &want_grad);
      ASSERT_TRUE(bits_equal(got, want) && bits_equal(got_grad, want_grad))
          << sizeof(acc_t) << "-byte value " << v << ", span " << m << " / 2 from " << twice_low << ": " << got
          << " (grad " << got_grad << ") against " << want << " (grad " << want_grad << ")";
      ++checked;
    }
  }
}

TEST(CpuPaths, ReflectionInIntegersGivesStocksBits) {
  std::mt19937_64 rng(11);
  int64_t checked = 0;
  for (int64_t m : std::vector<int64_t>{1, 2, 3, 7, 14, 15, 16, 17, 127, 1000, 65535, (int64_t{1} << 24) - 1,
                                        int64_t{1} << 24, (int64_t{1} << 24) + 2, int64_t{1} << 40}) {
    check_reflection<float>(m, rng, checked);
    check_reflection<double>(m, rng, checked);
  }
  EXPECT_GT(checked, 200000);
}

TEST(CpuPaths, DividerMatchesDivision) {
  for (int64_t d : std::vector<int64_t>{1, 2, 3, 5, 7, 16, 255, 1000, 65537, (int64_t{1} << 30) + 3,
                                        (int64_t{1} << 31) - 1}) {
    const detops::Divider<int32_t> div(static_cast<int32_t>(d));
    for (int64_t n : {int64_t{0}, int64_t{1}, d - 1, d, d + 1, 3 * d + 2, (int64_t{1} << 31) - 1,
                      (int64_t{1} << 31) - 2, int64_t{123456789}}) {
      if (n < 0 || n >= (int64_t{1} << 31)) continue;
      EXPECT_EQ(div.div(static_cast<int32_t>(n)), n / d) << n << " / " << d;
      EXPECT_EQ(div.mod(static_cast<int32_t>(n)), n % d) << n << " % " << d;
    }
  }
}

}  // namespace
