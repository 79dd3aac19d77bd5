// scatter_add_ on CUDA: launch glue over the sort-reduce engine. Checks are done by ops/scatter_add.cpp.
#include "cuda/launch.h"
#include "cuda/sort_reduce.cuh"
#include "ops/scatter_add_op.h"

#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAGuard.h>

namespace detops::cuda {

void scatter_add_kernel(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  const c10::cuda::CUDAGuard guard(result.device());
  if (index.numel() == 0 || result.numel() == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, result.scalar_type(), "detops_scatter_add_cuda", [&] {
    AT_DISPATCH_INDEX_TYPES(index.scalar_type(), "detops_scatter_add_cuda_index", [&] {
      const auto op = make_scatter_add_op<scalar_t, index_t>(result, dim, index, src);
      sort_reduce<acc_type<scalar_t>>(op, index.numel(), result.numel(), 1, result.options());
    });
  });
}

}  // namespace detops::cuda
