// median / nanmedian along a dim: checks, the layout, and the CPU path. The CUDA path is cuda/median.cu.
// Both sort every row stably by the key of ops/median_op.h and pick the same sorted position, so CPU and
// CUDA give the same values and indices, which are stock CPU's (docs/median.md).
#include "ops/median.h"

#include "ops/median_op.h"
#include "ops/sort_reduce_cpu.h"

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

// Each row sorted on its own by std::stable_sort: the bits do not depend on the number of threads.
struct CpuSortRows {
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
    median_compute<cpu::Engine>(rows, row_values, row_indices, ignore_nan, CpuSortRows());
  }
  values.copy_(row_values.view(out_shape));
  indices.copy_(row_indices.view(out_shape));
  return std::forward_as_tuple(values, indices);
}

}  // namespace

std::tuple<at::Tensor&, at::Tensor&> median_out(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& values,
                                                at::Tensor& indices) {
  return median_with_indices(self, dim, keepdim, values, indices, /*ignore_nan=*/false);
}

std::tuple<at::Tensor&, at::Tensor&> nanmedian_out(const at::Tensor& self, int64_t dim, bool keepdim,
                                                   at::Tensor& values, at::Tensor& indices) {
  return median_with_indices(self, dim, keepdim, values, indices, /*ignore_nan=*/true);
}

}  // namespace detops
