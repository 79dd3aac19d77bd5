// bincount with weights on CUDA: launch glue over the sort-reduce engine. Checks are done by
// ops/bincount.cpp.
#include "cuda/bincount_launch.h"
#include "cuda/sort_reduce.cuh"
#include "ops/bincount_op.h"

#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAGuard.h>

namespace detops::cuda {

void bincount_kernel(at::Tensor& out, const at::Tensor& self, const at::Tensor& weights) {
  const c10::cuda::CUDAGuard guard(out.device());
  if (self.numel() == 0 || out.numel() == 0) return;
  AT_DISPATCH_FLOATING_TYPES(out.scalar_type(), "detops_bincount_cuda", [&] {
    using weight_t = scalar_t;
    AT_DISPATCH_INTEGRAL_TYPES(self.scalar_type(), "detops_bincount_cuda_input", [&] {
      const auto op = make_bincount_op<scalar_t, weight_t>(out, self, weights);
      sort_reduce<acc_type<weight_t>>(op, self.numel(), op.nbins, 1, out.options());
    });
  });
}

}  // namespace detops::cuda
