// Grid sampler backwards (grid_sampler_2d_backward, grid_sampler_3d_backward, cudnn_grid_sampler_backward):
// the per-element arithmetic shared by the CPU path (ops/grid_sampler.cpp) and the CUDA kernel
// (cuda/grid_sampler.cu), docs/order_contract.md and docs/grid_sampler.md.
//
// Stock's coordinate code (aten/src/ATen/native/cuda/GridSampler.cuh), in the accumulate type: unnormalise
// from [-1, 1], then border (clip) or reflection (reflect, then clip) padding, each with the gradient
// multiplier of its coordinate; nearest rounds half to even (nearbyint); bicubic uses A = -0.75 and applies
// the padding to every tap. A grid point reads its taps in stock's order:
//   bilinear 2-d   nw, ne, sw, se
//   bilinear 3-d   tnw, tne, tsw, tse, bnw, bne, bsw, bse
//   bicubic        x offset i = -1..2 outer, y offset j = -1..2 inner (16 taps)
//   nearest        one tap
// - grad_grid: one writer per grid point, which walks its contributions itself (channels ascending, taps in
//   the order above) and folds them with the contract's tree (the form the host picks from C * taps),
//   starting from 0, then multiplies by the coordinate's multiplier as stock does.
// - grad_input: a first pass stores each (grid point, tap) pair's destination pixel (N, [z,] y, x), or
//   kSkipKey for a tap outside the input, and its weight; the sort-reduce engine then sums, per pixel and
//   channel (the engine's D columns), weight * grad_output in source order: grid points ascending, then taps.
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>

#include "ops/common.h"
#include "ops/contract.h"
#include "ops/tree_form.h"

namespace detops {

enum GridInterpolation : int { kGridBilinear = 0, kGridNearest = 1, kGridBicubic = 2 };
enum GridPadding : int { kGridZeros = 0, kGridBorder = 1, kGridReflection = 2 };

// One call's shapes and modes. Sizes are per axis (D, H, W); the 2-d ops use D = 1.
struct GridGeom {
  int dims;             // 2 or 3: coordinates per grid point
  int64_t N;
  int64_t C;
  int64_t in[3];        // input D, H, W
  int64_t out[3];       // grid (and grad_output) D, H, W
  int interpolation;    // GridInterpolation
  int padding;          // GridPadding
  bool align_corners;

  C10_HOST_DEVICE int64_t in_plane() const { return in[0] * in[1] * in[2]; }
  C10_HOST_DEVICE int64_t out_plane() const { return out[0] * out[1] * out[2]; }
  C10_HOST_DEVICE int taps() const {
    if (interpolation == kGridNearest) return 1;
    if (interpolation == kGridBicubic) return 16;
    return dims == 3 ? 8 : 4;
  }
};

namespace grid {

// [-1, 1] to pixel coordinates; *mult = d(result) / d(coord).
template <typename acc_t>
C10_HOST_DEVICE inline acc_t unnormalize(acc_t coord, int64_t size, bool align_corners, acc_t* mult) {
  if (align_corners) {
    *mult = static_cast<acc_t>(size - 1) / 2;
    return ((coord + 1) / 2) * static_cast<acc_t>(size - 1);
  }
  *mult = static_cast<acc_t>(size) / 2;
  return ((coord + 1) * static_cast<acc_t>(size) - 1) / 2;
}

// Clip to [0, size - 1]; the borders count as outside for the gradient (stock's clip_coordinates_set_grad).
template <typename acc_t>
C10_HOST_DEVICE inline acc_t clip_set_grad(acc_t in, int64_t size, acc_t* grad) {
  if (in <= acc_t(0)) {
    *grad = acc_t(0);
    return acc_t(0);
  }
  const acc_t max = static_cast<acc_t>(size - 1);
  if (in >= max) {
    *grad = acc_t(0);
    return max;
  }
  *grad = acc_t(1);
  return in;
}

// Clip without a gradient: stock CUDA's ::min(size - 1, ::max(in, 0)), whose fmaxf turns a NaN into 0.
// NB: written out so that the host gives the same (std::max would keep the NaN).
template <typename acc_t>
C10_HOST_DEVICE inline acc_t clip(acc_t in, int64_t size) {
  const acc_t max = static_cast<acc_t>(size - 1);
  if (!(in > acc_t(0))) return acc_t(0);
  return in > max ? max : in;
}

// Below this, reflect_set_grad takes its remainder and parity in integers.
constexpr double kReflectIntegerLimit = 1 << 30;

// std::fmod(in, m / 2) for 0 <= in < kReflectIntegerLimit and 0 < m <= 2^digits(acc_t), bit for bit, without
// fmod's loop: 2 * in = I + f with I = floor(2 * in) (a truncation: 2 * in >= 0) and 0 <= f < 1, both exact,
// so the remainder is ((I mod m) + f) / 2, whose sum is exact (I mod m <= I keeps f's bits) and so is the
// halving.
template <typename acc_t>
C10_HOST_DEVICE inline acc_t half_modulus_remainder(acc_t in, int64_t m) {
  const acc_t twice = in + in;
  auto I = static_cast<int64_t>(twice);
  const acc_t frac = twice - static_cast<acc_t>(I);
  if (I >= m) I = I < 2 * m ? I - m : I % m;
  return (static_cast<acc_t>(I) + frac) / 2;
}

// Reflect into [twice_low / 2, twice_high / 2] (stock's reflect_coordinates_set_grad). NB: the parity of the
// number of flips is taken from the floating value itself, so a coordinate too large for an int (undefined
// in stock) gives the same result on every device. Coordinates below kReflectIntegerLimit (all but the
// absurd) take the remainder and the parity in integers, the same bits (tests/cpp/test_cpu_paths.cpp).
template <typename acc_t>
C10_HOST_DEVICE inline acc_t reflect_set_grad(acc_t in, int64_t twice_low, int64_t twice_high, acc_t* grad) {
  if (twice_low == twice_high) {
    *grad = acc_t(0);
    return acc_t(0);
  }
  const int64_t m = twice_high - twice_low;
  const acc_t min = static_cast<acc_t>(twice_low) / 2;
  const acc_t span = static_cast<acc_t>(m) / 2;
  in = in - min;
  acc_t sign = acc_t(1);
  if (in < acc_t(0)) {
    sign = acc_t(-1);
    in = -in;
  }
  constexpr int64_t kExactIntegers = int64_t{1} << (sizeof(acc_t) == 4 ? 24 : 53);
  acc_t extra;
  bool even;
  // NB: false for NaN and infinities, which take std::fmod's NaN.
  if (in < static_cast<acc_t>(kReflectIntegerLimit) && m <= kExactIntegers) {
    extra = half_modulus_remainder(in, m);
    // floor(in / span) as a truncation (in / span >= 0), at most 2^31: in < 2^30, span >= 1/2.
    even = (static_cast<int64_t>(in / span) & 1) == 0;
  } else {
    extra = std::fmod(in, span);
    even = std::fmod(std::floor(in / span), acc_t(2)) == acc_t(0);
  }
  if (even) {
    *grad = sign;
    return extra + min;
  }
  *grad = -sign;
  return span - extra + min;
}

// Out-of-range and non-finite coordinates become -100: outside the input, whatever the padding.
template <typename acc_t>
C10_HOST_DEVICE inline acc_t safe_downgrade(acc_t x) {
  if (x > static_cast<acc_t>(INT_MAX - 1) || x < static_cast<acc_t>(INT_MIN) || !std::isfinite(x)) {
    return acc_t(-100);
  }
  return x;
}

// The padding of a pixel coordinate (stock's compute_coordinates).
template <typename acc_t>
C10_HOST_DEVICE inline acc_t pad_coordinate(acc_t coord, int64_t size, int padding, bool align_corners) {
  acc_t unused;
  if (padding == kGridBorder) {
    coord = clip(coord, size);
  } else if (padding == kGridReflection) {
    coord = align_corners ? reflect_set_grad(coord, 0, 2 * (size - 1), &unused)
                          : reflect_set_grad(coord, -1, 2 * size - 1, &unused);
    coord = clip(coord, size);
  }
  return safe_downgrade(coord);
}

// A grid value to its source pixel coordinate, with d(result) / d(value) in *mult (stock's
// grid_sampler_compute_source_index_set_grad).
template <typename acc_t>
C10_HOST_DEVICE inline acc_t source_index(acc_t coord, int64_t size, int padding, bool align_corners, acc_t* mult) {
  coord = unnormalize(coord, size, align_corners, mult);
  if (padding == kGridBorder) {
    acc_t g_clip;
    coord = clip_set_grad(coord, size, &g_clip);
    *mult = *mult * g_clip;
  } else if (padding == kGridReflection) {
    acc_t g_refl, g_clip;
    coord = align_corners ? reflect_set_grad(coord, 0, 2 * (size - 1), &g_refl)
                          : reflect_set_grad(coord, -1, 2 * size - 1, &g_refl);
    coord = clip_set_grad(coord, size, &g_clip);
    *mult = *mult * g_refl * g_clip;
  }
  return safe_downgrade(coord);
}

// Cubic convolution weights of the taps at offsets -1, 0, 1, 2 for fraction t, A = -0.75 (stock's
// get_cubic_upsampling_coefficients), and their derivatives in t (get_cubic_coefficients_grad).
template <typename acc_t>
C10_HOST_DEVICE inline acc_t cubic_convolution1(acc_t x, acc_t A) {
  return ((A + 2) * x - (A + 3)) * x * x + 1;
}

template <typename acc_t>
C10_HOST_DEVICE inline acc_t cubic_convolution2(acc_t x, acc_t A) {
  return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
}

template <typename acc_t>
C10_HOST_DEVICE inline void cubic_coefficients(acc_t coeffs[4], acc_t t) {
  const acc_t A = acc_t(-0.75);
  const acc_t x2 = acc_t(1) - t;
  coeffs[0] = cubic_convolution2(t + acc_t(1), A);
  coeffs[1] = cubic_convolution1(t, A);
  coeffs[2] = cubic_convolution1(x2, A);
  coeffs[3] = cubic_convolution2(x2 + acc_t(1), A);
}

template <typename acc_t>
C10_HOST_DEVICE inline void cubic_coefficients_grad(acc_t coeffs[4], acc_t t) {
  const acc_t A = acc_t(-0.75);
  acc_t x = -1 - t;
  coeffs[0] = (-3 * A * x - 10 * A) * x - 8 * A;
  x = -t;
  coeffs[1] = (-3 * (A + 2) * x - 2 * (A + 3)) * x;
  x = 1 - t;
  coeffs[2] = (3 * (A + 2) * x - 2 * (A + 3)) * x;
  x = 2 - t;
  coeffs[3] = (3 * A * x - 10 * A) * x + 8 * A;
}

C10_HOST_DEVICE inline bool inside(int64_t z, int64_t y, int64_t x, const int64_t* size) {
  return z >= 0 && z < size[0] && y >= 0 && y < size[1] && x >= 0 && x < size[2];
}

// A grad_grid component: its contributions in order, the contract's tree (Tree: BlockFold, TwoLevelTree or
// StreamingTree, whichever the host's bound on the count allows; all give tree_reduce's bits), starting
// value 0.
template <typename acc_t, typename Tree>
struct GridGradSum {
  Tree tree;
  bool any = false;

  C10_HOST_DEVICE void add(acc_t v) {
    tree.push(v);
    any = true;
  }
  C10_HOST_DEVICE void sub(acc_t v) {
    tree.push(-v);
    any = true;
  }
  C10_HOST_DEVICE acc_t total() { return any ? add_rn(acc_t(0), tree.finish()) : acc_t(0); }
};

}  // namespace grid

// One thread (CUDA) or loop iteration (CPU) per grid point p (row-major over N, [D,] H, W): grad_grid[p],
// and, when tap_keys is set, the key and weight of each of its taps. Tree: the form of the contract's tree
// the host picked for grad_grid (one form per kernel, so each kernel holds only its own).
template <typename scalar_t, typename Tree = StreamingTree<acc_type<scalar_t>>>
struct GridBackwardOp {
  using acc_t = acc_type<scalar_t>;
  const scalar_t* input;        // contiguous [N, C, in plane]
  const scalar_t* grid;         // contiguous [N, out plane, dims]
  const scalar_t* grad_output;  // contiguous [N, C, out plane]
  scalar_t* grad_grid;          // contiguous [N, out plane, dims]
  int64_t* tap_keys;            // [N * out plane * taps] or null (input gradient not asked for)
  acc_t* tap_weights;           // same length
  GridGeom g;

  // Records tap t of grid point p: pixel (z, y, x) of batch n with weight w, or kSkipKey outside the input.
  C10_HOST_DEVICE void tap(int64_t p, int t, int64_t n, int64_t z, int64_t y, int64_t x, acc_t w) const {
    if (tap_keys == nullptr) return;
    const int64_t slot = p * g.taps() + t;
    tap_keys[slot] = grid::inside(z, y, x, g.in) ? ((n * g.in[0] + z) * g.in[1] + y) * g.in[2] + x : kSkipKey;
    tap_weights[slot] = w;
  }

  C10_HOST_DEVICE acc_t value(const scalar_t* plane, int64_t z, int64_t y, int64_t x) const {
    return to_acc(plane[(z * g.in[1] + y) * g.in[2] + x]);
  }

  C10_HOST_DEVICE void operator()(int64_t p) const {
    const int64_t S = g.out_plane();
    const int64_t n = p / S;
    const int64_t sp = p - n * S;
    const scalar_t* coords = grid + p * g.dims;
    scalar_t* out = grad_grid + p * g.dims;
    if (g.interpolation == kGridBicubic) {
      bicubic(p, n, sp, coords, out);
    } else if (g.dims == 2) {
      planar(p, n, sp, coords, out);
    } else {
      volumetric(p, n, sp, coords, out);
    }
  }

  C10_HOST_DEVICE void planar(int64_t p, int64_t n, int64_t sp, const scalar_t* coords, scalar_t* out) const {
    acc_t mx, my;
    const acc_t ix = grid::source_index(to_acc(coords[0]), g.in[2], g.padding, g.align_corners, &mx);
    const acc_t iy = grid::source_index(to_acc(coords[1]), g.in[1], g.padding, g.align_corners, &my);
    if (g.interpolation == kGridNearest) {
      tap(p, 0, n, 0, static_cast<int64_t>(std::nearbyint(iy)), static_cast<int64_t>(std::nearbyint(ix)), acc_t(1));
      out[0] = round_to<scalar_t>(acc_t(0));
      out[1] = round_to<scalar_t>(acc_t(0));
      return;
    }
    const int64_t x0 = static_cast<int64_t>(std::floor(ix));
    const int64_t y0 = static_cast<int64_t>(std::floor(iy));
    const int64_t x1 = x0 + 1;
    const int64_t y1 = y0 + 1;
    // The distances of stock's surfaces: (x1 - ix), (ix - x0), (y1 - iy), (iy - y0).
    const acc_t dx1 = static_cast<acc_t>(x1) - ix;
    const acc_t dx0 = ix - static_cast<acc_t>(x0);
    const acc_t dy1 = static_cast<acc_t>(y1) - iy;
    const acc_t dy0 = iy - static_cast<acc_t>(y0);
    tap(p, 0, n, 0, y0, x0, dx1 * dy1);  // nw
    tap(p, 1, n, 0, y0, x1, dx0 * dy1);  // ne
    tap(p, 2, n, 0, y1, x0, dx1 * dy0);  // sw
    tap(p, 3, n, 0, y1, x1, dx0 * dy0);  // se
    const bool in_nw = grid::inside(0, y0, x0, g.in), in_ne = grid::inside(0, y0, x1, g.in);
    const bool in_sw = grid::inside(0, y1, x0, g.in), in_se = grid::inside(0, y1, x1, g.in);
    grid::GridGradSum<acc_t, Tree> gx, gy;
    const int64_t S = g.out_plane(), plane = g.in_plane();
    for (int64_t c = 0; c < g.C; ++c) {
      const acc_t go = to_acc(grad_output[(n * g.C + c) * S + sp]);
      const scalar_t* in = input + (n * g.C + c) * plane;
      if (in_nw) {
        const acc_t v = value(in, 0, y0, x0);
        gx.sub(v * dy1 * go);
        gy.sub(v * dx1 * go);
      }
      if (in_ne) {
        const acc_t v = value(in, 0, y0, x1);
        gx.add(v * dy1 * go);
        gy.sub(v * dx0 * go);
      }
      if (in_sw) {
        const acc_t v = value(in, 0, y1, x0);
        gx.sub(v * dy0 * go);
        gy.add(v * dx1 * go);
      }
      if (in_se) {
        const acc_t v = value(in, 0, y1, x1);
        gx.add(v * dy0 * go);
        gy.add(v * dx0 * go);
      }
    }
    out[0] = round_to<scalar_t>(mx * gx.total());
    out[1] = round_to<scalar_t>(my * gy.total());
  }

  C10_HOST_DEVICE void volumetric(int64_t p, int64_t n, int64_t sp, const scalar_t* coords, scalar_t* out) const {
    acc_t mx, my, mz;
    const acc_t ix = grid::source_index(to_acc(coords[0]), g.in[2], g.padding, g.align_corners, &mx);
    const acc_t iy = grid::source_index(to_acc(coords[1]), g.in[1], g.padding, g.align_corners, &my);
    const acc_t iz = grid::source_index(to_acc(coords[2]), g.in[0], g.padding, g.align_corners, &mz);
    if (g.interpolation == kGridNearest) {
      tap(p, 0, n, static_cast<int64_t>(std::nearbyint(iz)), static_cast<int64_t>(std::nearbyint(iy)),
          static_cast<int64_t>(std::nearbyint(ix)), acc_t(1));
      out[0] = round_to<scalar_t>(acc_t(0));
      out[1] = round_to<scalar_t>(acc_t(0));
      out[2] = round_to<scalar_t>(acc_t(0));
      return;
    }
    const int64_t x0 = static_cast<int64_t>(std::floor(ix));
    const int64_t y0 = static_cast<int64_t>(std::floor(iy));
    const int64_t z0 = static_cast<int64_t>(std::floor(iz));
    const int64_t x1 = x0 + 1, y1 = y0 + 1, z1 = z0 + 1;
    const acc_t dx[2] = {static_cast<acc_t>(x1) - ix, ix - static_cast<acc_t>(x0)};  // weight of x0, of x1
    const acc_t dy[2] = {static_cast<acc_t>(y1) - iy, iy - static_cast<acc_t>(y0)};
    const acc_t dz[2] = {static_cast<acc_t>(z1) - iz, iz - static_cast<acc_t>(z0)};
    // Taps t = 4 * bz + 2 * by + bx: tnw, tne, tsw, tse, bnw, bne, bsw, bse (t: top z0, b: bottom z1).
    bool in_tap[8];
    for (int t = 0; t < 8; ++t) {
      const int bx = t & 1, by = (t >> 1) & 1, bz = t >> 2;
      const int64_t x = x0 + bx, y = y0 + by, z = z0 + bz;
      tap(p, t, n, z, y, x, dx[bx] * dy[by] * dz[bz]);
      in_tap[t] = grid::inside(z, y, x, g.in);
    }
    grid::GridGradSum<acc_t, Tree> gx, gy, gz;
    const int64_t S = g.out_plane(), plane = g.in_plane();
    for (int64_t c = 0; c < g.C; ++c) {
      const acc_t go = to_acc(grad_output[(n * g.C + c) * S + sp]);
      const scalar_t* in = input + (n * g.C + c) * plane;
      for (int t = 0; t < 8; ++t) {
        if (!in_tap[t]) continue;
        const int bx = t & 1, by = (t >> 1) & 1, bz = t >> 2;
        const acc_t v = value(in, z0 + bz, y0 + by, x0 + bx);
        // d(weight)/d(coordinate) is +-1 times the other two factors: + for the far tap (b = 1).
        const acc_t vx = v * dy[by] * dz[bz] * go;
        const acc_t vy = v * dx[bx] * dz[bz] * go;
        const acc_t vz = v * dx[bx] * dy[by] * go;
        if (bx) gx.add(vx); else gx.sub(vx);
        if (by) gy.add(vy); else gy.sub(vy);
        if (bz) gz.add(vz); else gz.sub(vz);
      }
    }
    out[0] = round_to<scalar_t>(mx * gx.total());
    out[1] = round_to<scalar_t>(my * gy.total());
    out[2] = round_to<scalar_t>(mz * gz.total());
  }

  C10_HOST_DEVICE void bicubic(int64_t p, int64_t n, int64_t sp, const scalar_t* coords, scalar_t* out) const {
    // NB: as stock, the multipliers are the unnormalisation's only: the padding is applied per tap.
    acc_t mx, my;
    const acc_t ix = grid::unnormalize(to_acc(coords[0]), g.in[2], g.align_corners, &mx);
    const acc_t iy = grid::unnormalize(to_acc(coords[1]), g.in[1], g.align_corners, &my);
    const acc_t fx = std::floor(ix);
    const acc_t fy = std::floor(iy);
    const acc_t tx = ix - fx;
    const acc_t ty = iy - fy;
    acc_t wx[4], wy[4], dwx[4], dwy[4];
    grid::cubic_coefficients(wx, tx);
    grid::cubic_coefficients(wy, ty);
    grid::cubic_coefficients_grad(dwx, tx);
    grid::cubic_coefficients_grad(dwy, ty);
    int64_t px[4], py[4];
    for (int k = 0; k < 4; ++k) {
      // Truncation as stock's int cast: padded tap coordinates are whole numbers or -100.
      px[k] = static_cast<int64_t>(grid::pad_coordinate(fx - 1 + k, g.in[2], g.padding, g.align_corners));
      py[k] = static_cast<int64_t>(grid::pad_coordinate(fy - 1 + k, g.in[1], g.padding, g.align_corners));
    }
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 4; ++j) tap(p, 4 * i + j, n, 0, py[j], px[i], wx[i] * wy[j]);
    }
    grid::GridGradSum<acc_t, Tree> gx, gy;
    const int64_t S = g.out_plane(), plane = g.in_plane();
    for (int64_t c = 0; c < g.C; ++c) {
      const acc_t go = to_acc(grad_output[(n * g.C + c) * S + sp]);
      const scalar_t* in = input + (n * g.C + c) * plane;
      for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 4; ++j) {
          // NB: stock subtracts every tap's term, a tap outside the input with value 0.
          const acc_t v = grid::inside(0, py[j], px[i], g.in) ? value(in, 0, py[j], px[i]) : acc_t(0);
          gx.sub(v * dwx[i] * wy[j] * go);
          gy.sub(v * dwy[j] * wx[i] * go);
        }
      }
    }
    out[0] = round_to<scalar_t>(mx * gx.total());
    out[1] = round_to<scalar_t>(my * gy.total());
  }
};

// The input gradient over the taps recorded by GridBackwardOp: source position i = p * taps + t, key the
// pixel (n, [z,] y, x), column c the channel, contribution weight * grad_output[n, c, p's output position].
template <typename scalar_t>
struct GridInputGradOp {
  using acc_t = acc_type<scalar_t>;
  const int64_t* tap_keys;
  const acc_t* tap_weights;
  const scalar_t* grad_output;  // contiguous [N, C, out plane]
  scalar_t* grad_input;         // contiguous [N, C, in plane], zero-filled
  int64_t taps;
  int64_t C;
  int64_t out_plane;
  int64_t in_plane;

  C10_HOST_DEVICE int64_t key(int64_t i) const { return tap_keys[i]; }
  C10_HOST_DEVICE acc_t contribution(int64_t i, int64_t c) const {
    const int64_t p = i / taps;
    const int64_t n = p / out_plane;
    return tap_weights[i] * to_acc(grad_output[(n * C + c) * out_plane + (p - n * out_plane)]);
  }
  C10_HOST_DEVICE void finalize(int64_t key, int64_t c, acc_t total) const {
    const int64_t n = key / in_plane;
    grad_input[(n * C + c) * in_plane + (key - n * in_plane)] = round_to<scalar_t>(add_rn(acc_t(0), total));
  }
};

}  // namespace detops

#include "ops/plan_record.h"

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>

#include <optional>
#include <vector>

namespace detops {

// The CPU's input gradient without the sort, where no pixel has more than kBlock * kBlock contributions: the
// taps walked once in source order, each pushed, for every channel, to its pixel's two-level tree (block and
// top sums, counters per pixel). NB: each pixel's contributions arrive in source order and are folded by the
// contract's tree, so the bits are the sort-reduce engine's (docs/order_contract.md). Returns false, having
// written nothing, where some pixel has more.
template <typename scalar_t>
bool grid_input_grad_streaming_cpu(const GridInputGradOp<scalar_t>& op, int64_t n, int64_t num_keys) {
  using acc_t = acc_type<scalar_t>;
  std::vector<int32_t> in_block(num_keys, 0), count(num_keys, 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = op.key(i);
    if (k != kSkipKey && ++count[k] > kBlock * kBlock) return false;
  }
  const int64_t C = op.C;
  std::vector<acc_t> block(num_keys * C), top(num_keys * C);
  std::vector<uint8_t> any_top(num_keys, 0);
  // i = (b * out_plane + q) * taps + t in increasing i, with no division per tap.
  const int64_t batches = n / (op.taps * op.out_plane);
  int64_t i = 0;
  for (int64_t b = 0; b < batches; ++b) {
    for (int64_t q = 0; q < op.out_plane; ++q) {
      const scalar_t* go = op.grad_output + b * C * op.out_plane + q;
      for (int64_t t = 0; t < op.taps; ++t, ++i) {
        const int64_t k = op.key(i);
        if (k == kSkipKey) continue;
        const acc_t w = op.tap_weights[i];
        acc_t* bs = block.data() + k * C;
        if (in_block[k] == 0) {
          for (int64_t c = 0; c < C; ++c) bs[c] = w * to_acc(go[c * op.out_plane]);
        } else {
          for (int64_t c = 0; c < C; ++c) bs[c] = add_rn(bs[c], w * to_acc(go[c * op.out_plane]));
        }
        if (++in_block[k] == kBlock) {
          acc_t* ts = top.data() + k * C;
          for (int64_t c = 0; c < C; ++c) ts[c] = any_top[k] ? add_rn(ts[c], bs[c]) : bs[c];
          any_top[k] = 1;
          in_block[k] = 0;
        }
      }
    }
  }
  for (int64_t k = 0; k < num_keys; ++k) {
    if (count[k] == 0) continue;
    const acc_t* bs = block.data() + k * C;
    const acc_t* ts = top.data() + k * C;
    for (int64_t c = 0; c < C; ++c) {
      op.finalize(k, c, in_block[k] == 0 ? ts[c] : (any_top[k] ? add_rn(ts[c], bs[c]) : bs[c]));
    }
  }
  return true;
}

// The sort-reduce call of the input gradient (ops/plan.h): the taps of every grid point, keyed by pixel, one
// column per channel.
template <typename scalar_t>
plan::EngineCall grid_input_grad_call(const GridGeom& g) {
  return plan::sort_reduce_call(g.N * g.out_plane() * g.taps(), g.N * g.in_plane(), g.C,
                                sizeof(acc_type<scalar_t>));
}

// On an engine (cpu::Engine or cuda::Engine), all tensors contiguous and on one device: grad_grid always,
// grad_input (zero-filled) when defined. `fold` forces a form of the tree (tests: every form the count allows
// gives the same bits). kStreaming (the CPU): the input gradient by grid_input_grad_streaming_cpu where it
// applies, else by the engine's sort-reduce; `streaming` false forces the latter (tests: same bits).
template <typename Engine, bool kStreaming = false>
void grid_sampler_backward_compute(const GridGeom& g, const at::Tensor& grad_output, const at::Tensor& input,
                                   const at::Tensor& grid, at::Tensor& grad_grid, at::Tensor& grad_input,
                                   std::optional<TreeForm> fold = std::nullopt, bool streaming = true) {
  const int64_t points = g.N * g.out_plane();
  if (points == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "detops_grid_sampler_backward", [&] {
    using acc_t = acc_type<scalar_t>;
    const bool want_input = grad_input.defined() && g.C > 0;
    const int64_t n = points * g.taps();
    at::Tensor keys, weights;
    int64_t* tap_keys = nullptr;
    acc_t* tap_weights = nullptr;
    if (want_input) {
      keys = empty_scratch({n}, input.options().dtype(at::kLong));
      weights = empty_scratch({n}, input.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
      tap_keys = keys.data_ptr<int64_t>();
      tap_weights = weights.data_ptr<acc_t>();
    }
    const auto grad_grid_pass = [&](auto tree) {
      GridBackwardOp<scalar_t, decltype(tree)> op;
      op.input = input.const_data_ptr<scalar_t>();
      op.grid = grid.const_data_ptr<scalar_t>();
      op.grad_output = grad_output.const_data_ptr<scalar_t>();
      op.grad_grid = grad_grid.data_ptr<scalar_t>();
      op.tap_keys = tap_keys;
      op.tap_weights = tap_weights;
      op.g = g;
      Engine::for_each(op, points);
    };
    // NB: a grad_grid component has at most C * taps contributions: the smallest form that holds them.
    with_tree_form<acc_t>(fold.value_or(tree_form_for(g.C * g.taps())), grad_grid_pass);
    if (!want_input) return;
    GridInputGradOp<scalar_t> in_op{tap_keys, tap_weights, grad_output.const_data_ptr<scalar_t>(),
                                    grad_input.data_ptr<scalar_t>(), g.taps(), g.C, g.out_plane(), g.in_plane()};
    const plan::EngineCall call = grid_input_grad_call<scalar_t>(g);
    if constexpr (kStreaming) {
      // The streaming path stands for the engine's call (ops/plan.h): recorded in its place; in plan-only mode
      // that is all it does.
      if (streaming && (plan::plan_only() || grid_input_grad_streaming_cpu(in_op, call.n, call.num_keys))) {
        plan::record(call);
        return;
      }
    }
    Engine::template sort_reduce<acc_t>(g.dims == 3 ? "grid_sampler_3d_backward" : "grid_sampler_2d_backward",
                                        in_op, call.n, call.num_keys, call.D, input);
  });
}

namespace cuda {
// The computation on the CUDA engine (cuda/grid_sampler.cu).
void grid_sampler_backward_kernel(const GridGeom& g, const at::Tensor& grad_output, const at::Tensor& input,
                                  const at::Tensor& grid, at::Tensor& grad_grid, at::Tensor& grad_input);
}  // namespace cuda

}  // namespace detops
