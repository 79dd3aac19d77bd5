// max_unpool2d / max_unpool3d (functional, .out): checks, layouts, and the CPU path. The CUDA path is
// cuda/max_unpool.cu; both take, for each output element, the last input element in source order that
// writes it (ops/max_unpool_op.h), and give the same bits.
#include "ops/max_unpool.h"

#include "ops/common.h"
#include "ops/max_unpool_op.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <c10/util/irange.h>

#include <algorithm>
#include <string>
#include <vector>

namespace detops {
namespace {

bool unpool_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

// Stock's check that every non-batch dim of the input is non-empty, with its kernel's name.
void check_non_empty(const at::Tensor& self, const char* kernel) {
  for (const auto i : c10::irange(1, self.dim())) {
    TORCH_CHECK(self.size(i) > 0, kernel, self.is_cuda() ? "_cuda" : "_cpu",
                "(): Expected input to have non-zero size for non-batch dimensions, but got ", self.sizes(),
                " with dimension ", i, " being empty.");
  }
}

// Stock's 2-d checks in stock's order (max_unpooling2d_forward_out_cpu).
void check_unpool2d(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size) {
  TORCH_CHECK(indices.scalar_type() == at::kLong, "elements in indices should be type int64 but got: ",
              indices.scalar_type());
  TORCH_CHECK(output_size.size() == 2,
              "There should be exactly two elements (height, width) in output_size, but got ", output_size.size(),
              " elements.");
  TORCH_CHECK(self.dim() == 3 || self.dim() == 4,
              "Input to max_unpooling2d should be a 3d or 4d Tensor, but got a tensor with ", self.dim(),
              " dimensions.");
  TORCH_CHECK(self.sizes() == indices.sizes(), "Expected shape of indices to be same as that of the input tensor (",
              self.sizes(), ") but got indices tensor with shape: ", indices.sizes());
  check_non_empty(self, "max_unpooling2d_forward_out");
}

// Stock's 3-d checks in stock's order (max_unpooling3d_shape_check).
void check_unpool3d(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size,
                    at::IntArrayRef stride, at::IntArrayRef padding) {
  TORCH_CHECK(indices.scalar_type() == at::kLong, "elements in indices should be type int64");
  TORCH_CHECK(self.dim() == 4 || self.dim() == 5,
              "Input to max_unpooling3d should be a 4d or 5d Tensor, but got a tensor with ", self.dim(),
              " dimensions.");
  TORCH_CHECK(output_size.size() == 3,
              "There should be exactly three elements (depth, height, width) in output_size, but got ",
              output_size.size(), " elements.");
  TORCH_CHECK(stride.size() == 3,
              "There should be exactly three elements (depth, height, width) in stride, but got: ", stride.size(),
              " elements.");
  TORCH_CHECK(padding.size() == 3,
              "There should be exactly three elements (depth, height, width) in padding, but got: ", padding.size(),
              " elements.");
  TORCH_CHECK(self.sizes() == indices.sizes(), "Expected shape of indices to be same as that of the input tensor (",
              self.sizes(), ") but got indices tensor with shape: ", indices.sizes());
  check_non_empty(self, "max_unpooling3d_forward_out");
  TORCH_CHECK(stride[0] > 0 && stride[1] > 0 && stride[2] > 0, "strides should be greater than zero, but got stride: ",
              stride);
}

// "HxW" or "DxHxW", as stock's error names the output volume.
std::string volume(at::IntArrayRef output_size) {
  std::string s;
  for (const auto i : c10::irange(output_size.size())) s += (i ? "x" : "") + std::to_string(output_size[i]);
  return s;
}

// Stock's error for the first index (in source order) outside [0, out_image), where validates_on_host().
void check_unpool_indices(const at::Tensor& indices, int64_t out_image, at::IntArrayRef output_size) {
  if (indices.numel() == 0 || !validates_on_host(indices)) return;
  const at::Tensor host = indices.is_cpu() ? indices : indices.cpu();
  const int64_t* p = host.const_data_ptr<int64_t>();
  for (int64_t i = 0; i < host.numel(); ++i) {
    TORCH_CHECK(p[i] >= 0 && p[i] < out_image, "Found an invalid max index: ", p[i],
                " (output volumes are of size ", volume(output_size), ")");
  }
}

// The CPU computation: each plane's elements in source order copy their bits to their destinations, so the
// last writer stays, the element max_unpool_compute's winner table names (the largest position); out holds
// zeros. NB: planes are apart and each is walked whole by one thread in source order, so the bits do not
// depend on the number of threads. No division per element: the plane is the outer loop.
void max_unpool_serial(const at::Tensor& in, const at::Tensor& indices, at::Tensor& out, int64_t in_image,
                       int64_t out_image) {
  const int64_t planes = in.numel() / in_image;
  const int64_t* idx = indices.const_data_ptr<int64_t>();
  dispatch_element_bits("max_unpool", out, [&](auto tag) {
    using bits_t = decltype(tag);
    const bits_t* src = static_cast<const bits_t*>(in.const_data_ptr());
    bits_t* dst = static_cast<bits_t*>(out.data_ptr());
    at::parallel_for(0, planes, std::max<int64_t>(1, 16384 / in_image), [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const int64_t* pi = idx + p * in_image;
        const bits_t* ps = src + p * in_image;
        bits_t* pd = dst + p * out_image;
        for (int64_t j = 0; j < in_image; ++j) {
          const int64_t d = pi[j];
          if (static_cast<uint64_t>(d) < static_cast<uint64_t>(out_image)) pd[d] = ps[j];
        }
      }
    });
  });
}

// The shared body: out resized to the batch and channel dims of self followed by output_size (in
// `format`), then written whole (zero where no element writes). spatial: 2 or 3.
at::Tensor& max_unpool_out_impl(const char* name, const at::Tensor& self, const at::Tensor& indices,
                                at::IntArrayRef output_size, int64_t spatial, at::MemoryFormat format,
                                at::Tensor& out) {
  TORCH_CHECK_NOT_IMPLEMENTED(unpool_dtype(self.scalar_type()), "\"", name, "\" not implemented for '",
                              self.scalar_type(), "'");
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "expected scalar type ", self.scalar_type(),
              " but found ", out.scalar_type());
  check_same_device(name, self, indices, "indices");
  check_same_device(name, self, out, "out");
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end() - spatial);
  shape.insert(shape.end(), output_size.begin(), output_size.end());
  out.resize_(shape, format);
  int64_t in_image = 1;
  int64_t out_image = 1;
  for (const auto i : c10::irange(spatial)) {
    in_image *= self.size(self.dim() - spatial + i);
    out_image *= output_size[i];
  }
  const at::Tensor idx = indices.contiguous();
  if (out.numel() != 0) check_unpool_indices(idx, out_image, output_size);
  if (out.numel() == 0 || self.numel() == 0) return out.zero_();
  const at::Tensor in = self.contiguous();
  at::Tensor work = out.is_contiguous() ? out : at::empty(shape, out.options());
  if (work.is_cuda()) {
    // The gather writes every output element (zero where no element writes): no fill before it.
    cuda::max_unpool_kernel(in, idx, work, in_image, out_image);
  } else {
    // NB: the serial pass stands for the CUDA path's plane kernel, or its winner kernels and gather (ops/plan.h),
    // recorded in their place (the plane path as on sm_90). It writes only the destinations, after zeros.
    if (max_unpool_plane_path(in_image, out_image)) {
      plan::record(max_unpool_plane_kernels(in.numel(), out_image));
    } else {
      plan::record(max_unpool_kernels(in.numel(), work.numel()));
      plan::record(plan::for_each_call(work.numel()));
    }
    work.zero_();
    max_unpool_serial(in, idx, work, in_image, out_image);
  }
  if (!work.is_same(out)) out.copy_(work);
  return out;
}

}  // namespace

plan::EngineCall max_unpool_kernels(int64_t n, int64_t outputs) {
  // Traffic: the table written by the fill; the indices read and the table raised, once per input element.
  return plan::kernel_call(/*launches=*/2, /*copies=*/0, /*allocations=*/1, outputs * 8, outputs * 8 + 2 * n * 8);
}

plan::EngineCall max_unpool_plane_kernels(int64_t n, int64_t out_image) {
  // Traffic: the indices read once per chunk of their plane (the winners stay in shared memory; the output's
  // writes and the winners' reads are the element copy's, which the table path's gather does not count either).
  return plan::kernel_call(/*launches=*/1, /*copies=*/0, /*allocations=*/0, 0, n * 8 * max_unpool_chunks(out_image));
}

at::Tensor& max_unpool2d_out(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size,
                             at::Tensor& out) {
  check_unpool2d(self, indices, output_size);
  // NB: stock keeps a 4-d input's suggested memory format (channels-last in, channels-last out).
  const at::MemoryFormat format = self.dim() == 4 ? self.suggest_memory_format() : at::MemoryFormat::Contiguous;
  return max_unpool_out_impl("max_unpool2d", self, indices, output_size, 2, format, out);
}

at::Tensor max_unpool2d(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size) {
  at::Tensor out = at::empty({0}, self.options());
  max_unpool2d_out(self, indices, output_size, out);
  return out;
}

at::Tensor& max_unpool3d_out(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size,
                             at::IntArrayRef stride, at::IntArrayRef padding, at::Tensor& out) {
  check_unpool3d(self, indices, output_size, stride, padding);
  return max_unpool_out_impl("max_unpool3d", self, indices, output_size, 3, at::MemoryFormat::Contiguous, out);
}

at::Tensor max_unpool3d(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size,
                        at::IntArrayRef stride, at::IntArrayRef padding) {
  at::Tensor out = at::empty({0}, self.options());
  max_unpool3d_out(self, indices, output_size, stride, padding, out);
  return out;
}

}  // namespace detops
