// Host-side helpers shared by the op front ends: routing, the checks every op makes, and the
// functional / in-place / out trio.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <initializer_list>
#include <string>

namespace detops {

// An element of 16 bytes (complex double) as plain bits.
struct alignas(16) Bits128 {
  uint64_t lo;
  uint64_t hi;
};

// Calls f(bits_t{}) with the unsigned integer (or Bits128) of the tensor's element size: for ops that only
// move elements, one instantiation per size serves every dtype, and a copy keeps the bits (NaN payloads
// too) on the CPU and the GPU alike.
template <typename F>
void dispatch_element_bits(const char* op, const at::Tensor& t, F&& f) {
  switch (t.element_size()) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    case 8:
      return f(uint64_t{});
    case 16:
      return f(Bits128{});
    default:
      TORCH_CHECK(false, op, "(): unsupported dtype ", t.scalar_type());
  }
}

// Scratch the op writes before it reads it: at::empty without the fill that torch adds to every at::empty under
// torch.use_deterministic_algorithms(True) (torch.utils.deterministic.fill_uninitialized_memory), a whole pass
// over the bytes. Never for a tensor the caller sees.
at::Tensor empty_scratch(at::IntArrayRef sizes, const at::TensorOptions& options);

// Dtypes the engines compute; other dtypes (integers: exact in stock already; bool, complex) go to the
// stock kernel of the tensor's device.
bool engine_dtype(at::ScalarType t);

void check_same_device(const char* op, const at::Tensor& self, const at::Tensor& other, const char* name);

// True where index values are validated on the host: always for CPU tensors; for CUDA tensors in strict
// mode only (a device-to-host copy), otherwise the kernels assert on the device and never write out of
// bounds.
bool validates_on_host(const at::Tensor& values);

// The one index-value check. Raises "<op>(): <name> <v> at position <i> is out of bounds <where>" for the
// first value of `values` (row-major order of its shape) outside [lo, hi), where validates_on_host().
// `where` defaults to "of [lo, hi)".
void check_index_values(const char* op, const char* name, const at::Tensor& values, int64_t lo, int64_t hi,
                        const std::string& where = "");

// Read by the aten overrides: true when detops should compute this call (mode and flag).
bool use_detops_kernels();

// The functional and .out overloads of an in-place front end `inplace(at::Tensor& result) -> at::Tensor&`,
// as aten's structured kernels make them: the functional one runs it on a contiguous clone of self; the
// .out one checks out's dtype and device, runs `checks` (the in-place op's argument checks, so that bad
// arguments leave out untouched), resizes out to self's shape, copies self in and runs it on out.
template <typename Inplace>
at::Tensor functional_from_inplace(const at::Tensor& self, Inplace&& inplace) {
  at::Tensor result = self.clone(at::MemoryFormat::Contiguous);
  inplace(result);
  return result;
}

// out's dtype must be self's, and its device too.
void check_out(const char* op, const at::Tensor& self, const at::Tensor& out);
// Resizes out to self's shape and copies self into it (nothing to copy when out is self).
void prepare_out_from_self(const at::Tensor& self, at::Tensor& out);

template <typename Checks, typename Inplace>
at::Tensor& out_from_inplace(const char* op, const at::Tensor& self, at::Tensor& out, Checks&& checks,
                             Inplace&& inplace) {
  check_out(op, self, out);
  checks();
  prepare_out_from_self(self, out);
  return inplace(out);
}

// The .out (grad_input) overload of a functional front end: `result` copied into `out`, resized to it,
// after checking out's dtype (self's) and device. Where the front end computed straight into `out` (can_take),
// result is out and nothing is copied.
at::Tensor& copy_to_out(const char* op, const char* out_name, const at::Tensor& self, const at::Tensor& result,
                        at::Tensor& out);

// Whether a .out (grad_input) overload can compute straight into `out` (null: a functional call): defined, of
// like's dtype and device, of `sizes`, contiguous in `format`, sharing no memory with any of `inputs`. Otherwise
// it computes into a new tensor that copy_to_out copies over (and raises the errors of a bad out).
bool can_take(const at::Tensor* out, const at::Tensor& like, at::IntArrayRef sizes, at::MemoryFormat format,
              std::initializer_list<at::Tensor> inputs);

}  // namespace detops
