// median / nanmedian along a dim: checks, the layout, and the CPU path. The CUDA path is cuda/median.cu.
// Both pick the element at the same sorted position of every row ordered by (key of ops/median_op.h,
// position): CUDA by a stable sort, the CPU by selection. CPU and CUDA give the same values and indices,
// which are stock CPU's (docs/median.md).
#include "ops/median.h"

#include "ops/median_op.h"

#include <ATen/Parallel.h>
#include <ATen/TensorUtils.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace detops {
namespace {

bool median_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16 || t == at::kByte ||
         t == at::kChar || t == at::kShort || t == at::kInt || t == at::kLong;
}

// Stock's checks in stock's order (aten median_with_indices_impl), then the median of every row along dim.
std::tuple<at::Tensor&, at::Tensor&> median_with_indices(const at::Tensor& self, int64_t dim, bool keepdim,
                                                         at::Tensor& values, at::Tensor& indices, bool ignore_nan) {
  dim = at::maybe_wrap_dim(dim, self.dim());
  if (self.dim() > 0) {
    TORCH_CHECK_INDEX(self.size(dim) != 0, "median(): Expected reduction dim ", dim, " to have non-zero size.");
  }
  at::checkDeviceType("median", {values, indices}, self.device().type());
  at::checkScalarType("median", {indices, "indices", 1}, at::kLong);
  at::checkSameType("median", {values, "values", 0}, {self, "self", 2});
  std::vector<int64_t> out_shape = self.sizes().vec();
  if (self.dim() > 0) {
    if (keepdim) {
      out_shape[dim] = 1;
    } else {
      out_shape.erase(out_shape.begin() + dim);
    }
  }
  at::native::resize_output(values, out_shape);
  at::native::resize_output(indices, out_shape);
  TORCH_CHECK_NOT_IMPLEMENTED(median_dtype(self.scalar_type()), "\"median_out\" not implemented for '",
                              self.scalar_type(), "'");
  if (self.numel() == 0) return std::forward_as_tuple(values, indices);
  const at::Tensor in = self.dim() > 0 ? self : self.unsqueeze(0);
  const int64_t n = in.size(dim);
  const int64_t R = in.numel() / n;
  TORCH_CHECK(n <= INT32_MAX, ignore_nan ? "nanmedian" : "median",
              "(): detops takes rows of at most 2^31-1 elements, got ", n);
  const at::Tensor rows = in.movedim(dim, -1).contiguous().view({R, n});
  at::Tensor row_values = at::empty({R}, self.options());
  at::Tensor row_indices = at::empty({R}, self.options().dtype(at::kLong));
  if (self.is_cuda()) {
    cuda::median_kernel(rows, row_values, row_indices, ignore_nan);
  } else {
    // NB: the CPU path stands for the CUDA path's calls (ops/plan.h): recorded, and in plan-only mode not run.
    bool plan_only = false;
    for (const plan::EngineCall& call : median_calls(R, n, rows.element_size())) plan_only = plan::record(call);
    if (!plan_only) median_select_cpu(rows, row_values, row_indices, ignore_nan);
  }
  values.copy_(row_values.view(out_shape));
  indices.copy_(row_indices.view(out_shape));
  return std::forward_as_tuple(values, indices);
}

}  // namespace

plan::EngineCall median_sort_kernels(int64_t R, int64_t n, int64_t key_bytes) {
  constexpr int64_t kPartitioningThreshold = 500;
  const bool partition = R > kPartitioningThreshold;
  const int64_t items = R * n;
  const int64_t arrays = 2 * items * (key_bytes + 4);
  const int64_t offsets = (R + 1) * 8;
  // CUB's temp storage: the double buffers of keys and positions, and with partitioning two row lists.
  const int64_t temp = items * (key_bytes + 4) + (partition ? 2 * R * 4 : 0);
  // Traffic: the offsets written and read; the keys and positions read and the sorted ones written.
  const int64_t moved = 2 * offsets + arrays;
  return plan::kernel_call(/*launches=*/1 + (partition ? 3 : 1), /*copies=*/partition ? 1 : 0, /*allocations=*/6,
                           arrays + offsets + temp, moved);
}

std::vector<plan::EngineCall> median_calls(int64_t R, int64_t n, int64_t key_bytes) {
  if (n <= kMedianShortRow) return {plan::for_each_call(R)};
  return {plan::for_each_call(R * n), median_sort_kernels(R, n, key_bytes), plan::for_each_call(R)};
}

std::tuple<at::Tensor&, at::Tensor&> median_out(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& values,
                                                at::Tensor& indices) {
  return median_with_indices(self, dim, keepdim, values, indices, /*ignore_nan=*/false);
}

std::tuple<at::Tensor&, at::Tensor&> nanmedian_out(const at::Tensor& self, int64_t dim, bool keepdim,
                                                   at::Tensor& values, at::Tensor& indices) {
  return median_with_indices(self, dim, keepdim, values, indices, /*ignore_nan=*/true);
}

}  // namespace detops
