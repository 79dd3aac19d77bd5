// Antialiased upsample backwards (_upsample_bilinear2d_aa_backward, _upsample_bicubic2d_aa_backward): the
// arithmetic shared by the CPU path (ops/upsample_aa.cpp) and the CUDA kernel (cuda/upsample_aa.cu),
// docs/order_contract.md and docs/upsample_aa.md.
//
// The forward is separable: along one axis, output o reads the input window [xmin(o), xmin(o) + xsize(o))
// with normalised filter weights w(o, j) (stock's rule: a support of interp_size / 2, widened by the scale
// when downsampling; a triangle for bilinear, Keys' cubic with a = -0.5 for bicubic). Output (oy, ox) gives
// input (iy, ix) the contribution wx(ox, ix) * wy(oy, iy) * grad_output[oy, ox] when both windows cover it.
// Per axis the windows are transposed once on the host into a table: for each input position, the outputs
// whose window covers it, in ascending order, with their weights (AaAxisTable). A grad_input element then
// walks its rows' list times its columns' list, which is ascending output linear position (row-major over
// (oy, ox)): the source order of the contract, folded with its tree.
#pragma once

#include <cstdint>

#include "ops/contract.h"
#include "ops/index_math.h"
#include "ops/tree_form.h"

namespace detops {

// The two filters of stock's antialiased modes, with their support: interp_size / 2 at scale 1.
enum class AaFilter : int { kBilinear = 2, kBicubic = 4 };

// The filter's value at distance x, each operation rounded on its own (the order of stock's CUDA
// functors). NB: the weights are computed on the host only, once per call, so every device reads the same
// table; the _rn arithmetic keeps them independent of the host compiler's contraction choices too.
template <typename acc_t>
C10_HOST_DEVICE inline acc_t aa_filter(AaFilter filter, acc_t x) {
  if (x < acc_t(0)) x = -x;
  if (filter == AaFilter::kBilinear) {
    return x < acc_t(1) ? add_rn(acc_t(1), -x) : acc_t(0);
  }
  const acc_t a = acc_t(-0.5);
  if (x < acc_t(1)) {
    // ((a + 2) x - (a + 3)) x x + 1
    const acc_t t = add_rn(mul_rn(add_rn(a, acc_t(2)), x), -add_rn(a, acc_t(3)));
    return add_rn(mul_rn(mul_rn(t, x), x), acc_t(1));
  }
  if (x < acc_t(2)) {
    // (((x - 5) x + 8) x - 4) a
    const acc_t t = add_rn(mul_rn(add_rn(mul_rn(add_rn(x, acc_t(-5)), x), acc_t(8)), x), acc_t(-4));
    return mul_rn(t, a);
  }
  return acc_t(0);
}

// One axis of one call: stock's scale (input / output, or 1 / scale_factor, or (in - 1) / (out - 1) with
// align_corners), its support and the largest window it allows.
template <typename acc_t>
struct AaAxis {
  int64_t isize;
  int64_t osize;
  acc_t scale;
  acc_t support;
  acc_t invscale;
  int64_t max_window;
  AaFilter filter;

  C10_HOST_DEVICE AaAxis(int64_t in, int64_t out, acc_t s, AaFilter f)
      : isize(in), osize(out), scale(s), filter(f) {
    const acc_t half_size = acc_t(static_cast<int>(f) / 2);
    support = scale >= acc_t(1) ? mul_rn(half_size, scale) : half_size;
    invscale = scale >= acc_t(1) ? div_rn(acc_t(1), scale) : acc_t(1);
    int64_t c = static_cast<int64_t>(support);
    if (static_cast<acc_t>(c) < support) ++c;  // ceil of a non-negative value
    max_window = c * 2 + 1;
  }

  // Output o's window: its first input and its length (stock's xmin, xsize, clamped as its CPU kernel
  // clamps a rounding overshoot). Returns the window's centre.
  C10_HOST_DEVICE acc_t window(int64_t o, int64_t& xmin, int64_t& xsize) const {
    const acc_t center = mul_rn(scale, add_rn(static_cast<acc_t>(o), acc_t(0.5)));
    const int64_t lo = static_cast<int64_t>(add_rn(add_rn(center, -support), acc_t(0.5)));
    const int64_t hi = static_cast<int64_t>(add_rn(add_rn(center, support), acc_t(0.5)));
    xmin = lo > 0 ? lo : 0;
    xsize = (hi < isize ? hi : isize) - xmin;
    xsize = xsize < 0 ? 0 : (xsize > max_window ? max_window : xsize);
    return center;
  }

  // The unnormalised weight of input xmin + j in the window of centre `center`.
  C10_HOST_DEVICE acc_t raw_weight(acc_t center, int64_t xmin, int64_t j) const {
    const acc_t xmin_m_center = add_rn(static_cast<acc_t>(xmin), -center);
    const acc_t d = add_rn(add_rn(static_cast<acc_t>(j), xmin_m_center), acc_t(0.5));
    return aa_filter(filter, mul_rn(d, invscale));
  }
};

// One axis's transposed windows: input i is covered by outputs out[start[i] .. start[i + 1]) (ascending)
// with weights w[...] (normalised by their window's sum).
template <typename acc_t>
struct AaAxisTable {
  const int64_t* start;  // isize + 1 offsets
  const int64_t* out;
  const acc_t* w;
};

// The per-element arithmetic: grad_input element (p, y, x) walks its rows' outputs times its columns'
// outputs, in ascending (oy, ox), each contribution (wx * wy) * grad_output, folded by the contract's tree.
template <typename scalar_t>
struct UpsampleAaBackwardOp {
  using acc_t = acc_type<scalar_t>;
  const scalar_t* grad_out;  // contiguous [planes, OH, OW]
  scalar_t* grad_in;         // contiguous [planes, IH, IW]
  int64_t ih, iw, oh, ow;
  AaAxisTable<acc_t> rows;
  AaAxisTable<acc_t> cols;
  TreeForm fold;  // NB: the smallest form that holds the product of the longest lists (ops/tree_form.h)

  template <typename index_t, typename Acc>
  C10_HOST_DEVICE void visit(const scalar_t* plane, index_t y, index_t x, Acc& acc) const {
    const index_t a0 = static_cast<index_t>(rows.start[y]), a1 = static_cast<index_t>(rows.start[y + 1]);
    const index_t b0 = static_cast<index_t>(cols.start[x]), b1 = static_cast<index_t>(cols.start[x + 1]);
    const index_t w = static_cast<index_t>(ow);
    for (index_t a = a0; a < a1; ++a) {
      const acc_t wy = rows.w[a];
      const scalar_t* row = plane + static_cast<index_t>(rows.out[a]) * w;
      for (index_t b = b0; b < b1; ++b) {
        acc.push(mul_rn(mul_rn(cols.w[b], wy), to_acc(row[static_cast<index_t>(cols.out[b])])));
      }
    }
  }

  // grad_input element (p, y, x), written at offset `at`.
  template <typename index_t>
  C10_HOST_DEVICE void element(index_t p, index_t y, index_t x, index_t at) const {
    const index_t total = static_cast<index_t>((rows.start[y + 1] - rows.start[y]) * (cols.start[x + 1] - cols.start[x]));
    if (total == 0) {
      grad_in[at] = round_to<scalar_t>(acc_t(0));
      return;
    }
    const scalar_t* plane = grad_out + p * static_cast<index_t>(oh * ow);
    const acc_t sum = with_tree_form<acc_t>(fold, [&](auto f) {
      visit(plane, y, x, f);
      return f.finish();
    });
    grad_in[at] = round_to<scalar_t>(add_rn(acc_t(0), sum));
  }
};

// One grad_input element per index (the CUDA kernel's thread, or the CPU's per-element path): the linear
// index split by dividers fixed per call. index_t is int32_t when every offset fits, else int64_t.
template <typename scalar_t, typename index_t>
struct UpsampleAaElementOp {
  using index_type = index_t;
  UpsampleAaBackwardOp<scalar_t> op;
  Divider<index_t> div_w, div_h;

  UpsampleAaElementOp(const UpsampleAaBackwardOp<scalar_t>& o) : op(o), div_w(static_cast<index_t>(o.iw)), div_h(static_cast<index_t>(o.ih)) {}

  C10_HOST_DEVICE void operator()(index_t idx) const {
    const index_t rest = div_w.div(idx);
    const index_t x = idx - rest * static_cast<index_t>(op.iw);
    const index_t p = div_h.div(rest);
    const index_t y = rest - p * static_cast<index_t>(op.ih);
    op.element(p, y, x, idx);
  }
};

}  // namespace detops

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>

#include <ATen/ops/empty.h>

#include "ops/table_gather_plan.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

namespace detops {

// The per-call tables, built on the host (ops/upsample_aa.cpp) and moved to grad_in's device in one copy:
// `blob` (int64) holds the rows' then the columns' offsets and outputs, then from `weights_at` their weights
// (acc_t of the dtype, rows' then columns', 8-byte aligned). `longest`: the most contributions any element
// has (the longest row list times the longest column list).
struct UpsampleAaTables {
  at::Tensor blob;
  int64_t row_start, row_out, col_start, col_out;  // int64 offsets into blob
  int64_t weights_at;                              // int64 offset of the weights in blob
  int64_t row_w, col_w;                            // acc_t offsets into the weights
  int64_t longest;
};

// Stock's area_pixel_compute_scale in the accumulate type: (in - 1) / (out - 1) with align_corners, else
// 1 / scale where a positive scale is given, else in / out.
template <typename acc_t>
inline acc_t aa_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners) {
    return out > 1 ? static_cast<acc_t>(in - 1) / static_cast<acc_t>(out - 1) : acc_t(0);
  }
  return (scale.has_value() && *scale > 0.) ? static_cast<acc_t>(1.0 / *scale)
                                             : static_cast<acc_t>(in) / static_cast<acc_t>(out);
}

// One axis's windows transposed: for each input, the outputs covering it in ascending order, with their
// normalised weights (stock's: the window's raw weights folded left to right, each divided by the sum
// unless it is zero).
template <typename acc_t>
inline void build_aa_axis(const AaAxis<acc_t>& ax, std::vector<int64_t>& start, std::vector<int64_t>& out,
                std::vector<acc_t>& w) {
  std::vector<int64_t> xmin(ax.osize), xsize(ax.osize);
  std::vector<acc_t> centers(ax.osize);
  start.assign(ax.isize + 1, 0);
  for (int64_t o = 0; o < ax.osize; ++o) {
    centers[o] = ax.window(o, xmin[o], xsize[o]);
    for (int64_t j = 0; j < xsize[o]; ++j) ++start[xmin[o] + j + 1];
  }
  for (int64_t i = 0; i < ax.isize; ++i) start[i + 1] += start[i];
  out.assign(start[ax.isize], 0);
  w.assign(start[ax.isize], acc_t(0));
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  std::vector<acc_t> window;
  // NB: outputs in ascending order, so each input's list is in ascending output order: the source order of
  // the contract (docs/order_contract.md).
  for (int64_t o = 0; o < ax.osize; ++o) {
    window.resize(xsize[o]);
    acc_t total = acc_t(0);
    for (int64_t j = 0; j < xsize[o]; ++j) {
      window[j] = ax.raw_weight(centers[o], xmin[o], j);
      total = add_rn(total, window[j]);
    }
    for (int64_t j = 0; j < xsize[o]; ++j) {
      const int64_t k = fill[xmin[o] + j]++;
      out[k] = o;
      w[k] = total != acc_t(0) ? div_rn(window[j], total) : window[j];
    }
  }
}

template <typename acc_t>
inline UpsampleAaTables build_aa_tables(AaFilter filter, int64_t ih, int64_t iw, int64_t oh, int64_t ow, bool align_corners,
                              std::optional<double> scales_h, std::optional<double> scales_w,
                              const at::Device& device) {
  std::vector<int64_t> rs, ro, cs, co;
  std::vector<acc_t> rw, cw;
  build_aa_axis(AaAxis<acc_t>(ih, oh, aa_scale<acc_t>(ih, oh, align_corners, scales_h), filter), rs, ro, rw);
  build_aa_axis(AaAxis<acc_t>(iw, ow, aa_scale<acc_t>(iw, ow, align_corners, scales_w), filter), cs, co, cw);
  UpsampleAaTables t;
  t.row_start = 0;
  t.row_out = t.row_start + static_cast<int64_t>(rs.size());
  t.col_start = t.row_out + static_cast<int64_t>(ro.size());
  t.col_out = t.col_start + static_cast<int64_t>(cs.size());
  t.weights_at = t.col_out + static_cast<int64_t>(co.size());
  t.row_w = 0;
  t.col_w = static_cast<int64_t>(rw.size());
  const int64_t weight_bytes = static_cast<int64_t>((rw.size() + cw.size()) * sizeof(acc_t));
  const int64_t words = t.weights_at + (weight_bytes + 7) / 8;
  // Pinned for a CUDA call, so the one copy below is asynchronous on the current stream (the caching host
  // allocator keeps the buffer until the copy has run).
  at::Tensor blob = at::empty({words}, at::TensorOptions().dtype(at::kLong).pinned_memory(device.is_cuda()));
  int64_t* ip = blob.data_ptr<int64_t>();
  acc_t* wp = reinterpret_cast<acc_t*>(ip + t.weights_at);
  const auto put = [](auto* dst, const auto& v) {
    if (!v.empty()) std::memcpy(dst, v.data(), v.size() * sizeof(v[0]));
  };
  put(ip + t.row_start, rs);
  put(ip + t.row_out, ro);
  put(ip + t.col_start, cs);
  put(ip + t.col_out, co);
  put(wp + t.row_w, rw);
  put(wp + t.col_w, cw);
  t.blob = blob.to(device, /*non_blocking=*/true);
  const auto longest = [](const std::vector<int64_t>& start) {
    int64_t m = 0;
    for (size_t i = 0; i + 1 < start.size(); ++i) m = std::max(m, start[i + 1] - start[i]);
    return m;
  };
  t.longest = longest(rs) * longest(cs);
  return t;
}

template <typename scalar_t>
UpsampleAaBackwardOp<scalar_t> make_upsample_aa_backward_op(at::Tensor& grad_in, const at::Tensor& grad_out,
                                                           const UpsampleAaTables& t) {
  using acc_t = acc_type<scalar_t>;
  UpsampleAaBackwardOp<scalar_t> op;
  op.grad_out = grad_out.const_data_ptr<scalar_t>();
  op.grad_in = grad_in.data_ptr<scalar_t>();
  op.ih = grad_in.size(2);
  op.iw = grad_in.size(3);
  op.oh = grad_out.size(2);
  op.ow = grad_out.size(3);
  const int64_t* index = t.blob.const_data_ptr<int64_t>();
  const acc_t* weights = reinterpret_cast<const acc_t*>(index + t.weights_at);
  op.rows = {index + t.row_start, index + t.row_out, weights + t.row_w};
  op.cols = {index + t.col_start, index + t.col_out, weights + t.col_w};
  op.fold = tree_form_for(t.longest);
  return op;
}

// True when every offset into grad_in and grad_out (both contiguous) fits the 32-bit index math.
inline bool upsample_aa_fits_int32(const at::Tensor& grad_in, const at::Tensor& grad_out) {
  constexpr int64_t kMax = int64_t{1} << 31;
  return grad_in.numel() < kMax && grad_out.numel() < kMax;
}

// The CPU's ways through one call: Planes (one (y, x) position per iteration, the planes folded side by side
// as lanes), Columns (groups of columns with the same outputs, times the planes, side by side), Auto
// (Columns where the columns form groups of four or more on average, else Planes), or the CUDA kernel's one
// element per index with 32-bit or 64-bit index math. All give the same bits (tests/cpp/test_cpu_paths.cpp).
enum class AaPath : int { Auto = 0, Planes = 1, Columns = 2, Elements32 = 3, Elements64 = 4 };

// N values of T side by side as one vector (GCC's vector extension: element-wise operations, the same IEEE
// operations as on each value alone).
template <typename T, int N>
struct LaneVector {
  typedef T type __attribute__((vector_size(N * sizeof(T))));
};

// One (y, x) position per iteration, up to kLanes planes at a time as lanes: the same contributions in the
// same order for every plane (up to kBlock * kBlock of them, the two-level tree with shared counters),
// longer sequences element by element. grad_output is first copied planes-innermost (acc_t, per group of
// planes, each position's lanes padded to whole vectors of 16 bytes), so that the lanes' sums run side by
// side in registers over a position's contributions.
template <typename scalar_t>
void upsample_aa_backward_planes(const UpsampleAaBackwardOp<scalar_t>& op, int64_t planes, int64_t longest) {
  using acc_t = acc_type<scalar_t>;
  constexpr int64_t kLanes = 64;
  // Lanes: kPerVector acc_t in 16 bytes (a register of the baseline x86-64).
  constexpr int64_t kPerVector = static_cast<int64_t>(16 / sizeof(acc_t));
  using Lanes = typename LaneVector<acc_t, static_cast<int>(kPerVector)>::type;
  const int64_t in_plane = op.ih * op.iw, out_plane = op.oh * op.ow;
  const int64_t groups = (planes + kLanes - 1) / kLanes;
  const auto lanes_of = [&](int64_t g) { return std::min(kLanes, planes - g * kLanes); };
  const auto stride_of = [&](int64_t g) { return (lanes_of(g) + kPerVector - 1) / kPerVector * kPerVector; };
  // Group g's copy at g * kLanes * out_plane: position o's lanes at o * stride_of(g); padding lanes 0.
  const std::unique_ptr<acc_t[]> lanes_first(new acc_t[static_cast<size_t>(groups * kLanes * out_plane)]);
  at::parallel_for(0, groups * op.oh, std::max<int64_t>(1, 16384 / (kLanes * op.ow)), [&](int64_t begin, int64_t end) {
    for (int64_t go = begin; go < end; ++go) {
      const int64_t g = go / op.oh, oy = go - g * op.oh, lanes = lanes_of(g), stride = stride_of(g);
      acc_t* dst = lanes_first.get() + g * kLanes * out_plane + oy * op.ow * stride;
      for (int64_t ox = 0; ox < op.ow; ++ox, dst += stride) {
        const scalar_t* src = op.grad_out + g * kLanes * out_plane + oy * op.ow + ox;
        for (int64_t l = 0; l < lanes; ++l) dst[l] = to_acc(src[l * out_plane]);
        for (int64_t l = lanes; l < stride; ++l) dst[l] = acc_t(0);
      }
    }
  });
  const int64_t grain =
      std::max<int64_t>(1, 16384 / std::max<int64_t>(1, std::min(planes, kLanes) * longest * op.iw));
  // One (group of planes, y) row per step, its x positions in the inner loop: no division per position.
  at::parallel_for(0, groups * op.ih, grain, [&](int64_t begin, int64_t end) {
    const auto position = [&](int64_t g, int64_t y, int64_t x) {
      const int64_t pos = y * op.iw + x;
      const int64_t p0 = g * kLanes, lanes = lanes_of(g), stride = stride_of(g);
      const int64_t a0 = op.rows.start[y], a1 = op.rows.start[y + 1];
      const int64_t b0 = op.cols.start[x], b1 = op.cols.start[x + 1];
      const int64_t total = (a1 - a0) * (b1 - b0);
      scalar_t* out = op.grad_in + p0 * in_plane + pos;
      if (total > kBlock * kBlock) {
        for (int64_t l = 0; l < lanes; ++l) op.element(p0 + l, y, x, (p0 + l) * in_plane + pos);
        return;
      }
      if (total == 0) {
        for (int64_t l = 0; l < lanes; ++l) out[l * in_plane] = round_to<scalar_t>(acc_t(0));
        return;
      }
      const acc_t* base = lanes_first.get() + g * kLanes * out_plane;
      // NB: kVectors vectors of lanes at c0 side by side (element-wise IEEE operations: each lane's value is its
      // per-element code's), in registers; per plane, the pushes of TwoLevelTree (BlockFold's for up to
      // kBlock), in source order.
      const auto chunk = [&](int64_t c0, auto vectors) {
        constexpr int kVectors = decltype(vectors)::value;
        Lanes block[kVectors] = {}, top[kVectors] = {};
        int in_block = 0;
        bool any_top = false;
        for (int64_t a = a0; a < a1; ++a) {
          const acc_t wy = op.rows.w[a];
          const acc_t* row = base + op.rows.out[a] * op.ow * stride + c0;
          for (int64_t b = b0; b < b1; ++b) {
            const acc_t w = mul_rn(op.cols.w[b], wy);
            const acc_t* v = row + op.cols.out[b] * stride;
            for (int k = 0; k < kVectors; ++k) {
              Lanes x;
              std::memcpy(&x, v + k * kPerVector, sizeof(x));
              block[k] = in_block == 0 ? w * x : block[k] + w * x;
            }
            if (++in_block == kBlock) {
              if (any_top) {
                for (int k = 0; k < kVectors; ++k) top[k] = top[k] + block[k];
              } else {
                for (int k = 0; k < kVectors; ++k) top[k] = block[k];
              }
              any_top = true;
              in_block = 0;
            }
          }
        }
        if (in_block != 0) {
          if (any_top) {
            for (int k = 0; k < kVectors; ++k) top[k] = top[k] + block[k];
          } else {
            for (int k = 0; k < kVectors; ++k) top[k] = block[k];
          }
        }
        acc_t sum[kVectors * kPerVector];
        std::memcpy(sum, top, sizeof(sum));
        const int64_t n = std::min<int64_t>(kVectors * kPerVector, lanes - c0);
        for (int64_t j = 0; j < n; ++j) out[(c0 + j) * in_plane] = round_to<scalar_t>(add_rn(acc_t(0), sum[j]));
      };
      // Two vectors at a time while more than one remains (stride covers them: a whole number of vectors).
      int64_t c0 = 0;
      for (; lanes - c0 > kPerVector; c0 += 2 * kPerVector) chunk(c0, std::integral_constant<int, 2>());
      if (c0 < lanes) chunk(c0, std::integral_constant<int, 1>());
    };
    for (int64_t gy = begin; gy < end; ++gy) {
      const int64_t g = gy / op.ih, y = gy - g * op.ih;
      for (int64_t x = 0; x < op.iw; ++x) position(g, y, x);
    }
  });
}

// Consecutive columns x whose lists name the same outputs (downsampling: several inputs per window), at
// most kColumnLanes of them: the first x of each group, then iw.
template <typename acc_t>
std::vector<int64_t> aa_column_groups(const AaAxisTable<acc_t>& cols, int64_t iw, int64_t width) {
  std::vector<int64_t> first;
  int64_t x0 = 0;
  for (int64_t x = 0; x < iw; ++x) {
    const int64_t len = cols.start[x + 1] - cols.start[x];
    bool same = x > 0 && x - x0 < width && len == cols.start[x0 + 1] - cols.start[x0];
    for (int64_t j = 0; same && j < len; ++j) same = cols.out[cols.start[x] + j] == cols.out[cols.start[x0] + j];
    if (!same) {
      first.push_back(x);
      x0 = x;
    }
  }
  first.push_back(iw);
  return first;
}

// One (group of planes, y) row per step and, along it, groups of columns whose lists name the same outputs:
// the planes times the group's columns folded side by side (for each contribution the weights of the
// columns are formed once, grad_output's value once per plane). NB: every lane's operations are the
// per-element code's, in source order (BlockFold / TwoLevelTree pushes, shared counters).
template <typename scalar_t>
void upsample_aa_backward_columns(const UpsampleAaBackwardOp<scalar_t>& op, int64_t planes, int64_t longest) {
  using acc_t = acc_type<scalar_t>;
  constexpr int64_t kPlanes = 16, kWidth = 16;
  const int64_t in_plane = op.ih * op.iw, out_plane = op.oh * op.ow;
  const int64_t groups = (planes + kPlanes - 1) / kPlanes;
  const std::vector<int64_t> first = aa_column_groups(op.cols, op.iw, kWidth);
  const int64_t grain =
      std::max<int64_t>(1, 16384 / std::max<int64_t>(1, std::min(planes, kPlanes) * longest * op.iw));
  at::parallel_for(0, groups * op.ih, grain, [&](int64_t begin, int64_t end) {
    acc_t block[kPlanes][kWidth], top[kPlanes][kWidth], w[kWidth];
    for (int64_t gy = begin; gy < end; ++gy) {
      const int64_t g = gy / op.ih, y = gy - g * op.ih;
      const int64_t p0 = g * kPlanes, P = std::min(kPlanes, planes - p0);
      const int64_t a0 = op.rows.start[y], a1 = op.rows.start[y + 1];
      for (size_t k = 0; k + 1 < first.size(); ++k) {
        const int64_t x0 = first[k], W = first[k + 1] - x0;
        const int64_t b0 = op.cols.start[x0], len = op.cols.start[x0 + 1] - b0;
        const int64_t total = (a1 - a0) * len;
        scalar_t* out = op.grad_in + p0 * in_plane + y * op.iw + x0;
        if (total > kBlock * kBlock) {
          for (int64_t p = 0; p < P; ++p) {
            for (int64_t l = 0; l < W; ++l) op.element(p0 + p, y, x0 + l, (p0 + p) * in_plane + y * op.iw + x0 + l);
          }
          continue;
        }
        if (total == 0) {
          for (int64_t p = 0; p < P; ++p) {
            for (int64_t l = 0; l < W; ++l) out[p * in_plane + l] = round_to<scalar_t>(acc_t(0));
          }
          continue;
        }
        int in_block = 0;
        bool any_top = false;
        // The group's columns folded side by side; a width of 4, 8 or 16 known to the compiler, so that the
        // loops over it unroll into whole vectors (the group's width is mostly the downsampling factor).
        const auto fold = [&](auto fixed) {
          constexpr int64_t kFixed = decltype(fixed)::value;
          const int64_t width = kFixed > 0 ? kFixed : W;
          for (int64_t a = a0; a < a1; ++a) {
            const acc_t wy = op.rows.w[a];
            const scalar_t* row = op.grad_out + p0 * out_plane + op.rows.out[a] * op.ow;
            for (int64_t j = 0; j < len; ++j) {
              // Column x0 + l's j-th weight sits at start[x0 + l] + j = b0 + l * len + j.
              for (int64_t l = 0; l < width; ++l) w[l] = mul_rn(op.cols.w[b0 + l * len + j], wy);
              const scalar_t* src = row + op.cols.out[b0 + j];
              for (int64_t p = 0; p < P; ++p) {
                const acc_t v = to_acc(src[p * out_plane]);
                acc_t* bl = block[p];
                if (in_block == 0) {
                  for (int64_t l = 0; l < width; ++l) bl[l] = mul_rn(w[l], v);
                } else {
                  for (int64_t l = 0; l < width; ++l) bl[l] = add_rn(bl[l], mul_rn(w[l], v));
                }
              }
              if (++in_block == kBlock) {
                for (int64_t p = 0; p < P; ++p) {
                  for (int64_t l = 0; l < width; ++l) {
                    top[p][l] = any_top ? add_rn(top[p][l], block[p][l]) : block[p][l];
                  }
                }
                any_top = true;
                in_block = 0;
              }
            }
          }
        };
        if (W == 8) {
          fold(std::integral_constant<int64_t, 8>());
        } else if (W == 16) {
          fold(std::integral_constant<int64_t, 16>());
        } else if (W == 4) {
          fold(std::integral_constant<int64_t, 4>());
        } else {
          fold(std::integral_constant<int64_t, 0>());
        }
        for (int64_t p = 0; p < P; ++p) {
          for (int64_t l = 0; l < W; ++l) {
            const acc_t sum = in_block == 0 ? top[p][l] : (any_top ? add_rn(top[p][l], block[p][l]) : block[p][l]);
            out[p * in_plane + l] = round_to<scalar_t>(add_rn(acc_t(0), sum));
          }
        }
      }
    }
  });
}

template <typename scalar_t, typename index_t>
void upsample_aa_backward_elements_cpu(const UpsampleAaBackwardOp<scalar_t>& op, int64_t n) {
  const UpsampleAaElementOp<scalar_t, index_t> e(op);
  at::parallel_for(0, n, 2048, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) e(static_cast<index_t>(i));
  });
}

// The CUDA path's work as a plan entry, recorded by it and by the CPU path in its place: its tables and
// one gather (plan::table_gather_call).
inline plan::EngineCall upsample_aa_backward_kernels(const UpsampleAaTables& t, const at::Tensor& grad_in,
                                                     const at::Tensor& grad_out) {
  return plan::table_gather_call(static_cast<int64_t>(t.blob.nbytes()), static_cast<int64_t>(grad_in.nbytes()),
                                 static_cast<int64_t>(grad_out.nbytes()));
}

// The CPU computation: every element of grad_in (contiguous [N, C, IH, IW]) gathers its contributions from
// grad_out (contiguous [N, C, OH, OW]).
inline void upsample_aa_backward_cpu(at::Tensor& grad_in, const at::Tensor& grad_out, const UpsampleAaTables& t,
                                     AaPath path = AaPath::Auto) {
  const int64_t n = grad_in.numel();
  if (n == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_in.scalar_type(), "detops_upsample_aa_backward", [&] {
    const auto op = make_upsample_aa_backward_op<scalar_t>(grad_in, grad_out, t);
    if (path == AaPath::Elements32 && upsample_aa_fits_int32(grad_in, grad_out)) {
      upsample_aa_backward_elements_cpu<scalar_t, int32_t>(op, n);
    } else if (path == AaPath::Elements32 || path == AaPath::Elements64) {
      upsample_aa_backward_elements_cpu<scalar_t, int64_t>(op, n);
    } else if (path == AaPath::Columns ||
               (path == AaPath::Auto && 4 * (aa_column_groups(op.cols, op.iw, 16).size() - 1) <= size_t(op.iw))) {
      upsample_aa_backward_columns(op, n / (op.ih * op.iw), t.longest);
    } else {
      upsample_aa_backward_planes(op, n / (op.ih * op.iw), t.longest);
    }
  });
}

namespace cuda {
// The computation on the CUDA engine (cuda/upsample_aa.cu): one thread per grad_input element
// (UpsampleAaElementOp), 32-bit index math where every offset fits. Tensors contiguous and on one device,
// the tables on it too.
void upsample_aa_backward_kernel(at::Tensor& grad_in, const at::Tensor& grad_out, const UpsampleAaTables& t);
}  // namespace cuda

}  // namespace detops
