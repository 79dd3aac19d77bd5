// median / nanmedian along a dim (ops/median.cpp): aten's signatures of median.dim_values and
// nanmedian.dim_values, CPU and CUDA tensors. median.dim and nanmedian.dim have no CUDA kernel of their own:
// stock's composite kernel allocates values and indices and calls the .dim_values overload, so they reach
// these.
#pragma once

#include "ops/plan_record.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <tuple>
#include <vector>

namespace detops {

// The CUDA path's own work for R rows of n keys of key_bytes (cuda/median.cu; a kernel entry, ops/plan_record.h): the
// four key and position arrays, the row offsets (one arange kernel) and CUB's stable segmented sort with its temp
// storage. The sort, predicted from CCCL's dispatch (sm_90 tuning): up to 500 rows one kernel; more, a three-way
// partition of the rows (2 launches), a copy of the group sizes to the host, then one sorting kernel.
plan::EngineCall median_sort_kernels(int64_t R, int64_t n, int64_t key_bytes);
// The CUDA path's calls in order (median_compute): the key gather, the sort, the pick. The CPU path, which
// selects without the engine, records them in their place.
std::vector<plan::EngineCall> median_calls(int64_t R, int64_t n, int64_t key_bytes);

std::tuple<at::Tensor&, at::Tensor&> median_out(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& values,
                                                at::Tensor& indices);
std::tuple<at::Tensor&, at::Tensor&> nanmedian_out(const at::Tensor& self, int64_t dim, bool keepdim,
                                                   at::Tensor& values, at::Tensor& indices);

}  // namespace detops
