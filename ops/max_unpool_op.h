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

// The CUDA path for planes of at most kUnpoolPlaneMaxChunks x kUnpoolPlaneMaxOutputs output elements (and fewer
// than 2^31 input elements): one block per (plane, chunk of at most kUnpoolPlaneMaxOutputs outputs) keeps the
// chunk's winners in shared memory, 4 bytes each (224 KB at most: within the 227 KB a block of sm_90 may take),
// raised by a 32-bit atomicMax per input element of the plane that writes into the chunk, then writes every
// output element of the chunk from its winner: one launch, no table in global memory, no fill
// (cuda/max_unpool.cu). Each chunk reads all its plane's indices, so the chunks are few. Larger planes (and
// devices with less shared memory per block) take the table path.
constexpr int64_t kUnpoolPlaneMaxOutputs = 56 * 1024;
constexpr int64_t kUnpoolPlaneMaxChunks = 16;
inline int64_t max_unpool_chunks(int64_t out_image, int64_t max_chunk = kUnpoolPlaneMaxOutputs) {
  return (out_image + max_chunk - 1) / max_chunk;
}
inline bool max_unpool_plane_path(int64_t in_image, int64_t out_image, int64_t max_chunk = kUnpoolPlaneMaxOutputs) {
  return in_image <= INT32_MAX && out_image <= INT32_MAX &&
         max_unpool_chunks(out_image, max_chunk) <= kUnpoolPlaneMaxChunks;
}

// The plane path's steps for chunk c of plane p, shared by the CUDA kernel and the CPU test that runs them in
// shuffled orders: the chunk's outputs [c * chunk, c * chunk + size) of the plane, the chunk position input j
// writes (-1 outside the chunk; the plane position outside [0, out_image) is an invalid index), and output o of
// the chunk written from its winner w, the largest j that writes it (-1: none, zero). NB: the same winners as
// the table's (an integer maximum, the same in any order), so the same bits.
template <typename bits_t>
struct MaxUnpoolPlaneOp {
  const bits_t* in;
  const int64_t* indices;
  bits_t* out;
  int64_t in_image;
  int64_t out_image;
  int32_t chunk;   // outputs per chunk (the last may hold fewer)
  int32_t chunks;  // per plane

  C10_HOST_DEVICE int32_t size(int32_t c) const {
    const int64_t left = out_image - int64_t{c} * chunk;
    return left < chunk ? static_cast<int32_t>(left) : chunk;
  }
  // Input j of plane p: its index (the plane position it writes), unchecked.
  C10_HOST_DEVICE int64_t index(int64_t p, int32_t j) const {
    return indices[p * in_image + j];
  }
  C10_HOST_DEVICE int32_t dest(int64_t p, int32_t c, int32_t j) const {
    const int64_t d = index(p, j) - int64_t{c} * chunk;
    return d < 0 || d >= size(c) ? -1 : static_cast<int32_t>(d);
  }
  C10_HOST_DEVICE void write(int64_t p, int32_t c, int32_t o, int32_t w) const {
    out[p * out_image + int64_t{c} * chunk + o] = w >= 0 ? in[p * in_image + w] : bits_t{};
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
