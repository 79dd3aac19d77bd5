// median / nanmedian along a dim: the per-element code shared by the CPU and CUDA paths (docs/median.md).
//
// Each row (the reduced dim, made contiguous) is sorted stably by an ordered integer key: the value's order,
// -0.0 equal to +0.0, every NaN after every number and equal to every other NaN. NB: a stable sort keeps
// source order among equal keys, so position p of a sorted row is the p-th element by (value, index), the
// order stock's CPU kernel selects in; the median's sorted position depends only on the row's length and
// its NaN count, so the result does not depend on the sort's schedule (docs/order_contract.md).
#pragma once

#include <c10/macros/Macros.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace detops {

// The unsigned integer of an element's size.
template <int kBytes>
struct UnsignedOfSize;
template <>
struct UnsignedOfSize<1> {
  using type = uint8_t;
};
template <>
struct UnsignedOfSize<2> {
  using type = uint16_t;
};
template <>
struct UnsignedOfSize<4> {
  using type = uint32_t;
};
template <>
struct UnsignedOfSize<8> {
  using type = uint64_t;
};

template <typename scalar_t>
using median_key_t = typename UnsignedOfSize<static_cast<int>(sizeof(scalar_t))>::type;

template <typename scalar_t>
constexpr bool median_floating_v = std::is_floating_point_v<scalar_t> || std::is_same_v<scalar_t, c10::Half> ||
                                   std::is_same_v<scalar_t, c10::BFloat16>;

// The sort key of NaN: the largest key, which no number has.
template <typename scalar_t>
C10_HOST_DEVICE constexpr median_key_t<scalar_t> median_nan_key() {
  return static_cast<median_key_t<scalar_t>>(~median_key_t<scalar_t>{0});
}

// The sort key of v: ascending keys are ascending values. Floating: -0.0 as +0.0, NaN as median_nan_key();
// signed integers: the sign bit flipped; unsigned: the value.
template <typename scalar_t>
C10_HOST_DEVICE inline median_key_t<scalar_t> median_key(scalar_t v) {
  using key_t = median_key_t<scalar_t>;
  constexpr key_t kSign = static_cast<key_t>(key_t{1} << (8 * sizeof(key_t) - 1));
  key_t b;
  memcpy(&b, &v, sizeof(b));
  if constexpr (median_floating_v<scalar_t>) {
    constexpr key_t kExpBits = std::is_same_v<scalar_t, c10::Half>       ? key_t{0x1f}
                               : std::is_same_v<scalar_t, c10::BFloat16> ? key_t{0xff}
                               : std::is_same_v<scalar_t, float>         ? key_t{0xff}
                                                                         : key_t{0x7ff};
    constexpr int kMantissa = std::is_same_v<scalar_t, c10::Half>       ? 10
                              : std::is_same_v<scalar_t, c10::BFloat16> ? 7
                              : std::is_same_v<scalar_t, float>         ? 23
                                                                        : 52;
    constexpr key_t kInf = static_cast<key_t>(kExpBits << kMantissa);
    const key_t magnitude = static_cast<key_t>(b & static_cast<key_t>(~kSign));
    if (magnitude > kInf) return median_nan_key<scalar_t>();
    if (magnitude == 0) return kSign;  // NB: -0.0 and +0.0 tie, as stock's comparator has them
    return (b & kSign) ? static_cast<key_t>(~b) : static_cast<key_t>(b | kSign);
  } else if constexpr (std::is_signed_v<scalar_t>) {
    return static_cast<key_t>(b ^ kSign);
  } else {
    return b;
  }
}

// nanmedian of a row of n NaN: the index stock's CPU kernel returns, where its std::nth_element (libstdc++'s
// introselect, position 0 wanted) sees n equivalent elements, so which one ends at position 0 depends on n
// only. Its passes, each on [0, s) while s > 3: swap 0 with s / 2 (the median-of-three pivot of equal
// elements), then swap 1 + k with s - 1 - k for k < (s - 1) / 2 (the unguarded partition), then s becomes
// 1 + (s - 1) / 2; the final insertion sort moves nothing. Traced back from position 0 through the swaps:
// O(log n). NB: checked against stock for every n below 5000 and a few up to 2^24 (tests/python/test_median.py).
C10_HOST_DEVICE inline int64_t nan_row_index(int64_t n) {
  int64_t sizes[64];
  int passes = 0;
  for (int64_t s = n; s > 3; s = 1 + (s - 1) / 2) sizes[passes++] = s;
  int64_t p = 0;
  for (int i = passes - 1; i >= 0; --i) {
    const int64_t s = sizes[i];
    const int64_t k = (s - 1) / 2;
    if ((p >= 1 && p <= k) || (p >= s - k && p <= s - 1)) p = s - p;
    if (p == 0) {
      p = s / 2;
    } else if (p == s / 2) {
      p = 0;
    }
  }
  return p;
}

// The sorted position of the result in a row of n > 0 sorted keys, of which the last num_nan are NaN.
// median: the first NaN in source order when there is one (NaN propagates), else the lower median
// (n - 1) / 2. nanmedian: the lower median of the numbers, (n - num_nan - 1) / 2; a row of NaN only gives
// stock's index (nan_row_index: the sorted row of NaN keeps source order, so position is index).
C10_HOST_DEVICE inline int64_t median_position(int64_t n, int64_t num_nan, bool ignore_nan) {
  if (!ignore_nan) return num_nan > 0 ? n - num_nan : (n - 1) / 2;
  return num_nan == n ? nan_row_index(n) : (n - num_nan - 1) / 2;
}

// Fills the key and the row position of element i of `rows` rows of n contiguous elements.
template <typename scalar_t>
struct MedianKeyOp {
  const scalar_t* in;
  median_key_t<scalar_t>* keys;
  int32_t* pos;
  int64_t n;

  C10_HOST_DEVICE void operator()(int64_t i) const {
    keys[i] = median_key(in[i]);
    pos[i] = static_cast<int32_t>(i % n);
  }
};

// Row r of the sorted keys and positions: the NaN count (a binary search for the first NaN key; integers
// have none), then the element at the median's sorted position, copied as it is in the input.
template <typename scalar_t>
struct MedianPickOp {
  const scalar_t* in;
  const median_key_t<scalar_t>* sorted_keys;
  const int32_t* sorted_pos;
  scalar_t* values;
  int64_t* indices;
  int64_t n;
  bool ignore_nan;

  C10_HOST_DEVICE void operator()(int64_t r) const {
    const median_key_t<scalar_t>* k = sorted_keys + r * n;
    int64_t num_nan = 0;
    if constexpr (median_floating_v<scalar_t>) {
      int64_t lo = 0;
      int64_t hi = n;  // first NaN key in [lo, hi]
      while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (k[mid] == median_nan_key<scalar_t>()) {
          hi = mid;
        } else {
          lo = mid + 1;
        }
      }
      num_nan = n - lo;
    }
    const int64_t j = sorted_pos[r * n + median_position(n, num_nan, ignore_nan)];
    values[r] = in[r * n + j];
    indices[r] = j;
  }
};

// Rows of at most this many elements are picked by one thread each, without a sort (MedianShortRowOp): one
// launch, no workspace and no host synchronisation (CUB's segmented sort copies its group sizes to the host
// for more than 500 rows, which also rules out CUDA graph capture).
constexpr int64_t kMedianShortRow = 32;

// Row r of n <= kMedianShortRow elements: the element whose stable rank (the elements with a smaller key, and
// those with the same key earlier in the row) is the median's sorted position, which is the element the
// stable sort puts there. NB: ranks are counted, so the schedule cannot show; O(n^2) comparisons over the
// row's keys, held by the thread.
template <typename scalar_t>
struct MedianShortRowOp {
  const scalar_t* in;
  scalar_t* values;
  int64_t* indices;
  int64_t n;
  bool ignore_nan;

  C10_HOST_DEVICE void operator()(int64_t r) const {
    using key_t = median_key_t<scalar_t>;
    const scalar_t* x = in + r * n;
    key_t k[kMedianShortRow];
    int64_t num_nan = 0;
    for (int64_t j = 0; j < n; ++j) {
      k[j] = median_key(x[j]);
      if constexpr (median_floating_v<scalar_t>) num_nan += k[j] == median_nan_key<scalar_t>() ? 1 : 0;
    }
    const int64_t m = median_position(n, num_nan, ignore_nan);
    int64_t pick = 0;
    for (int64_t j = 0; j < n; ++j) {
      int64_t rank = 0;
      for (int64_t i = 0; i < n; ++i) rank += (k[i] < k[j] || (k[i] == k[j] && i < j)) ? 1 : 0;
      if (rank == m) pick = j;
    }
    values[r] = x[pick];
    indices[r] = pick;
  }
};

}  // namespace detops

#include "ops/common.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace detops {

// rows: [R, n] contiguous, R * n > 0; values (rows' dtype) and indices (int64): R contiguous elements.
// Keys and positions on an engine (cpu::Engine or cuda::Engine), the rows sorted by `sort_rows(key dtype tag,
// keys, pos, sorted_keys, sorted_pos, R, n)` (std::stable_sort on the CPU, CUB's stable segmented sort on
// CUDA), the median picked per row on the engine.
template <typename Engine, typename SortRows>
void median_sort_compute(const at::Tensor& rows, at::Tensor& values, at::Tensor& indices, bool ignore_nan,
                         SortRows&& sort_rows) {
  const int64_t R = rows.size(0);
  const int64_t n = rows.size(1);
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, rows.scalar_type(), "detops_median", [&] {
    using key_t = median_key_t<scalar_t>;
    const at::ScalarType key_dtype = sizeof(key_t) == 1   ? at::kByte
                                     : sizeof(key_t) == 2 ? at::kShort
                                     : sizeof(key_t) == 4 ? at::kInt
                                                          : at::kLong;
    const auto key_options = rows.options().dtype(key_dtype);
    const auto pos_options = rows.options().dtype(at::kInt);
    at::Tensor keys = empty_scratch({R * n}, key_options);
    at::Tensor pos = empty_scratch({R * n}, pos_options);
    at::Tensor sorted_keys = empty_scratch({R * n}, key_options);
    at::Tensor sorted_pos = empty_scratch({R * n}, pos_options);
    const scalar_t* in = rows.const_data_ptr<scalar_t>();
    key_t* k = static_cast<key_t*>(keys.data_ptr());
    key_t* sk = static_cast<key_t*>(sorted_keys.data_ptr());
    Engine::for_each(MedianKeyOp<scalar_t>{in, k, pos.data_ptr<int32_t>(), n}, R * n);
    sort_rows(key_t{}, k, pos.data_ptr<int32_t>(), sk, sorted_pos.data_ptr<int32_t>(), R, n);
    Engine::for_each(MedianPickOp<scalar_t>{in, sk, sorted_pos.data_ptr<int32_t>(), values.data_ptr<scalar_t>(),
                                            indices.data_ptr<int64_t>(), n, ignore_nan},
                     R);
  });
}

// Rows of n <= kMedianShortRow elements, one thread per row (MedianShortRowOp) on an engine.
template <typename Engine>
void median_short_rows_compute(const at::Tensor& rows, at::Tensor& values, at::Tensor& indices, bool ignore_nan) {
  const int64_t n = rows.size(1);
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, rows.scalar_type(), "detops_median_short_rows", [&] {
    Engine::for_each(MedianShortRowOp<scalar_t>{rows.const_data_ptr<scalar_t>(), values.data_ptr<scalar_t>(),
                                                indices.data_ptr<int64_t>(), n, ignore_nan},
                     rows.size(0));
  });
}

// The median of each row: short rows by one thread each, longer ones through the stable sort (same results).
template <typename Engine, typename SortRows>
void median_compute(const at::Tensor& rows, at::Tensor& values, at::Tensor& indices, bool ignore_nan,
                    SortRows&& sort_rows) {
  if (rows.size(1) <= kMedianShortRow) return median_short_rows_compute<Engine>(rows, values, indices, ignore_nan);
  median_sort_compute<Engine>(rows, values, indices, ignore_nan, std::forward<SortRows>(sort_rows));
}

// Each row sorted on its own by std::stable_sort (median_compute's sort_rows on the CPU): the bits do not
// depend on the number of threads.
struct MedianStableSortRows {
  template <typename key_t>
  void operator()(key_t, const key_t* keys, const int32_t* pos, key_t* sorted_keys, int32_t* sorted_pos, int64_t R,
                  int64_t n) const {
    at::parallel_for(0, R, std::max<int64_t>(1, 16384 / n), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const key_t* k = keys + r * n;
        int32_t* p = sorted_pos + r * n;
        std::copy(pos + r * n, pos + (r + 1) * n, p);
        std::stable_sort(p, p + n, [k](int32_t a, int32_t b) { return k[a] < k[b]; });
        for (int64_t j = 0; j < n; ++j) sorted_keys[r * n + j] = k[p[j]];
      }
    });
  }
};

// One row's pick by selection (median_select_cpu). `row` holds n pairs of scratch.
template <typename scalar_t, typename pair_t>
int64_t median_select_row(const scalar_t* x, int64_t n, bool ignore_nan, std::vector<pair_t>& row) {
  using key_t = median_key_t<scalar_t>;
  int64_t num_nan = 0;
  for (int64_t j = 0; j < n; ++j) {
    const key_t k = median_key(x[j]);
    if constexpr (median_floating_v<scalar_t>) num_nan += k == median_nan_key<scalar_t>() ? 1 : 0;
    if constexpr (sizeof(key_t) <= 4) {
      row[j] = (static_cast<uint64_t>(k) << 32) | static_cast<uint64_t>(j);
    } else {
      row[j] = {static_cast<uint64_t>(k), static_cast<uint32_t>(j)};
    }
  }
  const int64_t m = median_position(n, num_nan, ignore_nan);
  std::nth_element(row.begin(), row.begin() + m, row.end());
  if constexpr (sizeof(key_t) <= 4) {
    return static_cast<int64_t>(row[m] & 0xffffffffu);
  } else {
    return static_cast<int64_t>(row[m].second);
  }
}

// The CPU computation: per row, the element at the median's sorted position found by selection, not by
// sorting the whole row. NB: the pairs (key, position) of a row are distinct and ordered as the stable sort
// orders the row, so std::nth_element over them puts at median_position(...) the very element the stable
// sort puts there, whatever its own schedule (median_compute gives the same bits: tests/cpp/test_cpu_paths.cpp).
inline void median_select_cpu(const at::Tensor& rows, at::Tensor& values, at::Tensor& indices, bool ignore_nan) {
  const int64_t R = rows.size(0);
  const int64_t n = rows.size(1);
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, rows.scalar_type(), "detops_median", [&] {
    using key_t = median_key_t<scalar_t>;
    // (key, position) packed into one integer where both fit 64 bits, else a pair compared in that order.
    using pair_t = std::conditional_t<sizeof(key_t) <= 4, uint64_t, std::pair<uint64_t, uint32_t>>;
    const scalar_t* in = rows.const_data_ptr<scalar_t>();
    scalar_t* out_values = values.data_ptr<scalar_t>();
    int64_t* out_indices = indices.data_ptr<int64_t>();
    at::parallel_for(0, R, std::max<int64_t>(1, 16384 / n), [&](int64_t begin, int64_t end) {
      std::vector<pair_t> row(n);
      for (int64_t r = begin; r < end; ++r) {
        const int64_t j = median_select_row<scalar_t, pair_t>(in + r * n, n, ignore_nan, row);
        out_values[r] = in[r * n + j];
        out_indices[r] = j;
      }
    });
  });
}

namespace cuda {
// median_compute on CUDA with CUB's stable segmented sort (cuda/median.cu).
void median_kernel(const at::Tensor& rows, at::Tensor& values, at::Tensor& indices, bool ignore_nan);
}  // namespace cuda

}  // namespace detops
