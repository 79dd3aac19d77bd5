// max_unpool2d / max_unpool3d: the per-element code shared by the CPU and CUDA paths (docs/pooling.md,
// "max_unpool").
//
// Input and indices are read as contiguous (N, C, spatial) tensors: plane p = n * C + c holds in_image
// elements, and element i = p * in_image + j writes output element p * out_image + indices[i]. Where several
// elements of a plane write one output element, the last in source order wins (the largest i), as a serial
// loop over the input would leave it. NB: first the winner of every output element (the largest source
// position, an exact maximum of integers: the same whatever the order), then a gather copies it
// (docs/order_contract.md, a selection).
#pragma once

#include "ops/common.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/full.h>
#include <c10/macros/Macros.h>

#include <cstdint>

namespace detops {

// The flat output position element i writes, or -1 when its index is outside [0, out_image).
C10_HOST_DEVICE inline int64_t max_unpool_dest(int64_t i, const int64_t* indices, int64_t in_image,
                                               int64_t out_image) {
  const int64_t idx = indices[i];
  if (idx < 0 || idx >= out_image) return -1;
  return (i / in_image) * out_image + idx;
}

// Output element o: the winning input element's bits, or zero where no element writes.
template <typename bits_t>
struct MaxUnpoolGatherOp {
  const bits_t* in;
  const int64_t* winner;
  bits_t* out;

  C10_HOST_DEVICE void operator()(int64_t o) const {
    const int64_t w = winner[o];
    out[o] = w >= 0 ? in[w] : bits_t{};
  }
};

// The CUDA path for planes of at most kUnpoolPlaneMaxOutputs output elements (and fewer than 2^31 input
// elements): one block per plane keeps the plane's winners in shared memory, 4 bytes each (224 KB at most:
// within the 227 KB a block of sm_90 may take), raised by a 32-bit atomicMax per input element, then writes
// every output element of the plane from its winner: one launch, no table in global memory, no fill
// (cuda/max_unpool.cu). Larger planes (and devices with less shared memory per block) take the table path.
constexpr int64_t kUnpoolPlaneMaxOutputs = 56 * 1024;
inline bool max_unpool_plane_path(int64_t in_image, int64_t out_image) {
  return out_image <= kUnpoolPlaneMaxOutputs && in_image <= INT32_MAX;
}

// The plane path's steps for plane p, shared by the CUDA kernel and the CPU test that runs them in shuffled
// orders: input j's output position in the plane (-1 outside [0, out_image)), and output o written from its
// winner w, the largest j that writes it (-1: none, zero). NB: the same winners as the table's (an integer
// maximum, the same in any order), so the same bits.
template <typename bits_t>
struct MaxUnpoolPlaneOp {
  const bits_t* in;
  const int64_t* indices;
  bits_t* out;
  int64_t in_image;
  int64_t out_image;

  C10_HOST_DEVICE int32_t dest(int64_t p, int32_t j) const {
    const int64_t idx = indices[p * in_image + j];
    return idx < 0 || idx >= out_image ? -1 : static_cast<int32_t>(idx);
  }
  C10_HOST_DEVICE void write(int64_t p, int32_t o, int32_t w) const {
    out[p * out_image + o] = w >= 0 ? in[p * in_image + w] : bits_t{};
  }
};

// out (contiguous, out_image elements per plane) from in and indices (contiguous, in_image per plane): the
// winners by `scatter(indices, n, in_image, out_image, winner)` (winner holds -1; each valid element
// raises its destination's winner to its position), then the gather on an engine (cpu::Engine or
// cuda::Engine). Only the elements' bits move, so one instantiation per element size serves every dtype.
template <typename Engine, typename Scatter>
void max_unpool_compute(const at::Tensor& in, const at::Tensor& indices, at::Tensor& out, int64_t in_image,
                        int64_t out_image, Scatter&& scatter) {
  at::Tensor winner = at::full({out.numel()}, -1, indices.options());
  scatter(indices.const_data_ptr<int64_t>(), in.numel(), in_image, out_image, winner.data_ptr<int64_t>());
  dispatch_element_bits("max_unpool", out, [&](auto tag) {
    using bits_t = decltype(tag);
    Engine::for_each(MaxUnpoolGatherOp<bits_t>{static_cast<const bits_t*>(in.const_data_ptr()),
                                                winner.const_data_ptr<int64_t>(),
                                                static_cast<bits_t*>(out.data_ptr())},
                     out.numel());
  });
}

namespace cuda {
// max_unpool_compute on CUDA (cuda/max_unpool.cu): the winners by an integer atomicMax per element.
void max_unpool_kernel(const at::Tensor& in, const at::Tensor& indices, at::Tensor& out, int64_t in_image,
                       int64_t out_image);
}  // namespace cuda

}  // namespace detops
