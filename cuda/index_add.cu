// index_add_ on CUDA: launch glue over the sort-reduce engine. Checks are done by ops/index_add.cpp.
#include "cuda/launch.h"
#include "cuda/sort_reduce.cuh"
#include "ops/index_add_op.h"

#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAGuard.h>

namespace detops::cuda {

void index_add_kernel(at::Tensor& result, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                      const at::Scalar& alpha) {
  const c10::cuda::CUDAGuard guard(result.device());
  const int64_t columns = index_add_columns(result, dim);
  if (index.numel() == 0 || columns == 0) return;
  const at::Tensor src = source.contiguous();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, result.scalar_type(), "detops_index_add_cuda", [&] {
    AT_DISPATCH_INDEX_TYPES(index.scalar_type(), "detops_index_add_cuda_index", [&] {
      const auto op = make_index_add_op<scalar_t, index_t>(result, dim, index, src, alpha);
      sort_reduce<acc_type<scalar_t>>(op, op.n, op.dim_size, columns, result.options());
    });
  });
}

}  // namespace detops::cuda
