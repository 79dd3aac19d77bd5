// max_unpool2d / max_unpool3d front ends (ops/max_unpool.cpp): aten's signatures, CPU and CUDA tensors. Stock
// throws under the deterministic flag on both devices, so these override the aten CPU kernels as well
// (registration/cpu_ops.def). nn.MaxUnpool1d goes through max_unpool2d.
#pragma once

#include "ops/plan_record.h"

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

namespace detops {

// The CUDA path's own work before its gather (cuda/max_unpool.cu; a kernel entry, ops/plan_record.h) for n input
// elements and `outputs` output elements: the winner table (one allocation, filled with -1 by one kernel) and
// the winner kernel. The CPU path records it in their place.
plan::EngineCall max_unpool_kernels(int64_t n, int64_t outputs);
// The plane path's one kernel (max_unpool_plane_path, ops/max_unpool_op.h) for n input elements into planes of
// out_image outputs: no table, no gather after it. The CPU path records it in its place too.
plan::EngineCall max_unpool_plane_kernels(int64_t n, int64_t out_image);

at::Tensor max_unpool2d(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size);
at::Tensor& max_unpool2d_out(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size,
                             at::Tensor& out);
at::Tensor max_unpool3d(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size,
                        at::IntArrayRef stride, at::IntArrayRef padding);
at::Tensor& max_unpool3d_out(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size,
                             at::IntArrayRef stride, at::IntArrayRef padding, at::Tensor& out);

}  // namespace detops
