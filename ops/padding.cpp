// Padding backwards (reflection and replication, 1-D to 3-D, functional and .grad_input): checks, routing
// and the CPU path. The CUDA path is cuda/padding.cu; both run the per-element code of ops/padding_op.h
// (docs/order_contract.md, docs/padding.md).
#include "ops/padding.h"

#include "ops/common.h"
#include "ops/padding_op.h"
#include "ops/plan_record.h"
#include "ops/sort_reduce_cpu.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/reflection_pad1d_backward_cpu_dispatch.h>
#include <ATen/ops/reflection_pad1d_backward_cuda_dispatch.h>
#include <ATen/ops/reflection_pad2d_backward_cpu_dispatch.h>
#include <ATen/ops/reflection_pad2d_backward_cuda_dispatch.h>
#include <ATen/ops/reflection_pad3d_backward_cpu_dispatch.h>
#include <ATen/ops/reflection_pad3d_backward_cuda_dispatch.h>
#include <ATen/ops/replication_pad1d_backward_cpu_dispatch.h>
#include <ATen/ops/replication_pad1d_backward_cuda_dispatch.h>
#include <ATen/ops/replication_pad2d_backward_cpu_dispatch.h>
#include <ATen/ops/replication_pad2d_backward_cuda_dispatch.h>
#include <ATen/ops/replication_pad3d_backward_cpu_dispatch.h>
#include <ATen/ops/replication_pad3d_backward_cuda_dispatch.h>

namespace detops {
namespace {

// One covered op: its name (for errors), its number of padded axes, its mapping, and stock's kernels for
// the dtypes the engines do not compute (complex; integer and bool, which stock rejects).
struct PadOp {
  using Stock = at::Tensor (*)(const at::Tensor&, const at::Tensor&, at::IntArrayRef);
  using StockOut = at::Tensor& (*)(const at::Tensor&, const at::Tensor&, at::IntArrayRef, at::Tensor&);
  const char* name;
  int nspatial;
  bool reflect;
  Stock stock_cuda;
  Stock stock_cpu;
  StockOut stock_cuda_out;
  StockOut stock_cpu_out;
};

const PadOp kReflection1d{"reflection_pad1d_backward", 1, true, &at::cuda::reflection_pad1d_backward,
                          &at::cpu::reflection_pad1d_backward, &at::cuda::reflection_pad1d_backward_outf,
                          &at::cpu::reflection_pad1d_backward_outf};
const PadOp kReflection2d{"reflection_pad2d_backward", 2, true, &at::cuda::reflection_pad2d_backward,
                          &at::cpu::reflection_pad2d_backward, &at::cuda::reflection_pad2d_backward_outf,
                          &at::cpu::reflection_pad2d_backward_outf};
const PadOp kReflection3d{"reflection_pad3d_backward", 3, true, &at::cuda::reflection_pad3d_backward,
                          &at::cpu::reflection_pad3d_backward, &at::cuda::reflection_pad3d_backward_outf,
                          &at::cpu::reflection_pad3d_backward_outf};
const PadOp kReplication1d{"replication_pad1d_backward", 1, false, &at::cuda::replication_pad1d_backward,
                           &at::cpu::replication_pad1d_backward, &at::cuda::replication_pad1d_backward_outf,
                           &at::cpu::replication_pad1d_backward_outf};
const PadOp kReplication2d{"replication_pad2d_backward", 2, false, &at::cuda::replication_pad2d_backward,
                           &at::cpu::replication_pad2d_backward, &at::cuda::replication_pad2d_backward_outf,
                           &at::cpu::replication_pad2d_backward_outf};
const PadOp kReplication3d{"replication_pad3d_backward", 3, false, &at::cuda::replication_pad3d_backward,
                           &at::cpu::replication_pad3d_backward, &at::cuda::replication_pad3d_backward_outf,
                           &at::cpu::replication_pad3d_backward_outf};

// self is [leading..., spatial...] with one or two leading dims (unbatched or batched); grad_output has
// self's leading dims and the padded spatial sizes. padding is (left, right[, top, bottom[, front, back]]),
// the last dimension first, as in aten. Stock's checks (its messages where it has them), plus two that
// stock's CPU kernels skip and read out of bounds without: grad_output's leading dims, and for reflect
// padding < input size (the forward's check).
PadDims check_pad_backward(const PadOp& op, const at::Tensor& grad_output, const at::Tensor& self,
                           at::IntArrayRef padding) {
  const int n = op.nspatial;
  TORCH_CHECK(static_cast<int>(padding.size()) == 2 * n, op.name, "(): padding size is expected to be ", 2 * n,
              ", but got ", padding.size(), " values ", padding);
  const int64_t ndim = self.dim();
  TORCH_CHECK(ndim == n + 1 || ndim == n + 2, op.name, "(): expected a ", n + 1, "D or ", n + 2,
              "D (batch mode) self, but got sizes ", self.sizes());
  TORCH_CHECK(grad_output.dim() == ndim, op.name, "(): expected grad_output with ", ndim,
              " dimensions like self, but got sizes ", grad_output.sizes());
  TORCH_CHECK(grad_output.scalar_type() == self.scalar_type(), op.name, "(): expected grad_output of dtype ",
              self.scalar_type(), " like self, but got ", grad_output.scalar_type());
  for (int64_t i = 0; i < ndim - n; ++i) {
    TORCH_CHECK(grad_output.size(i) == self.size(i), op.name, "(): grad_output sizes ", grad_output.sizes(),
                " do not match self sizes ", self.sizes(), " in dimension ", i);
  }
  if (n == 3 && !op.reflect) {
    // Stock's replication_pad3d (CPU and CUDA): only the batch may be empty.
    bool nonempty = true;
    for (int64_t i = ndim == 5 ? 1 : 0; i < ndim; ++i) nonempty = nonempty && self.size(i) != 0;
    TORCH_CHECK(nonempty, "Expected 4D or 5D (batch mode) tensor with possibly 0 batch size and other non-zero ",
                "dimensions for input, but got: ", self.sizes());
  }
  PadDims d{};
  for (int k = 0; k < 3; ++k) {
    d.isize[k] = 1;
    d.osize[k] = 1;
    d.before[k] = 0;
  }
  static const char* const kAxisName[3] = {"width", "height", "depth"};
  // a: 0 for the last dimension (width), padding[2a], padding[2a + 1]; its axis in PadDims is 2 - a.
  if (op.reflect) {
    for (int a = 0; a < n; ++a) {
      const int64_t dim = ndim - 1 - a;
      TORCH_CHECK(padding[2 * a] < self.size(dim) && padding[2 * a + 1] < self.size(dim), op.name,
                  "(): Padding size should be less than the corresponding input dimension, but got: padding (",
                  padding[2 * a], ", ", padding[2 * a + 1], ") at dimension ", dim, " of input ", self.sizes());
    }
  }
  for (int a = 0; a < n; ++a) {
    const int64_t dim = ndim - 1 - a;
    const int64_t out = self.size(dim) + padding[2 * a] + padding[2 * a + 1];
    TORCH_CHECK(grad_output.size(dim) == out, op.name, "(): grad_output ", kAxisName[a],
                " unexpected. Expected: ", out, ", Got: ", grad_output.size(dim));
    d.isize[2 - a] = self.size(dim);
    d.osize[2 - a] = out;
    d.before[2 - a] = padding[2 * a];
  }
  check_same_device(op.name, self, grad_output, "grad_output");
  return d;
}

// The engines' computation, in the memory format stock's CPU kernels return (self's suggested format:
// channels-last stays channels-last; the bits do not depend on it).
// The .grad_input overloads pass `into`, their grad_input: computed straight into it and returned as it is where
// it can take the result (can_take: self's dtype, device and sizes, contiguous, sharing no memory with an
// input), otherwise into a new tensor that copy_to_out copies over.
at::Tensor pad_backward(const PadOp& op, const at::Tensor& grad_output, const at::Tensor& self,
                        at::IntArrayRef padding, at::Tensor* into = nullptr) {
  const PadDims d = check_pad_backward(op, grad_output, self, padding);
  if (!engine_dtype(self.scalar_type())) {
    at::Tensor result =
        self.is_cuda() ? op.stock_cuda(grad_output, self, padding) : op.stock_cpu(grad_output, self, padding);
    // NB: every output cropped away (negative padding): the gradient is zero, where stock's CPU reflection 1-D and
    // 3-D backwards return their result unwritten.
    return grad_output.numel() == 0 ? result.zero_() : result;
  }
  const bool direct = can_take(into, self, self.sizes(), at::MemoryFormat::Contiguous, {grad_output, self});
  at::Tensor grad_in =
      direct ? *into : at::empty(self.sizes(), self.options().memory_format(at::MemoryFormat::Contiguous));
  const auto fmt = self.suggest_memory_format();
  if (grad_in.numel() == 0) return grad_in.contiguous(fmt);
  const at::Tensor go = grad_output.contiguous();
  if (self.is_cuda()) {
    cuda::pad_backward_kernel(grad_in, go, d, op.reflect);
  } else if (!plan::record(plan::for_each_call(grad_in.numel()))) {
    // NB: the CPU path stands for the CUDA path's one gather over grad_in (ops/plan_record.h): recorded, and in
    // plan-only mode not run.
    pad_backward_cpu(grad_in, go, d, op.reflect);
  }
  return direct || fmt == at::MemoryFormat::Contiguous ? grad_in : grad_in.contiguous(fmt);
}

at::Tensor& pad_backward_out(const PadOp& op, const at::Tensor& grad_output, const at::Tensor& self,
                             at::IntArrayRef padding, at::Tensor& grad_input) {
  if (!engine_dtype(self.scalar_type())) {
    check_pad_backward(op, grad_output, self, padding);
    at::Tensor& result = self.is_cuda() ? op.stock_cuda_out(grad_output, self, padding, grad_input)
                                        : op.stock_cpu_out(grad_output, self, padding, grad_input);
    return grad_output.numel() == 0 ? result.zero_() : result;  // as pad_backward
  }
  return copy_to_out(op.name, "grad_input", self, pad_backward(op, grad_output, self, padding, &grad_input),
                     grad_input);
}

}  // namespace

at::Tensor reflection_pad1d_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef padding) {
  return pad_backward(kReflection1d, grad_output, self, padding);
}

at::Tensor& reflection_pad1d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                          at::IntArrayRef padding, at::Tensor& grad_input) {
  return pad_backward_out(kReflection1d, grad_output, self, padding, grad_input);
}

at::Tensor reflection_pad2d_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef padding) {
  return pad_backward(kReflection2d, grad_output, self, padding);
}

at::Tensor& reflection_pad2d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                          at::IntArrayRef padding, at::Tensor& grad_input) {
  return pad_backward_out(kReflection2d, grad_output, self, padding, grad_input);
}

at::Tensor reflection_pad3d_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef padding) {
  return pad_backward(kReflection3d, grad_output, self, padding);
}

at::Tensor& reflection_pad3d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                          at::IntArrayRef padding, at::Tensor& grad_input) {
  return pad_backward_out(kReflection3d, grad_output, self, padding, grad_input);
}

at::Tensor replication_pad1d_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef padding) {
  return pad_backward(kReplication1d, grad_output, self, padding);
}

at::Tensor& replication_pad1d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                           at::IntArrayRef padding, at::Tensor& grad_input) {
  return pad_backward_out(kReplication1d, grad_output, self, padding, grad_input);
}

at::Tensor replication_pad2d_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef padding) {
  return pad_backward(kReplication2d, grad_output, self, padding);
}

at::Tensor& replication_pad2d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                           at::IntArrayRef padding, at::Tensor& grad_input) {
  return pad_backward_out(kReplication2d, grad_output, self, padding, grad_input);
}

at::Tensor replication_pad3d_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef padding) {
  return pad_backward(kReplication3d, grad_output, self, padding);
}

at::Tensor& replication_pad3d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                           at::IntArrayRef padding, at::Tensor& grad_input) {
  return pad_backward_out(kReplication3d, grad_output, self, padding, grad_input);
}

}  // namespace detops
