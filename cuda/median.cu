// median / nanmedian on CUDA: median_compute (ops/median_op.h) with the rows sorted by CUB's stable
// segmented sort of (key, row position) pairs. Checks and layout are done by ops/median.cpp.
#include "cuda/sort_reduce.cuh"
#include "ops/median.h"
#include "ops/median_op.h"

#include <ATen/ops/arange.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cub/device/device_segmented_sort.cuh>

namespace detops::cuda {
namespace {

namespace cub = CUB_NS_QUALIFIER;  // detops' own CUB namespace (CUB_WRAPPED_NAMESPACE), not torch's

// One CUB stable segmented sort over the R rows (segments of n), temp storage a byte tensor on the current
// stream (size query first, then the sort). NB: stable, so equal keys keep their row order (ops/median_op.h).
struct CubSortRows {
  const at::Tensor& like;

  template <typename key_t>
  void operator()(key_t, const key_t* keys, const int32_t* pos, key_t* sorted_keys, int32_t* sorted_pos, int64_t R,
                  int64_t n) const {
    plan::record(median_sort_kernels(R, n, sizeof(key_t)));
    const auto stream = c10::cuda::getCurrentCUDAStream();
    const at::Tensor offsets = at::arange(0, (R + 1) * n, n, like.options().dtype(at::kLong));
    const int64_t* begin = offsets.const_data_ptr<int64_t>();
    size_t bytes = 0;
    C10_CUDA_CHECK(cub::DeviceSegmentedSort::StableSortPairs(nullptr, bytes, keys, sorted_keys, pos, sorted_pos,
                                                             R * n, R, begin, begin + 1, stream));
    // NB: never zero bytes: a null temp pointer would turn the second call into a size query.
    at::Tensor temp = empty_scratch({static_cast<int64_t>(bytes > 0 ? bytes : 1)}, like.options().dtype(at::kByte));
    C10_CUDA_CHECK(cub::DeviceSegmentedSort::StableSortPairs(temp.data_ptr(), bytes, keys, sorted_keys, pos,
                                                             sorted_pos, R * n, R, begin, begin + 1, stream));
  }
};

}  // namespace

void median_kernel(const at::Tensor& rows, at::Tensor& values, at::Tensor& indices, bool ignore_nan) {
  const c10::cuda::CUDAGuard guard(rows.device());
  median_compute<Engine>(rows, values, indices, ignore_nan, CubSortRows{rows});
}

}  // namespace detops::cuda
