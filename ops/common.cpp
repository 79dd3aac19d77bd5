#include "ops/common.h"

#include "detops/detops.h"

#include <ATen/Dispatch.h>
#include <ATen/ops/_to_copy.h>

namespace detops {

bool engine_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

void check_same_device(const char* op, const at::Tensor& self, const at::Tensor& other, const char* name) {
  TORCH_CHECK(self.device() == other.device(), op, "(): expected ", name, " on the same device as self (",
              self.device(), "), but got ", other.device());
}

void check_index_values(const char* op, const at::Tensor& index, int64_t size, int64_t dim) {
  if (index.numel() == 0) return;
  if (!index.is_cpu() && !get_strict()) return;
  const at::Tensor host = index.is_cpu() ? index.contiguous() : at::_to_copy(index, at::kCPU).contiguous();
  AT_DISPATCH_INDEX_TYPES(host.scalar_type(), "detops_check_index_values", [&] {
    const index_t* p = host.const_data_ptr<index_t>();
    const int64_t n = host.numel();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = static_cast<int64_t>(p[i]);
      TORCH_CHECK(v >= 0 && v < size, op, "(): index ", v, " at position ", i,
                        " is out of bounds for dimension ", dim, " with size ", size);
    }
  });
}

}  // namespace detops
