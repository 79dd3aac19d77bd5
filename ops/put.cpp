// put_: checks, routing and the CPU path. The CUDA path is cuda/put.cu; both run the sort-reduce engine
// keyed by the flat destination (ops/put_op.h, docs/order_contract.md): accumulate=True sums each
// destination's contributions by the contract's tree, accumulate=False keeps the last one in source order.
#include "ops/put.h"

#include "ops/common.h"
#include "ops/put_op.h"
#include "ops/sort_reduce_cpu.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/ops/put_cpu_dispatch.h>
#include <ATen/ops/put_cuda_dispatch.h>

#include <string>

namespace detops {
namespace {

constexpr const char* kOp = "put_";

// Stock's checks in stock's order (aten put_, TensorAdvancedIndexing.cpp).
void check_put(const at::Tensor& self, const at::Tensor& index, const at::Tensor& source) {
  TORCH_CHECK(index.scalar_type() == at::kLong, kOp, "(): Expected a long tensor for index, but got ",
              index.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(), kOp,
              "(): self and source expected to have the same dtype, but got self.dtype = ", self.scalar_type(),
              " and source.dtype = ", source.scalar_type());
  TORCH_CHECK(self.device() == source.device() && self.device() == index.device(), kOp,
              "(): self, index and source expected to be in the same device, but got self.device = ",
              self.device(), ", index.device = ", index.device(), ", and source.device = ", source.device());
  TORCH_CHECK_INDEX(source.numel() == index.numel(), kOp,
                    "(): Expected source and index to have the same number of elements, but got source.numel() = ",
                    source.numel(), ", index.numel() = ", index.numel());
  TORCH_CHECK_INDEX(!(self.numel() == 0 && index.numel() != 0), kOp,
                    "(): Tried to put elements into an empty tensor");
  at::assert_no_internal_overlap(self);
  at::assert_no_overlap(self, index);
  at::assert_no_overlap(self, source);
}

}  // namespace

at::Tensor& put_(at::Tensor& self, const at::Tensor& index, const at::Tensor& source, bool accumulate) {
  check_put(self, index, source);
  // NB: accumulate=False copies elements, so every dtype runs the engine (last writer wins); sums run it for
  // the floating and integer dtypes, and leave bool and complex to stock.
  if (accumulate && !put_add_dtype(self.scalar_type())) {
    return self.is_cuda() ? at::cuda::put_(self, index, source, accumulate)
                          : at::cpu::put_(self, index, source, accumulate);
  }
  const int64_t numel = self.numel();
  check_index_values(kOp, "index", index, -numel, numel,
                     "for a tensor of " + std::to_string(numel) + " elements");
  if (index.numel() == 0) return self;
  at::Tensor work = self.is_contiguous() ? self : self.contiguous();
  const at::Tensor flat_index = index.contiguous();
  const at::Tensor flat_source = source.contiguous();
  if (work.is_cuda()) {
    cuda::put_kernel(work, flat_index, flat_source, accumulate);
  } else {
    put_compute<cpu::Engine>(work, flat_index, flat_source, accumulate);
  }
  if (!work.is_same(self)) self.copy_(work);
  return self;
}

at::Tensor& put_cpu(at::Tensor& self, const at::Tensor& index, const at::Tensor& source, bool accumulate) {
  return accumulate ? at::cpu::put_(self, index, source, accumulate) : put_(self, index, source, accumulate);
}

}  // namespace detops
