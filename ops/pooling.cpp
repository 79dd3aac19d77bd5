// Pooling backwards: checks, routing and the CPU path. The CUDA path is cuda/pooling.cu; both run the
// per-element code of ops/pooling_op.h (docs/order_contract.md).
#include "ops/pooling.h"

#include "ops/common.h"
#include "ops/plan_record.h"
#include "ops/pooling_op.h"
#include "ops/sort_reduce_cpu.h"

#include <ATen/native/AdaptivePooling.h>
#include <ATen/native/Pool.h>
#include <ATen/ops/avg_pool3d_backward_cpu_dispatch.h>
#include <ATen/ops/avg_pool3d_backward_cuda_dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <string>

namespace detops {
namespace {

// self is [leading..., spatial...] with one or two leading dims (unbatched or batched); grad_output has
// the same leading dims. planes = product of the leading dims; 2-D ops get T = 1.
struct PoolShape {
  int64_t planes = 1;
  PoolDims dims{};
  MaxBox box = MaxBox::kAdaptive;  // max pools: how the windows are placed (dims.kernel, stride, pad for kWindow)
  int64_t input_plane() const { return dims.isize[0] * dims.isize[1] * dims.isize[2]; }
  int64_t output_plane() const { return dims.osize[0] * dims.osize[1] * dims.osize[2]; }
};

PoolShape check_pool_backward(const char* op, const at::Tensor& grad_output, const at::Tensor& self, int nspatial) {
  const int64_t ndim = self.dim();
  TORCH_CHECK(ndim == nspatial + 1 || ndim == nspatial + 2, op, "(): expected a ", nspatial + 1, "D or ", nspatial + 2,
              "D self, but got sizes ", self.sizes());
  TORCH_CHECK(grad_output.dim() == ndim, op, "(): expected grad_output with ", ndim,
              " dimensions like self, but got sizes ", grad_output.sizes());
  TORCH_CHECK(engine_dtype(self.scalar_type()), op,
              "(): expected self of a floating-point dtype (float, double, half, bfloat16), but got ",
              self.scalar_type());
  TORCH_CHECK(grad_output.scalar_type() == self.scalar_type(), op, "(): expected grad_output of dtype ",
              self.scalar_type(), " like self, but got ", grad_output.scalar_type());
  check_same_device(op, self, grad_output, "grad_output");
  PoolShape s;
  for (int64_t i = 0; i < ndim - nspatial; ++i) {
    TORCH_CHECK(grad_output.size(i) == self.size(i), op, "(): grad_output sizes ", grad_output.sizes(),
                " do not match self sizes ", self.sizes(), " in dimension ", i);
    s.planes *= self.size(i);
  }
  for (int k = 0; k < 3; ++k) {
    const bool used = k >= 3 - nspatial;
    s.dims.isize[k] = used ? self.size(ndim - 3 + k) : 1;
    s.dims.osize[k] = used ? grad_output.size(ndim - 3 + k) : 1;
    s.dims.kernel[k] = 1;
    s.dims.stride[k] = 1;
    s.dims.pad[k] = 0;
  }
  return s;
}

// Max pools: indices as stock's forward returns them (int64, grad_output's shape), each in
// [0, input_plane). CPU indices are always checked on the host (check_max_index_values; the CPU path finds
// a bad one on its way and checks then); CUDA ones in strict mode only, otherwise the kernel asserts and
// never writes out of bounds.
void check_max_indices(const char* op, const at::Tensor& self, const at::Tensor& grad_output,
                       const at::Tensor& indices) {
  TORCH_CHECK(indices.scalar_type() == at::kLong, op, "(): expected indices of dtype int64, but got ",
              indices.scalar_type());
  TORCH_CHECK(indices.sizes() == grad_output.sizes(), op, "(): expected indices of grad_output's shape ",
              grad_output.sizes(), ", but got ", indices.sizes());
  check_same_device(op, self, indices, "indices");
}

void check_max_index_values(const char* op, const at::Tensor& indices, int64_t input_plane) {
  check_index_values(op, "index", indices, 0, input_plane,
                     "for an input plane of " + std::to_string(input_plane) + " elements");
}

// The result in the memory format stock returns: self's suggested format for the ops whose stock kernels
// support channels-last (adaptive avg/max 2d, max_pool3d), contiguous for the others. The bits do not
// depend on it.
at::Tensor in_format(const at::Tensor& self, const at::Tensor& grad_in, bool keep_format) {
  const auto fmt = keep_format ? self.suggest_memory_format() : at::MemoryFormat::Contiguous;
  return fmt == at::MemoryFormat::Contiguous ? grad_in : grad_in.contiguous(fmt);
}

// The .grad_input overloads compute straight into grad_input, and return it, where it can take the result
// (can_take: self's dtype, device and sizes, contiguous, sharing no memory with an input). Otherwise into a new
// tensor, copied over by write_out (which also raises the errors for a bad grad_input).
at::Tensor avg_backward(const at::Tensor& grad_output, const at::Tensor& self, const PoolShape& s, bool adaptive,
                        bool count_include_pad, int64_t divisor_override, bool keep_format,
                        at::Tensor* into = nullptr) {
  const bool direct = can_take(into, self, self.sizes(), at::MemoryFormat::Contiguous, {grad_output, self});
  at::Tensor grad_in =
      direct ? *into : at::empty(self.sizes(), self.options().memory_format(at::MemoryFormat::Contiguous));
  if (grad_in.numel() == 0) return in_format(self, grad_in, keep_format);
  const at::Tensor go = grad_output.contiguous();
  if (self.is_cuda()) {
    cuda::avg_pool_backward_kernel(grad_in, go, s.dims, adaptive, count_include_pad, divisor_override);
  } else if (!record_avg_pool_backward(grad_in, go, s.dims)) {
    // NB: the CPU path stands for the CUDA path's gather (ops/plan.h): recorded, and in plan-only mode not run.
    avg_pool_backward_cpu(grad_in, go, s.dims, adaptive, count_include_pad, divisor_override);
  }
  return direct ? grad_in : in_format(self, grad_in, keep_format);
}

at::Tensor max_backward(const char* op_name, const at::Tensor& grad_output, const at::Tensor& self,
                        const at::Tensor& indices, const PoolShape& s, bool keep_format, at::Tensor* into = nullptr) {
  check_max_indices(op_name, self, grad_output, indices);
  const bool empty = self.numel() == 0 || grad_output.numel() == 0;
  if (self.is_cuda() || empty) check_max_index_values(op_name, indices, s.input_plane());
  const auto options = self.options().memory_format(at::MemoryFormat::Contiguous);
  if (empty) return in_format(self, at::zeros(self.sizes(), options), keep_format);
  const at::Tensor go = grad_output.contiguous();
  const at::Tensor idx = indices.contiguous();
  const bool direct =
      can_take(into, self, self.sizes(), at::MemoryFormat::Contiguous, {grad_output, self, indices});
  const MaxPoolBoxes boxes{s.box, s.dims};
  if (self.is_cuda()) {
    const MaxPoolTables t = build_max_pool_tables(boxes.kind, boxes.dims);
    bool gathers = false;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, self.scalar_type(), "detops_max_pool_backward",
                                    [&] { gathers = max_pool_gathers<scalar_t>(t, self, go); });
    if (gathers) {
      // The gather writes every element; the engine's gated call then rewrites the selected ones where some index
      // lies outside its box.
      at::Tensor grad_in = direct ? *into : at::empty(self.sizes(), options);
      cuda::max_pool_gather_backward_kernel(op_name, grad_in, go, idx, boxes, t);
      return direct ? grad_in : in_format(self, grad_in, keep_format);
    }
    // The engine writes only the elements some output selects: the rest are zeros, filled first. NB: a bad index
    // raises on the host above in strict mode, else asserts on the device (the context is then lost, whatever
    // grad_input holds).
    at::Tensor grad_in = direct ? into->zero_() : at::zeros(self.sizes(), options);
    cuda::max_pool_backward_kernel(op_name, grad_in, go, idx, s.output_plane(), s.input_plane());
    return direct ? grad_in : in_format(self, grad_in, keep_format);
  }
  // NB: straight into grad_input, bad indices must raise before anything is written; in plan-only mode
  // (ops/plan.h) the CPU path does not run, so they are checked here.
  if (direct || plan::plan_only()) check_max_index_values(op_name, idx, s.input_plane());
  at::Tensor grad_in = direct ? *into : at::empty(self.sizes(), options);
  if (!max_pool_backward_cpu(grad_in, go, idx, s.output_plane(), s.input_plane(), &boxes)) {
    // NB: a bad index raises here; an element selected more than kBlock times takes the sort-reduce
    // engine, the general form of the same tree.
    check_max_index_values(op_name, idx, s.input_plane());
    grad_in.zero_();
    // Where the CUDA path gathers first, its engine call is gated (an open gate here: the call runs, and records
    // itself gated as the CUDA one does).
    const int32_t open = 1;
    const bool gathers = record_max_pool_gather(&boxes, grad_in, go);
    max_pool_backward_compute<cpu::Engine>(op_name, grad_in, go, idx, s.output_plane(), s.input_plane(),
                                           gathers ? &open : nullptr);
  }
  return direct ? grad_in : in_format(self, grad_in, keep_format);
}

at::Tensor& write_out(const char* op, const at::Tensor& self, const at::Tensor& result, at::Tensor& grad_input) {
  return copy_to_out(op, "grad_input", self, result, grad_input);
}

// "a single int, or a tuple of n ints" arguments, as stock parses them.
int64_t pick(at::IntArrayRef v, int k) { return v.size() == 1 ? v[0] : v[k]; }

constexpr const char* kAvg3d = "avg_pool3d_backward";
constexpr const char* kMax3d = "max_pool3d_with_indices_backward";

PoolShape check_avg_pool3d(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef kernel_size,
                           at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode,
                           std::optional<int64_t> divisor_override) {
  TORCH_CHECK(kernel_size.size() == 1 || kernel_size.size() == 3,
              "avg_pool3d: kernel_size must be a single int, or a tuple of three ints");
  TORCH_CHECK(stride.empty() || stride.size() == 1 || stride.size() == 3,
              "avg_pool3d: stride must be omitted, a single int, or a tuple of three ints");
  TORCH_CHECK(padding.size() == 1 || padding.size() == 3,
              "avg_pool3d: padding must be a single int, or a tuple of three ints");
  TORCH_CHECK(self.dim() == 4 || self.dim() == 5, "non-empty 4D or 5D (batch mode) tensor expected for input");
  TORCH_CHECK(!divisor_override.has_value() || divisor_override.value() != 0, "divisor must be not zero");
  PoolShape s = check_pool_backward(kAvg3d, grad_output, self, 3);
  int64_t out[3];
  for (int k = 0; k < 3; ++k) {
    s.dims.kernel[k] = pick(kernel_size, k);
    s.dims.stride[k] = stride.empty() ? s.dims.kernel[k] : pick(stride, k);
    s.dims.pad[k] = pick(padding, k);
    TORCH_CHECK(s.dims.stride[k] > 0, kAvg3d, "(): stride should be greater than zero, but got ", stride);
    out[k] = at::native::pooling_output_shape<int64_t>(s.dims.isize[k], s.dims.kernel[k], s.dims.pad[k],
                                                       s.dims.stride[k], 1, ceil_mode);
  }
  const auto& d = s.dims;
  at::native::avg_pool3d_backward_shape_check(
      self, grad_output, self.size(-4), static_cast<int>(d.kernel[0]), static_cast<int>(d.kernel[1]),
      static_cast<int>(d.kernel[2]), static_cast<int>(d.stride[0]), static_cast<int>(d.stride[1]),
      static_cast<int>(d.stride[2]), static_cast<int>(d.pad[0]), static_cast<int>(d.pad[1]), static_cast<int>(d.pad[2]),
      d.isize[0], d.isize[1], d.isize[2], out[0], out[1], out[2], kAvg3d);
  return s;
}

PoolShape check_max_pool3d(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef kernel_size,
                           at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode,
                           const at::Tensor& indices) {
  TORCH_CHECK(kernel_size.size() == 1 || kernel_size.size() == 3,
              "max_pool3d: kernel_size must either be a single int, or a tuple of three ints");
  TORCH_CHECK(stride.empty() || stride.size() == 1 || stride.size() == 3,
              "max_pool3d: stride must either be omitted, a single int, or a tuple of three ints");
  TORCH_CHECK(padding.size() == 1 || padding.size() == 3,
              "max_pool3d: padding must either be a single int, or a tuple of three ints");
  TORCH_CHECK(dilation.size() == 1 || dilation.size() == 3,
              "max_pool3d: dilation must be either a single int, or a tuple of three ints");
  TORCH_CHECK(self.dim() == 4 || self.dim() == 5, "non-empty 4D or 5D (batch mode) tensor expected for input");
  PoolShape s = check_pool_backward(kMax3d, grad_output, self, 3);
  int64_t k[3], st[3], p[3], dl[3], out[3];
  for (int i = 0; i < 3; ++i) {
    k[i] = pick(kernel_size, i);
    st[i] = stride.empty() ? k[i] : pick(stride, i);
    p[i] = pick(padding, i);
    dl[i] = pick(dilation, i);
    TORCH_CHECK(st[i] > 0, kMax3d, "(): stride should be greater than zero, but got ", stride);
    out[i] = at::native::pooling_output_shape<int64_t>(s.dims.isize[i], k[i], p[i], st[i], dl[i], ceil_mode);
    s.dims.kernel[i] = (k[i] - 1) * dl[i] + 1;  // the extent of a dilated window: the gather's boxes
    s.dims.stride[i] = st[i];
    s.dims.pad[i] = p[i];
  }
  s.box = MaxBox::kWindow;
  const auto i32 = [](int64_t v) { return static_cast<int>(v); };
  at::native::max_pool3d_backward_shape_check(self, grad_output, indices, self.size(-4), i32(k[0]), i32(k[1]),
                                              i32(k[2]), i32(st[0]), i32(st[1]), i32(st[2]), i32(p[0]), i32(p[1]),
                                              i32(p[2]), i32(dl[0]), i32(dl[1]), i32(dl[2]), s.dims.isize[0],
                                              s.dims.isize[1], s.dims.isize[2], out[0], out[1], out[2], kMax3d);
  return s;
}

PoolShape check_fractional(const char* op, const at::Tensor& grad_output, const at::Tensor& self, int nspatial,
                           at::IntArrayRef kernel_size, at::IntArrayRef output_size) {
  TORCH_CHECK(static_cast<int>(kernel_size.size()) == nspatial, op, "(): kernel_size must have ", nspatial,
              " elements, but got ", kernel_size);
  TORCH_CHECK(static_cast<int>(output_size.size()) == nspatial, op, "(): output_size must have ", nspatial,
              " elements, but got ", output_size);
  PoolShape s = check_pool_backward(op, grad_output, self, nspatial);
  for (int k = 0; k < nspatial; ++k) {
    TORCH_CHECK(s.dims.osize[3 - nspatial + k] == output_size[k], op, "(): grad_output sizes ", grad_output.sizes(),
                " do not match output_size ", output_size);
    s.dims.kernel[3 - nspatial + k] = kernel_size[k];
  }
  s.box = MaxBox::kFractional;
  return s;
}

}  // namespace

at::Tensor adaptive_avg_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self) {
  const PoolShape s = check_pool_backward("adaptive_avg_pool2d_backward", grad_output, self, 2);
  at::native::adaptive_pool_empty_output_check(grad_output, "adaptive_avg_pool2d_backward");
  return avg_backward(grad_output, self, s, /*adaptive=*/true, false, 0, /*keep_format=*/true);
}

static at::Tensor adaptive_avg_pool3d_backward_into(const at::Tensor& grad_output, const at::Tensor& self,
                                                    at::Tensor* into) {
  const PoolShape s = check_pool_backward("adaptive_avg_pool3d_backward", grad_output, self, 3);
  at::native::adaptive_pool_empty_output_check(grad_output, "adaptive_avg_pool3d_backward");
  return avg_backward(grad_output, self, s, /*adaptive=*/true, false, 0, /*keep_format=*/false, into);
}

at::Tensor adaptive_avg_pool3d_backward(const at::Tensor& grad_output, const at::Tensor& self) {
  return adaptive_avg_pool3d_backward_into(grad_output, self, nullptr);
}

at::Tensor& adaptive_avg_pool3d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                             at::Tensor& grad_input) {
  return write_out("adaptive_avg_pool3d_backward", self,
                   adaptive_avg_pool3d_backward_into(grad_output, self, &grad_input), grad_input);
}

static at::Tensor avg_pool3d_backward_into(const at::Tensor& grad_output, const at::Tensor& self,
                                           at::IntArrayRef kernel_size, at::IntArrayRef stride, at::IntArrayRef padding,
                                           bool ceil_mode, bool count_include_pad,
                                           std::optional<int64_t> divisor_override, at::Tensor* into) {
  if (!engine_dtype(self.scalar_type())) {
    // Integers: stock's kernel (exact; stock CUDA has none and raises).
    if (into != nullptr) {
      return self.is_cuda() ? at::cuda::avg_pool3d_backward_outf(grad_output, self, kernel_size, stride, padding,
                                                                 ceil_mode, count_include_pad, divisor_override, *into)
                            : at::cpu::avg_pool3d_backward_outf(grad_output, self, kernel_size, stride, padding,
                                                                ceil_mode, count_include_pad, divisor_override, *into);
    }
    return self.is_cuda() ? at::cuda::avg_pool3d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
                                                          count_include_pad, divisor_override)
                          : at::cpu::avg_pool3d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
                                                         count_include_pad, divisor_override);
  }
  const PoolShape s = check_avg_pool3d(grad_output, self, kernel_size, stride, padding, ceil_mode, divisor_override);
  return avg_backward(grad_output, self, s, /*adaptive=*/false, count_include_pad, divisor_override.value_or(0),
                      /*keep_format=*/false, into);
}

at::Tensor avg_pool3d_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef kernel_size,
                               at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                               std::optional<int64_t> divisor_override) {
  return avg_pool3d_backward_into(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                  divisor_override, nullptr);
}

at::Tensor& avg_pool3d_backward_out(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef kernel_size,
                                    at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode,
                                    bool count_include_pad, std::optional<int64_t> divisor_override,
                                    at::Tensor& grad_input) {
  return write_out(kAvg3d, self,
                   avg_pool3d_backward_into(grad_output, self, kernel_size, stride, padding, ceil_mode,
                                            count_include_pad, divisor_override, &grad_input),
                   grad_input);
}

static at::Tensor adaptive_max_pool2d_backward_into(const at::Tensor& grad_output, const at::Tensor& self,
                                                    const at::Tensor& indices, at::Tensor* into) {
  constexpr const char* op = "adaptive_max_pool2d_backward";
  const PoolShape s = check_pool_backward(op, grad_output, self, 2);
  at::native::adaptive_pool_empty_output_check(grad_output, op);
  return max_backward(op, grad_output, self, indices, s, /*keep_format=*/true, into);
}

at::Tensor adaptive_max_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                        const at::Tensor& indices) {
  return adaptive_max_pool2d_backward_into(grad_output, self, indices, nullptr);
}

at::Tensor& adaptive_max_pool2d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                             const at::Tensor& indices, at::Tensor& grad_input) {
  return write_out("adaptive_max_pool2d_backward", self,
                   adaptive_max_pool2d_backward_into(grad_output, self, indices, &grad_input), grad_input);
}

static at::Tensor adaptive_max_pool3d_backward_into(const at::Tensor& grad_output, const at::Tensor& self,
                                                    const at::Tensor& indices, at::Tensor* into) {
  constexpr const char* op = "adaptive_max_pool3d_backward";
  const PoolShape s = check_pool_backward(op, grad_output, self, 3);
  at::native::adaptive_pool_empty_output_check(grad_output, op);
  return max_backward(op, grad_output, self, indices, s, /*keep_format=*/false, into);
}

at::Tensor adaptive_max_pool3d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                        const at::Tensor& indices) {
  return adaptive_max_pool3d_backward_into(grad_output, self, indices, nullptr);
}

at::Tensor& adaptive_max_pool3d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                             const at::Tensor& indices, at::Tensor& grad_input) {
  return write_out("adaptive_max_pool3d_backward", self,
                   adaptive_max_pool3d_backward_into(grad_output, self, indices, &grad_input), grad_input);
}

static at::Tensor fractional_max_pool2d_backward_into(const at::Tensor& grad_output, const at::Tensor& self,
                                                      at::IntArrayRef kernel_size, at::IntArrayRef output_size,
                                                      const at::Tensor& indices, at::Tensor* into) {
  constexpr const char* op = "fractional_max_pool2d_backward";
  return max_backward(op, grad_output, self, indices,
                      check_fractional(op, grad_output, self, 2, kernel_size, output_size), /*keep_format=*/false,
                      into);
}

at::Tensor fractional_max_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                          at::IntArrayRef kernel_size, at::IntArrayRef output_size,
                                          const at::Tensor& indices) {
  return fractional_max_pool2d_backward_into(grad_output, self, kernel_size, output_size, indices, nullptr);
}

at::Tensor& fractional_max_pool2d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                               at::IntArrayRef kernel_size, at::IntArrayRef output_size,
                                               const at::Tensor& indices, at::Tensor& grad_input) {
  return write_out(
      "fractional_max_pool2d_backward", self,
      fractional_max_pool2d_backward_into(grad_output, self, kernel_size, output_size, indices, &grad_input),
      grad_input);
}

static at::Tensor fractional_max_pool3d_backward_into(const at::Tensor& grad_output, const at::Tensor& self,
                                                      at::IntArrayRef kernel_size, at::IntArrayRef output_size,
                                                      const at::Tensor& indices, at::Tensor* into) {
  constexpr const char* op = "fractional_max_pool3d_backward";
  return max_backward(op, grad_output, self, indices,
                      check_fractional(op, grad_output, self, 3, kernel_size, output_size), /*keep_format=*/false,
                      into);
}

at::Tensor fractional_max_pool3d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                          at::IntArrayRef kernel_size, at::IntArrayRef output_size,
                                          const at::Tensor& indices) {
  return fractional_max_pool3d_backward_into(grad_output, self, kernel_size, output_size, indices, nullptr);
}

at::Tensor& fractional_max_pool3d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                               at::IntArrayRef kernel_size, at::IntArrayRef output_size,
                                               const at::Tensor& indices, at::Tensor& grad_input) {
  return write_out(
      "fractional_max_pool3d_backward", self,
      fractional_max_pool3d_backward_into(grad_output, self, kernel_size, output_size, indices, &grad_input),
      grad_input);
}

static at::Tensor max_pool3d_with_indices_backward_into(const at::Tensor& grad_output, const at::Tensor& self,
                                                        at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                                        at::IntArrayRef padding, at::IntArrayRef dilation,
                                                        bool ceil_mode, const at::Tensor& indices, at::Tensor* into) {
  const PoolShape s = check_max_pool3d(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices);
  return max_backward(kMax3d, grad_output, self, indices, s, /*keep_format=*/true, into);
}

at::Tensor max_pool3d_with_indices_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                            at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                            at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode,
                                            const at::Tensor& indices) {
  return max_pool3d_with_indices_backward_into(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode,
                                               indices, nullptr);
}

at::Tensor& max_pool3d_with_indices_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                                 at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                                 at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode,
                                                 const at::Tensor& indices, at::Tensor& grad_input) {
  return write_out(kMax3d, self,
                   max_pool3d_with_indices_backward_into(grad_output, self, kernel_size, stride, padding, dilation,
                                                         ceil_mode, indices, &grad_input),
                   grad_input);
}

}  // namespace detops
