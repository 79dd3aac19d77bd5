// The sort-reduce engine, CUDA path: the plan (sort + long segments' slots), computed once per call in the call's
// workspace (laid out by plan::layout_for, ops/plan.h) and independent of dtype. See cuda/sort_reduce.cuh for
// the reduction over the plan, docs/order_contract.md for the why, docs/engine.md for the stream operations.
#pragma once

#include "cuda/sort_reduce_steps.h"
#include "ops/plan.h"

#include <c10/core/TensorOptions.h>
#include <c10/cuda/CUDAMacros.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>

namespace detops::cuda {

struct SortedSegments {
  const void* keys = nullptr;           // [n] sorted destination keys (uint32 or uint64)
  const void* values = nullptr;         // [n] the sorted values: source positions (int32, the permutation) or
                                        // the contributions where the sort carried them (plan::carries_values)
  const int32_t* seg_first = nullptr;   // [n] the first scratch slot of each long segment, at its head
  const int32_t* tile_start = nullptr;  // [n / kBlock + 1] the segment start of each tile's first position
                                        // (both null without tree levels)
};

// Whether the engine runs its multi-step kernels (the counting sort's passes, the tree's levels, the buckets' steps)
// on `stream` in one cooperative launch: the current device has cooperative launch, the stream is not being captured
// into a CUDA graph (a graph replays its launches cheaply, and not every driver captures a cooperative one), and the
// environment variable DETOPS_COOPERATIVE is not "0" (read at each call; with "0" they run one launch per step, the
// fallback that the tests run on any device). The bits are the same either way.
bool cooperative_launch(cudaStream_t stream);

// Launches `kernel` (a __global__ function; `args` as cudaLaunchCooperativeKernel takes them) as one cooperative
// launch of `grid` x `block` on `stream` and returns true, where cooperative_launch(stream) allows it and the blocks
// fit; otherwise launches nothing and returns false (fewer blocks fit than the occupancy said where the device is
// shared, as under MPS), and the caller runs its steps one launch each.
bool launch_cooperative(const void* kernel, dim3 grid, dim3 block, void** args, cudaStream_t stream);

// The blocks of `kernel` (a __global__ function, `threads` per block) resident at once on the current device:
// its occupancy x the multiprocessors, queried once per device and cached in `cache` (one per kernel). The grid
// of a cooperative launch is at most this.
int64_t resident_blocks(const void* kernel, int threads, std::atomic<int64_t> (&cache)[C10_COMPILE_TIME_MAX_GPUS]);

// Bytes of CUB temp storage a call needs (the radix sort's), queried once per (device, n, key width, bits, value
// width) and cached.
int64_t cub_temp_bytes(int64_t n, int64_t key_bytes, int bits, int64_t value_bytes);

// ws: the call's workspace, whose layout.keys[0] / layout.pos[0] hold the unsorted keys (values in
// [0, num_keys]; num_keys marks an invalid contribution, sorted last and never written) and their values of
// value_bytes each (plan::sort_value_bytes): source positions (4), or the contributions where the call carries
// them (4 or 8, 32-bit keys only). Sorts (key, value) stably (by counting where layout.table_entries > 0,
// plan::counting_sort: 32-bit keys; else by CUB's radix sort), gives the long segments their scratch slots (the
// counter at layout.num_slots zeroed by the key kernel) and the tiles their segment starts, on the current
// stream, no host sync. With a gate (not null; the counting sort only) every kernel returns at once while *gate is
// 0 (gate_of, ops/contract.h).
SortedSegments plan_segments(char* ws, const plan::Layout& layout, int32_t n, int64_t num_keys, int64_t key_bytes,
                             int64_t value_bytes, const int32_t* gate = nullptr);

// A key chunk's compaction (cuda/chunked.cuh): writes to pos, in increasing order, the positions i < n whose
// bit (i % 32) of mask[i / 32] is set, on the current stream. NB: stable, so each destination's contributions
// keep their source order.
void select_chunk_positions(const uint32_t* mask, int64_t n, int64_t* pos, const at::TensorOptions& device_options);

}  // namespace detops::cuda
