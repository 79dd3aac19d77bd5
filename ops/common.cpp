#include "ops/common.h"

#include "detops/detops.h"

#include <ATen/Dispatch.h>
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/cuda/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_to_copy.h>

namespace detops {

at::Tensor empty_scratch(at::IntArrayRef sizes, const at::TensorOptions& options) {
  return options.device().is_cuda() ? at::detail::empty_cuda(sizes, options) : at::detail::empty_cpu(sizes, options);
}

bool engine_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

void check_same_device(const char* op, const at::Tensor& self, const at::Tensor& other, const char* name) {
  TORCH_CHECK(self.device() == other.device(), op, "(): expected ", name, " on the same device as self (",
              self.device(), "), but got ", other.device());
}

bool validates_on_host(const at::Tensor& values) {
  return values.is_cpu() || get_strict();
}

namespace {

// Where the compiler can make copies of a function for wider vector units, picked when the library loads
// (through an ELF indirect function: Linux).
#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#define DETOPS_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DETOPS_VECTOR_CLONES
#endif

// Whether any of p[0, n) lies outside [lo, hi), for 0 <= hi, lo < hi and |lo|, |hi| < 2^61. NB: v lies in
// [lo, hi) exactly when neither v - lo nor hi - 1 - v (64-bit, wrapping) has its sign bit set, so one OR over
// all values answers, in a loop the compiler vectorises.
template <typename index_t>
DETOPS_VECTOR_CLONES bool any_out_of_range(const index_t* p, int64_t n, int64_t lo, int64_t hi) {
  const uint64_t ulo = static_cast<uint64_t>(lo), last = static_cast<uint64_t>(hi - 1);
  uint64_t any = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t v = static_cast<uint64_t>(static_cast<int64_t>(p[i]));
    any |= (v - ulo) | (last - v);
  }
  return (any >> 63) != 0;
}

}  // namespace

void check_index_values(const char* op, const char* name, const at::Tensor& values, int64_t lo, int64_t hi,
                        const std::string& where) {
  if (values.numel() == 0 || !validates_on_host(values)) return;
  const at::Tensor host = (values.is_cpu() ? values : at::_to_copy(values, values.options().device(at::kCPU)))
                              .contiguous();
  AT_DISPATCH_INDEX_TYPES(host.scalar_type(), "detops_check_index_values", [&] {
    const index_t* p = host.const_data_ptr<index_t>();
    const int64_t n = host.numel();
    // First whether any value is out of range, with no branch per value (any_out_of_range); the first bad
    // position is looked for only then.
    if (hi >= 0 && lo < hi && lo > -(int64_t{1} << 61) && hi < (int64_t{1} << 61)) {
      if (!any_out_of_range(p, n, lo, hi)) return;
    }
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = static_cast<int64_t>(p[i]);
      if (v >= lo && v < hi) continue;
      if (where.empty()) {
        TORCH_CHECK(false, op, "(): ", name, " ", v, " at position ", i, " is out of bounds of [", lo, ", ", hi, ")");
      }
      TORCH_CHECK(false, op, "(): ", name, " ", v, " at position ", i, " is out of bounds ", where);
    }
  });
}

void check_out(const char* op, const at::Tensor& self, const at::Tensor& out) {
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), op, "(): out (", out.scalar_type(), ") and self (",
              self.scalar_type(), ") must have the same scalar type");
  check_same_device(op, self, out, "out");
}

void prepare_out_from_self(const at::Tensor& self, at::Tensor& out) {
  at::native::resize_output(out, self.sizes());
  if (!out.is_same(self)) out.copy_(self);
}

bool can_take(const at::Tensor* out, const at::Tensor& like, at::IntArrayRef sizes, at::MemoryFormat format,
              std::initializer_list<at::Tensor> inputs) {
  if (out == nullptr || !out->defined() || out->scalar_type() != like.scalar_type() ||
      out->device() != like.device() || out->sizes() != sizes || !out->is_contiguous(format)) {
    return false;
  }
  for (const at::Tensor& t : inputs) {
    if (at::get_overlap_status(*out, t) != at::MemOverlapStatus::No) return false;
  }
  return true;
}

at::Tensor& copy_to_out(const char* op, const char* out_name, const at::Tensor& self, const at::Tensor& result,
                        at::Tensor& out) {
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), op, "(): expected ", out_name, " of dtype ",
              self.scalar_type(), ", but got ", out.scalar_type());
  check_same_device(op, self, out, out_name);
  at::native::resize_output(out, result.sizes());
  out.copy_(result);
  return out;
}

}  // namespace detops
