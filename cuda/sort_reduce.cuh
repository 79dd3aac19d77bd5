// The sort-reduce engine, CUDA path: keys -> plan (cuda/sort_reduce.cu) -> the contract's fixed tree,
// level 0 for every block in parallel, then each higher level in parallel (docs/order_contract.md), all in
// one workspace allocation laid out by plan::layout_for (ops/plan.h; stream operations in docs/engine.md).
// The per-element arithmetic comes from the op's __host__ __device__ struct, the same one the CPU
// engine (ops/sort_reduce_cpu.h) calls.
#pragma once

#include "cuda/chunked.cuh"
#include "cuda/sort_reduce.h"
#include "cuda/sort_reduce_steps.h"
#include "ops/common.h"
#include "ops/contract.h"
#include "ops/last_writer_op.h"
#include "ops/plan.h"
#include "ops/plan_record.h"

#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/core/ScalarType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/macros/Macros.h>

#include <cooperative_groups.h>
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <atomic>
#include <type_traits>

namespace detops::cuda {

// Level 0 runs one warp per tile of positions (level0_rows_kernel) from this many columns on, when the call
// has at least kWarpRowsMinPerKey contributions per key: leaders are then sparse. Where nearly every position
// leads, the warp kernel measured 0.68-0.97x on an H200 while each column recounted its block; with the facts
// taken once per position it is unmeasured there, so one thread per (position, column) stays (bench/RESULTS.md).
// Levels 1 and above use their warp kernel (level_rows_kernel) from kWarpRowsMinD columns on, whatever the
// contention: there leaders are sparse among the slots.
constexpr int32_t kWarpRowsMinD = 16;
constexpr int64_t kWarpRowsMinPerKey = 4;

struct Launch2D {
  dim3 grid;
  dim3 block;
};

// Rows (positions or slots) on blockDim.y and gridDim.x; columns on blockDim.x and gridDim.y.
inline Launch2D launch_2d(int64_t rows, int64_t cols) {
  int tx = 1;
  while (tx < cols && tx < 128) tx *= 2;
  const int ty = 256 / tx;
  const int64_t gx = (rows + ty - 1) / ty;
  const int64_t gy = std::min<int64_t>((cols + tx - 1) / tx, 65535);
  return {dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), dim3(tx, ty)};
}

// level0_kernel's launch: at most 32 threads per position, each taking columns c, c + 32, ... (gridDim.y = 1).
// NB: every thread of a position computes the position's block facts (a few dependent loads) before its folds;
// with a thread per column (launch_2d), a position of 256 columns ran them 256 times (100k rows of 256 into 1M:
// 25.6M threads, each waiting on the facts for one column's fold).
inline Launch2D launch_level0(int64_t n, int64_t D) {
  int tx = 1;
  while (tx < D && tx < 32) tx *= 2;
  const int ty = 256 / tx;
  return {dim3(static_cast<unsigned>((n + ty - 1) / ty)), dim3(tx, ty)};
}

// Contributions per thread of the key kernel.
constexpr int kKeyItems = 4;

// kKeyItems contributions per thread, blockDim.x apart (coalesced): each one's destination key, or num_keys
// (sorted last, never written) if invalid or skipped (kSkipKey, ops/contract.h), and the radix sort's value: its
// source position, or where the sort carries the contributions (values not null, plan::carries_values: at most
// engine::kMaxCarriedColumns) its D columns (engine::carried_contribution), read here in source order. All the
// keys are computed first, then all the columns, then stored, so each thread has kKeyItems loads in flight
// where one contribution at a time waited on its index, then on its source. The first thread zeroes the slot
// counter (num_slots, null without levels) that the heads of long segments take their slots from after the
// sort. NB: positions are computed in 64 bits before the bound check: near 2^31 contributions the 32-bit
// product of block and thread indices would wrap past the check.
template <typename acc_t, typename KeyT, typename Op>
__global__ void make_keys_kernel(Op op, int32_t n, int64_t num_keys, int32_t D, KeyT* keys, int32_t* positions,
                                 acc_t* values, int32_t* num_slots) {
  if (gated_off(gate_of(op))) return;
  const int64_t first = int64_t{blockIdx.x} * blockDim.x * kKeyItems + threadIdx.x;
  int64_t k[kKeyItems];
#pragma unroll
  for (int j = 0; j < kKeyItems; ++j) {
    const int64_t i = first + int64_t{j} * blockDim.x;
    k[j] = i < n ? op.key(i) : kSkipKey;
  }
  bool valid[kKeyItems];
#pragma unroll
  for (int j = 0; j < kKeyItems; ++j) {
    const bool skip = k[j] == kSkipKey;
    const bool ok = skip || (k[j] >= 0 && k[j] < num_keys);
    CUDA_KERNEL_ASSERT(ok && "detops: index out of range (set DETOPS_STRICT=1 for a host-side error)");
    valid[j] = !skip && ok;
  }
  if (values != nullptr) {
    acc_t v[kKeyItems][engine::kMaxCarriedColumns];
#pragma unroll
    for (int j = 0; j < kKeyItems; ++j) {
      const int64_t i = first + int64_t{j} * blockDim.x;
#pragma unroll
      for (int c = 0; c < engine::kMaxCarriedColumns; ++c) {
        v[j][c] = c < D ? engine::carried_contribution<acc_t>(op, i, valid[j], c) : acc_t{};
      }
    }
#pragma unroll
    for (int j = 0; j < kKeyItems; ++j) {
      const int64_t i = first + int64_t{j} * blockDim.x;
      if (i >= n) break;
      keys[i] = static_cast<KeyT>(valid[j] ? k[j] : num_keys);
#pragma unroll
      for (int c = 0; c < engine::kMaxCarriedColumns; ++c) {
        if (c < D) values[i * D + c] = v[j][c];
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < kKeyItems; ++j) {
      const int64_t i = first + int64_t{j} * blockDim.x;
      if (i >= n) break;
      keys[i] = static_cast<KeyT>(valid[j] ? k[j] : num_keys);
      positions[i] = static_cast<int32_t>(i);
    }
  }
  if (first == 0 && num_slots != nullptr) *num_slots = 0;
}

// Level 0: one thread per (sorted position, column), above 32 columns 32 threads per position, each taking every
// 32nd column (launch_level0); block leaders fold (engine::level0_block once, then engine::level0_fold per
// column). The first column's thread of a long segment's leader also records its slot (engine::record_slot).
// NB: launch bounds of 4 blocks of 256 per SM cap the kernel at 64 registers (the fold of a block is otherwise
// unrolled into ~170).
template <typename acc_t, typename KeyT, typename Op, typename Src>
__global__ void __launch_bounds__(256, 4) level0_kernel(Op op, const KeyT* keys, Src src, const int32_t* seg_first,
                                                     const int32_t* tile_start, int32_t n, int64_t num_keys,
                                                     int32_t D, acc_t* scratch, int32_t* slot_first,
                                                     int32_t* slot_pos) {
  if (gated_off(gate_of(op))) return;
  const int64_t p64 = int64_t{blockIdx.x} * blockDim.y + threadIdx.y;
  if (p64 >= n) return;
  const int32_t p = static_cast<int32_t>(p64);
  const engine::Level0Block b = engine::level0_block(keys, seg_first, tile_start, n, num_keys, p);
  if (b.count == 0) return;
  if (blockIdx.y == 0 && threadIdx.x == 0) engine::record_slot(b, p, slot_first, slot_pos);
  for (int32_t c = blockIdx.y * blockDim.x + threadIdx.x; c < D; c += gridDim.y * blockDim.x) {
    engine::level0_fold<acc_t>(op, src, b, D, scratch, p, c);
  }
}

// Level 0 where the sort carried the contributions (at most engine::kWindowValueBytes per position): a block per
// window of engine::kWindow sorted positions, a thread per position. The block loads the keys, contributions and
// tile starts its positions' facts and folds read into shared memory (engine::window_load: two positions per
// thread at most, every load independent and coalesced), then each position takes its block facts and folds
// its block from there (engine::window_level0_step). level0_kernel's leaders load one block after another from
// global memory, one lane in kBlock at high contention, each a chain of dependent loads. NB: the same facts and
// fold as level0_kernel's over copies of the same words: the bits do not change.
template <typename acc_t, typename KeyT, typename Op>
__global__ void __launch_bounds__(engine::kWindow, 4) level0_window_kernel(Op op, const KeyT* keys,
                                                                            engine::SortedValues<acc_t> src,
                                                                            const int32_t* seg_first,
                                                                            const int32_t* tile_start, int32_t n,
                                                                            int64_t num_keys, int32_t D,
                                                                            acc_t* scratch, int32_t* slot_first,
                                                                            int32_t* slot_pos) {
  if (gated_off(gate_of(op))) return;
  static_assert(sizeof(acc_t) <= engine::kWindowValueBytes, "a window position holds at most 8 bytes");
  __shared__ KeyT wkeys[engine::kWindowKeys];
  __shared__ alignas(8) unsigned char wraw[engine::kWindowValues * engine::kWindowValueBytes];
  __shared__ int32_t wtiles[engine::kWindowTiles];
  auto* wvalues = reinterpret_cast<acc_t*>(wraw);
  const auto base = static_cast<int32_t>(int64_t{blockIdx.x} * engine::kWindow);
  const int t = static_cast<int>(threadIdx.x);
  engine::window_load<acc_t>(keys, src, tile_start, n, D, base, t, wkeys, wvalues, wtiles);
  __syncthreads();
  const int64_t p = int64_t{base} + t;
  if (p >= n) return;
  engine::window_level0_step<acc_t>(op, wkeys, wvalues, wtiles, seg_first, n, num_keys, D, base, scratch, slot_first,
                                    slot_pos, static_cast<int32_t>(p));
}

// Level 0 for wide rows with repeated keys (above): one warp per tile of 32 sorted positions. Each lane takes
// one position: if it leads a block, the block's count and slot (engine::level0_block), and it records the
// slot (engine::record_slot). Then the warp takes the tile's block leaders in turn, their facts broadcast from
// their lanes, its lanes over the columns. Only leaders fold, and a segment of k contributions has
// ceil(k / kBlock) of them: one thread per (position, column) would launch a warp for every position and
// leave most of them idle.
template <typename acc_t, typename KeyT, typename Op>
__global__ void __launch_bounds__(256, 4) level0_rows_kernel(Op op, const KeyT* keys, const int32_t* perm,
                                                          const int32_t* seg_first, const int32_t* tile_start,
                                                          int32_t n, int64_t num_keys, int32_t D, acc_t* scratch,
                                                          int32_t* slot_first, int32_t* slot_pos) {
  if (gated_off(gate_of(op))) return;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t tile = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32 * 32;
  if (tile >= n) return;  // whole warps: tile is the same for every lane
  const int64_t p = tile + lane;
  engine::Level0Block mine{0, 0, -1, -1};
  if (p < n) {
    const auto q = static_cast<int32_t>(p);
    mine = engine::level0_block(keys, seg_first, tile_start, n, num_keys, q);
    engine::record_slot(mine, q, slot_first, slot_pos);
  }
  for (unsigned leaders = __ballot_sync(0xffffffffu, mine.count > 0); leaders != 0; leaders &= leaders - 1) {
    const int from = __ffs(leaders) - 1;
    const engine::Level0Block b{__shfl_sync(0xffffffffu, mine.key, from), __shfl_sync(0xffffffffu, mine.count, from),
                                __shfl_sync(0xffffffffu, mine.slot, from), -1};
    const auto q = static_cast<int32_t>(tile + from);
    for (int32_t c = lane; c < D; c += 32) {
      engine::level0_fold<acc_t>(op, perm, b, D, scratch, q, c);
    }
  }
}

// Levels 1 .. levels in one launch: a grid whose blocks are all resident at once (a cooperative launch), the
// levels separated by a grid-wide barrier. In each level a thread takes (scratch slot, column) pairs, grid-stride
// over the slots in use; group leaders fold in place (engine::level_group once, then engine::level_fold per
// column). A level whose items lie `stride` >= the slots in use apart has no group of two items, nor has any
// level above it, so the levels stop there: `total` is the same for every block, so they all stop together.
// NB: each group is folded by one thread whatever the grid, and the barrier orders the levels as separate
// launches did, so the bits do not depend on the grid. With levels == 1 it never waits at the barrier, so a
// plain launch runs it too (one level per launch where the device has no cooperative launch).
template <typename acc_t, typename KeyT, typename Op>
__global__ void __launch_bounds__(256, 4) levels_kernel(Op op, const KeyT* keys, const int32_t* slot_first,
                                                     const int32_t* slot_pos, const int32_t* num_slots,
                                                     int32_t stride, int levels, int32_t D, acc_t* scratch) {
  if (gated_off(gate_of(op))) return;
  const int32_t total = *num_slots;
  const int64_t step = int64_t{gridDim.x} * blockDim.y;
  for (int level = 0; level < levels && stride < total; ++level, stride *= kBlock) {
    if (level > 0) cooperative_groups::this_grid().sync();
    for (int64_t q64 = int64_t{blockIdx.x} * blockDim.y + threadIdx.y; q64 < total; q64 += step) {
      const auto q = static_cast<int32_t>(q64);
      const engine::LevelGroup g = engine::level_group(keys, slot_first, slot_pos, total, stride, q);
      if (g.count == 0) continue;
      for (int32_t c = threadIdx.x; c < D; c += blockDim.x) {
        engine::level_fold<acc_t>(op, g, stride, D, scratch, q, c);
      }
    }
  }
}

// levels_kernel for wide rows: in each level one warp per tile of 32 scratch slots, grid-stride. Each lane
// takes one slot's group facts (engine::level_group); the warp then runs the tile's group leaders in turn, their
// facts broadcast from their lanes, its lanes over the columns. At level L only slots at a multiple of kBlock^L
// from their segment's first slot lead, and only in segments of more than kBlock^(L-1) slots: one thread per
// (slot, column) would mostly idle.
template <typename acc_t, typename KeyT, typename Op>
__global__ void __launch_bounds__(256, 4) levels_rows_kernel(Op op, const KeyT* keys, const int32_t* slot_first,
                                                          const int32_t* slot_pos, const int32_t* num_slots,
                                                          int32_t stride, int levels, int32_t D, acc_t* scratch) {
  if (gated_off(gate_of(op))) return;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int32_t total = *num_slots;
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int level = 0; level < levels && stride < total; ++level, stride *= kBlock) {
    if (level > 0) cooperative_groups::this_grid().sync();
    // The tile is the same for every lane: whole warps run the votes.
    for (int64_t tile = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32 * 32; tile < total; tile += step) {
      engine::LevelGroup mine{0, 0, false};
      if (tile + lane < total) {
        mine = engine::level_group(keys, slot_first, slot_pos, total, stride, static_cast<int32_t>(tile + lane));
      }
      for (unsigned leaders = __ballot_sync(0xffffffffu, mine.count > 0); leaders != 0; leaders &= leaders - 1) {
        const int from = __ffs(leaders) - 1;
        const engine::LevelGroup g{__shfl_sync(0xffffffffu, mine.key, from),
                                   __shfl_sync(0xffffffffu, mine.count, from),
                                   __shfl_sync(0xffffffffu, static_cast<int>(mine.finish), from) != 0};
        const auto q = static_cast<int32_t>(tile + from);
        for (int32_t c = lane; c < D; c += 32) {
          engine::level_fold<acc_t>(op, g, stride, D, scratch, q, c);
        }
      }
    }
  }
}

// Launches levels 1 .. levels of a plan: one cooperative launch of levels_kernel (levels_rows_kernel where
// kRows), its grid the blocks that level 1's slots need, at most those resident at once (the kernel's
// occupancy x multiprocessors, queried once per device); one launch per level where the device has no
// cooperative launch (or is capturing, or DETOPS_COOPERATIVE=0: cooperative_launch) or fewer blocks fit.
template <typename acc_t, typename KeyT, typename Op, bool kRows>
void launch_levels(const Op& op, const KeyT* keys, const int32_t* slot_first, const int32_t* slot_pos,
                   const int32_t* num_slots, int32_t max_slots, int levels, int32_t D, acc_t* scratch,
                   cudaStream_t stream) {
  const auto kernel = [] {
    if constexpr (kRows) {
      return levels_rows_kernel<acc_t, KeyT, Op>;
    } else {
      return levels_kernel<acc_t, KeyT, Op>;
    }
  }();
  const Launch2D shape = kRows ? Launch2D{dim3(static_cast<unsigned>((int64_t{max_slots} + 255) / 256)), dim3(256)}
                               : launch_2d(max_slots, D);
  static std::atomic<int64_t> resident[C10_COMPILE_TIME_MAX_GPUS] = {};
  const int64_t blocks = resident_blocks(reinterpret_cast<const void*>(kernel),
                                         static_cast<int>(shape.block.x * shape.block.y), resident);
  const auto grid = static_cast<unsigned>(std::min<int64_t>(shape.grid.x, blocks));
  int32_t stride = 1;
  void* args[] = {const_cast<Op*>(&op), &keys, &slot_first, &slot_pos, &num_slots, &stride, &levels, &D, &scratch};
  if (launch_cooperative(reinterpret_cast<const void*>(kernel), dim3(grid), shape.block, args, stream)) return;
  for (int level = 1; level <= levels; ++level, stride *= kBlock) {
    kernel<<<grid, shape.block, 0, stream>>>(op, keys, slot_first, slot_pos, num_slots, stride, 1, D, scratch);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

// Level 0 and the levels above over the sorted plan, level 0 taking the contributions from src: through the
// permutation (level0_kernel, or level0_rows_kernel for wide rows), or engine::SortedValues where the sort carried
// them (level0_window_kernel). kWarpRows = false keeps to the one-thread-per-(position or slot, column) kernels
// otherwise (a key chunk's plan, and the levels of the calls whose sort carries their contributions:
// sort_reduce_plan).
template <typename acc_t, typename KeyT, bool kWarpRows, typename Op, typename Src>
void reduce_plan(const Op& op, char* ws, const plan::Layout& layout, const SortedSegments& sorted, const Src& src,
                 int32_t n, int64_t num_keys, int32_t D) {
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const bool levels = layout.levels > 0;
  auto* scratch = levels ? reinterpret_cast<acc_t*>(ws + layout.scratch) : nullptr;
  auto* slot_first = levels ? reinterpret_cast<int32_t*>(ws + layout.slot_first) : nullptr;
  auto* slot_pos = levels ? reinterpret_cast<int32_t*>(ws + layout.slot_pos) : nullptr;
  auto* num_slots = levels ? reinterpret_cast<int32_t*>(ws + layout.num_slots) : nullptr;
  const KeyT* keys = static_cast<const KeyT*>(sorted.keys);
  const auto level0 = [&] {
    if constexpr (std::is_same_v<Src, engine::SortedValues<acc_t>>) {
      TORCH_CHECK(D * int64_t{sizeof(acc_t)} <= engine::kWindowValueBytes, "detops: the sort carries at most ",
                  engine::kWindowValueBytes, " bytes per contribution, got ", D, " columns of ", sizeof(acc_t));
      const auto grid = static_cast<unsigned>((int64_t{n} + engine::kWindow - 1) / engine::kWindow);
      level0_window_kernel<acc_t, KeyT, Op><<<grid, engine::kWindow, 0, stream>>>(
          op, keys, src, sorted.seg_first, sorted.tile_start, n, num_keys, D, scratch, slot_first, slot_pos);
    } else {
      const Launch2D l0 = launch_level0(n, D);
      level0_kernel<acc_t, KeyT, Op, Src><<<l0.grid, l0.block, 0, stream>>>(op, keys, src, sorted.seg_first,
                                                                            sorted.tile_start, n, num_keys, D,
                                                                            scratch, slot_first, slot_pos);
    }
  };
  if constexpr (kWarpRows) {
    if (D >= kWarpRowsMinD && int64_t{n} >= kWarpRowsMinPerKey * num_keys) {
      const auto grid = static_cast<unsigned>((int64_t{n} + 255) / 256);
      level0_rows_kernel<acc_t, KeyT, Op><<<grid, 256, 0, stream>>>(op, keys, src, sorted.seg_first,
                                                                    sorted.tile_start, n, num_keys, D, scratch,
                                                                    slot_first, slot_pos);
    } else {
      level0();
    }
  } else {
    level0();
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (!levels) return;
  const auto max_slots = static_cast<int32_t>(layout.max_slots);
  if constexpr (kWarpRows) {
    if (D >= kWarpRowsMinD) {
      return launch_levels<acc_t, KeyT, Op, true>(op, keys, slot_first, slot_pos, num_slots, max_slots,
                                                  layout.levels, D, scratch, stream);
    }
  }
  launch_levels<acc_t, KeyT, Op, false>(op, keys, slot_first, slot_pos, num_slots, max_slots, layout.levels, D,
                                        scratch, stream);
}

// The engine's entry for one call of op `name`. Op provides key(i) (-1 if invalid, kSkipKey to drop the
// contribution), contribution(i, c) and finalize(key, c, acc) as __host__ __device__ members over device
// pointers, and optionally a Combine type (default AddRn, combine_of_t in ops/contract.h) and a gate (gate_of: every
// kernel of the call returns at once while it is 0; 32-bit keys and at most 2^31 - 1 contributions, where no CUB
// sort runs). Current stream, no sync.
// Positions are 32-bit: a call of 2^31 or more contributions runs in key chunks (cuda/chunked.cuh).
// The single-block path: one block of kSingleBlockThreads runs the whole call (plan::single_block). Each thread
// computes the keys of kSingleBlockItems consecutive contributions; cub::BlockRadixSort sorts (key, position)
// in registers (NB: stable: ranks follow the blocked arrangement, which is source order, so equal keys keep
// source order, as the device-wide sort does); the sorted keys and permutation go to the workspace; the heads
// of long segments take their scratch slots (engine::long_segment_slots, an atomic add on the block's
// counter) and the tiles record their segment starts (engine::tile_step); then level 0 and each level over
// all (position or slot, column) pairs, with __syncthreads() between them, calling the same engine steps as
// the multi-block kernels.
template <typename acc_t, typename KeyT, typename Op>
__global__ void __launch_bounds__(plan::kSingleBlockThreads, 2)
    single_block_kernel(Op op, int32_t n, int64_t num_keys, int bits, int32_t D, KeyT* keys, int32_t* perm,
                        int32_t* seg_first, int32_t* tile_start, int32_t* slot_first, int32_t* slot_pos,
                        int32_t* num_slots, int32_t max_slots, int levels, acc_t* scratch) {
  if (gated_off(gate_of(op))) return;
  constexpr int kThreads = static_cast<int>(plan::kSingleBlockThreads);
  constexpr int kItems = static_cast<int>(plan::kSingleBlockItems);
  using Sort = CUB_NS_QUALIFIER::BlockRadixSort<KeyT, kThreads, kItems, int32_t>;
  __shared__ typename Sort::TempStorage temp;
  const int t = static_cast<int>(threadIdx.x);
  if (t == 0 && num_slots != nullptr) *num_slots = 0;
  // Past n: the largest key the sorted bits hold, and positions past n, so they sort after every contribution.
  const KeyT pad = bits >= static_cast<int>(8 * sizeof(KeyT)) ? ~KeyT{0} : static_cast<KeyT>((KeyT{1} << bits) - 1);
  KeyT k[kItems];
  int32_t v[kItems];
  for (int j = 0; j < kItems; ++j) {
    const int32_t i = t * kItems + j;
    v[j] = i;
    k[j] = pad;
    if (i < n) {
      const int64_t key = op.key(i);
      if (key == kSkipKey) {
        k[j] = static_cast<KeyT>(num_keys);
      } else {
        const bool ok = key >= 0 && key < num_keys;
        CUDA_KERNEL_ASSERT(ok && "detops: index out of range (set DETOPS_STRICT=1 for a host-side error)");
        k[j] = static_cast<KeyT>(ok ? key : num_keys);
      }
    }
  }
  Sort(temp).Sort(k, v, 0, bits);
  for (int j = 0; j < kItems; ++j) {
    const int32_t p = t * kItems + j;
    if (p < n) {
      keys[p] = k[j];
      perm[p] = v[j];
    }
  }
  __syncthreads();
  if (num_slots != nullptr) {
    for (int j = 0; j < kItems; ++j) {
      const int32_t p = t * kItems + j;
      if (p >= n) break;
      engine::tile_step(keys, p, tile_start);
      const int32_t slots = engine::long_segment_slots(keys, n, num_keys, p);
      if (slots > 0) seg_first[p] = atomicAdd(num_slots, slots);
    }
    __syncthreads();
  }
  for (int32_t w = t; w < n * D; w += kThreads) {
    const int32_t p = w / D;
    engine::level0_step<acc_t>(op, keys, perm, seg_first, tile_start, n, num_keys, D, scratch, slot_first, slot_pos,
                               p, w - p * D);
  }
  int32_t stride = 1;
  for (int level = 1; level <= levels; ++level, stride *= kBlock) {
    __syncthreads();
    const int32_t total = *num_slots;
    for (int32_t w = t; w < max_slots * D; w += kThreads) {
      const int32_t q = w / D;
      engine::level_step<acc_t>(op, keys, slot_first, slot_pos, total, stride, D, scratch, q, w - q * D);
    }
  }
}

// The buckets' arrays (plan::buckets): Layout::bucket_counts and bucket_cursor, and the slots in the multi-block
// path's second key and value buffers (which that path uses only where the buckets do nothing).
template <typename acc_t>
struct BucketArgs {
  int32_t n;
  int64_t num_keys;
  int32_t D;
  int32_t* counts;     // [num_keys + 2]: each key's count, then the flag, then the slots taken
  int32_t* cursor;     // [num_keys]: each key's next slot
  int32_t* positions;  // [n]: each slot's source position
  acc_t* values;       // [n][D]: each slot's columns where the call carries them (plan::carries_values), else null
};

constexpr int kBucketThreads = 256;
constexpr int kBucketSteps = 5;
constexpr int kBucketChunkKeys = 4;  // keys per thread in step 2's chunks
constexpr int kBucketItems = 4;      // contributions per thread and round in steps 1 and 3, the grid's stride apart

// The buckets' steps first_step .. end_step - 1 (cuda/sort_reduce_steps.h, "The buckets"): 0 zeroes the counts, the
// flag and the counter; 1 counts, kBucketItems contributions per thread at a time (their keys first, then their atomic
// adds: the loads in flight together); 2 gives each chunk of kBucketThreads x kBucketChunkKeys keys its runs (a block
// scan of their counts, the chunk's total taken from the counter) and raises the flag over a count above
// plan::kBucketMaxCount; 3 stores each contribution in a slot of its key, kBucketItems at a time (keys, then slots,
// then the stores); 4 folds each key's run, engine::bucket_lanes(D) threads per key. Grid-stride, a grid-wide barrier
// between steps: with all of them in one cooperative launch the grid is all resident; a plain launch per step runs it
// too. Steps 3 and 4 read the flag after the barrier that follows step 2, so every block returns there, or none. NB:
// which slot a contribution takes, and where a key's run lies, depend on timing; bucket_fold takes a run in source
// order, so the bits do not.
// NB: launch bounds of 4 blocks per SM cap it at 64 registers (64-78 without: 3 blocks, fewer loads in flight).
template <typename acc_t, typename Op>
__global__ void __launch_bounds__(kBucketThreads, 4) buckets_kernel(Op op, BucketArgs<acc_t> a, int first_step,
                                                                    int end_step) {
  using Scan = CUB_NS_QUALIFIER::BlockScan<int32_t, kBucketThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ int32_t run_base;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t t0 = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  int32_t* flag = a.counts + a.num_keys;
  int32_t* taken = flag + 1;
  for (int step = first_step; step < end_step; ++step) {
    if (step > first_step) cooperative_groups::this_grid().sync();
    if (step == 0) {
      for (int64_t k = t0; k < a.num_keys + 2; k += stride) a.counts[k] = 0;
    } else if (step == 1) {
      for (int64_t first = t0; first < a.n; first += stride * kBucketItems) {
        int64_t key[kBucketItems];
#pragma unroll
        for (int j = 0; j < kBucketItems; ++j) {
          const int64_t i = first + j * stride;
          key[j] = i < a.n ? op.key(i) : kSkipKey;
        }
#pragma unroll
        for (int j = 0; j < kBucketItems; ++j) {
          CUDA_KERNEL_ASSERT((key[j] == kSkipKey || (key[j] >= 0 && key[j] < a.num_keys)) &&
                             "detops: index out of range (set DETOPS_STRICT=1 for a host-side error)");
          const int64_t k = engine::bucket_key(key[j], a.num_keys);
          if (k >= 0) atomicAdd(a.counts + k, 1);
        }
      }
    } else if (step == 2) {
      constexpr int64_t kChunk = int64_t{kBucketThreads} * kBucketChunkKeys;
      for (int64_t base = int64_t{blockIdx.x} * kChunk; base < a.num_keys; base += int64_t{gridDim.x} * kChunk) {
        const int64_t first = base + int64_t{threadIdx.x} * kBucketChunkKeys;
        int32_t c[kBucketChunkKeys];
        int32_t sum = 0;
        bool over = false;
#pragma unroll
        for (int j = 0; j < kBucketChunkKeys; ++j) {
          c[j] = first + j < a.num_keys ? __ldcg(a.counts + first + j) : 0;
          sum += c[j];
          over = over || c[j] > plan::kBucketMaxCount;
        }
        if (over) atomicExch(flag, 1);
        int32_t before = 0;
        int32_t chunk_total = 0;
        Scan(scan).ExclusiveSum(sum, before, chunk_total);
        if (threadIdx.x == 0) run_base = atomicAdd(taken, chunk_total);
        __syncthreads();
        int32_t at = run_base + before;
#pragma unroll
        for (int j = 0; j < kBucketChunkKeys; ++j) {
          if (first + j < a.num_keys) a.cursor[first + j] = at;
          at += c[j];
        }
        __syncthreads();  // run_base and the scan's storage serve the next chunk
      }
    } else {
      if (__ldcg(flag) != 0) return;
      if (step == 3) {
        for (int64_t first = t0; first < a.n; first += stride * kBucketItems) {
          int64_t k[kBucketItems];
#pragma unroll
          for (int j = 0; j < kBucketItems; ++j) {
            const int64_t i = first + j * stride;
            k[j] = i < a.n ? engine::bucket_key(op.key(i), a.num_keys) : -1;
          }
          int32_t slot[kBucketItems];
#pragma unroll
          for (int j = 0; j < kBucketItems; ++j) slot[j] = k[j] >= 0 ? atomicAdd(a.cursor + k[j], 1) : 0;
#pragma unroll
          for (int j = 0; j < kBucketItems; ++j) {
            if (k[j] >= 0) engine::bucket_store<acc_t>(op, first + j * stride, slot[j], a.D, a.positions, a.values);
          }
        }
      } else {
        const int32_t lanes = engine::bucket_lanes(a.D);
        for (int64_t t = t0; t < a.num_keys * lanes; t += stride) {
          const int64_t k = t / lanes;
          // NB: both loaded before the test, so they wait together.
          const int32_t count = __ldcg(a.counts + k);
          const int32_t end = __ldcg(a.cursor + k);
          if (count == 0) continue;
          const int32_t first = end - count;
          for (int64_t c = t % lanes; c < a.D; c += lanes) {
            engine::bucket_fold<acc_t>(op, k, count, first, a.positions, a.values, a.D, c);
          }
        }
      }
    }
  }
}

// Runs the buckets on the stream: one cooperative launch of every step, its grid the blocks the larger of the
// contributions and the keys need, at most those resident at once (queried once per device); one launch per step
// where the device has no cooperative launch (or the stream is capturing, or DETOPS_COOPERATIVE=0:
// cooperative_launch) or fewer blocks fit.
template <typename acc_t, typename Op>
void run_buckets(const Op& op, const BucketArgs<acc_t>& args, cudaStream_t stream) {
  const auto kernel = buckets_kernel<acc_t, Op>;
  static std::atomic<int64_t> resident[C10_COMPILE_TIME_MAX_GPUS] = {};
  const int64_t blocks = resident_blocks(reinterpret_cast<const void*>(kernel), kBucketThreads, resident);
  const int64_t work = std::max({int64_t{args.n}, args.num_keys + 2, args.num_keys * engine::bucket_lanes(args.D)});
  const auto grid = static_cast<unsigned>(std::min<int64_t>((work + kBucketThreads - 1) / kBucketThreads, blocks));
  Op o = op;
  BucketArgs<acc_t> a = args;
  int first = 0;
  int end = kBucketSteps;
  void* params[] = {&o, &a, &first, &end};
  if (launch_cooperative(reinterpret_cast<const void*>(kernel), dim3(grid), dim3(kBucketThreads), params, stream)) {
    return;
  }
  for (int step = 0; step < kBucketSteps; ++step) {
    kernel<<<grid, kBucketThreads, 0, stream>>>(op, args, step, step + 1);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

// An op gated on a device word it does not carry (gate_of): the multi-block path after the buckets, which runs only
// where their flag is up. Its own gate member, if it has one (null on an ungated call: plan::buckets), is hidden.
template <typename Op>
struct FlagGated : Op {
  const int32_t* gate;
};

// One plan of at most kMaxContributions contributions. An ordinary call (kChunk = false) picks its path and
// kernels by size; a key chunk of a larger call (kChunk = true, cuda/chunked.cuh) always runs the multi-block
// path with 64-bit keys and the one-thread-per-(position or slot, column) kernels, so that each op compiles 3
// kernels for the chunks instead of 12. NB: paths and kernels differ in schedule only; the tree and the bits
// are the same (docs/order_contract.md).
template <typename acc_t, bool kChunk, typename Op>
void sort_reduce_plan(const char* name, const Op& op, int64_t n, int64_t num_keys, int64_t D,
                      const at::TensorOptions& device_options) {
  TORCH_CHECK(n <= kMaxContributions, name, "(): detops' sort-reduce engine takes at most 2^31-1 contributions "
              "per plan on CUDA, got ", n);
  TORCH_CHECK(D <= kMaxContributions, name, "(): detops' sort-reduce engine takes at most 2^31-1 columns per "
              "call on CUDA, got ", D);
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const plan::EngineCall call{plan::Kind::kSortReduce, n, num_keys, D, sizeof(acc_t),
                              kChunk ? int64_t{8} : plan::key_bytes_for(num_keys), gate_of(op) != nullptr ? 1 : 0};
  const int bits = plan::sort_bits_for(num_keys, call.key_bytes);
  const bool single = !kChunk && plan::single_block(call);
  // NB: a key chunk never carries its contributions (64-bit keys).
  const bool carry = !kChunk && plan::carries_values(call);
  TORCH_INTERNAL_ASSERT(!carry || D <= engine::kMaxCarriedColumns, name, "(): a carried contribution of ", D,
                        " columns");
  const int64_t value_bytes = plan::sort_value_bytes(call);
  // NB: a gated call runs only kernels of ours, each of which reads the gate: the single block or the counting sort.
  const int32_t* gate = gate_of(op);
  TORCH_INTERNAL_ASSERT(gate == nullptr || single || plan::counting_sort(call), name,
                        "(): a gated engine call must not take CUB's sort");
  const plan::Layout layout =
      plan::layout_for(call, single                      ? 0
                             : plan::counting_sort(call) ? plan::kCountingTempBytes
                                                         : cub_temp_bytes(n, call.key_bytes, bits, value_bytes));
  // The call's one allocation: keys, their values (positions or contributions), the long segments' first slots,
  // the tiles' segment starts, slot tables, scratch, the counting sort's table and the sort's temp storage.
  at::Tensor workspace = empty_scratch({layout.total}, device_options.dtype(at::kByte));
  char* ws = static_cast<char*>(workspace.data_ptr());
  if constexpr (!kChunk) {
    if (single) {
      const bool levels = layout.levels > 0;
      auto* slot_first = levels ? reinterpret_cast<int32_t*>(ws + layout.slot_first) : nullptr;
      auto* slot_pos = levels ? reinterpret_cast<int32_t*>(ws + layout.slot_pos) : nullptr;
      auto* num_slots = levels ? reinterpret_cast<int32_t*>(ws + layout.num_slots) : nullptr;
      auto* scratch = levels ? reinterpret_cast<acc_t*>(ws + layout.scratch) : nullptr;
      auto* perm = reinterpret_cast<int32_t*>(ws + layout.pos[0]);
      auto* seg_first = levels ? reinterpret_cast<int32_t*>(ws + layout.seg_first) : nullptr;
      auto* tile_start = levels ? reinterpret_cast<int32_t*>(ws + layout.tile_start) : nullptr;
      const auto launch = [&](auto* keys) {
        using KeyT = std::remove_pointer_t<decltype(keys)>;
        single_block_kernel<acc_t, KeyT, Op><<<1, static_cast<unsigned>(plan::kSingleBlockThreads), 0, stream>>>(
            op, static_cast<int32_t>(n), num_keys, bits, static_cast<int32_t>(D), keys, perm, seg_first, tile_start,
            slot_first, slot_pos, num_slots, static_cast<int32_t>(layout.max_slots), layout.levels, scratch);
      };
      if (call.key_bytes == 8) {
        launch(reinterpret_cast<uint64_t*>(ws + layout.keys[0]));
      } else {
        launch(reinterpret_cast<uint32_t*>(ws + layout.keys[0]));
      }
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      return;
    }
  }
  const int blocks = static_cast<int>((n + 256 * kKeyItems - 1) / (256 * kKeyItems));
  auto* positions = reinterpret_cast<int32_t*>(ws + layout.pos[0]);
  // The multi-block path of `the_op` (op, or op gated on the buckets' flag): keys, the sort and the reduction over
  // the sorted plan.
  const auto multi = [&](auto* keys, const auto& the_op) {
    using KeyT = std::remove_pointer_t<decltype(keys)>;
    using OpT = std::decay_t<decltype(the_op)>;
    make_keys_kernel<acc_t, KeyT, OpT><<<blocks, 256, 0, stream>>>(
        the_op, static_cast<int32_t>(n), num_keys, static_cast<int32_t>(D), keys, positions,
        carry ? reinterpret_cast<acc_t*>(ws + layout.pos[0]) : nullptr,
        layout.levels > 0 ? reinterpret_cast<int32_t*>(ws + layout.num_slots) : nullptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const SortedSegments sorted =
        plan_segments(ws, layout, static_cast<int32_t>(n), num_keys, call.key_bytes, value_bytes, gate_of(the_op));
    if constexpr (!kChunk && std::is_same_v<KeyT, uint32_t>) {
      if (carry) {
        const engine::SortedValues<acc_t> src{static_cast<const acc_t*>(sorted.values)};
        reduce_plan<acc_t, KeyT, false>(the_op, ws, layout, sorted, src, static_cast<int32_t>(n), num_keys,
                                        static_cast<int32_t>(D));
        return;
      }
    }
    reduce_plan<acc_t, KeyT, !kChunk>(the_op, ws, layout, sorted, static_cast<const int32_t*>(sorted.values),
                                      static_cast<int32_t>(n), num_keys, static_cast<int32_t>(D));
  };
  if constexpr (kChunk) {
    multi(reinterpret_cast<uint64_t*>(ws + layout.keys[0]), op);
  } else if (call.key_bytes == 8) {
    multi(reinterpret_cast<uint64_t*>(ws + layout.keys[0]), op);
  } else if (plan::buckets(call)) {
    // The buckets first; the multi-block path after them, gated on their flag (a key of more than
    // plan::kBucketMaxCount contributions), which their last two steps read.
    auto* counts = reinterpret_cast<int32_t*>(ws + layout.bucket_counts);
    const BucketArgs<acc_t> args{static_cast<int32_t>(n),
                                 num_keys,
                                 static_cast<int32_t>(D),
                                 counts,
                                 reinterpret_cast<int32_t*>(ws + layout.bucket_cursor),
                                 reinterpret_cast<int32_t*>(ws + layout.keys[1]),
                                 carry ? reinterpret_cast<acc_t*>(ws + layout.pos[1]) : nullptr};
    run_buckets<acc_t>(op, args, stream);
    multi(reinterpret_cast<uint32_t*>(ws + layout.keys[0]), FlagGated<Op>{op, counts + num_keys});
  } else {
    multi(reinterpret_cast<uint32_t*>(ws + layout.keys[0]), op);
  }
}

template <typename acc_t, typename Op>
void sort_reduce(const char* name, const Op& op, int64_t n, int64_t num_keys, int64_t D,
                 const at::TensorOptions& device_options) {
  if (n == 0 || D == 0) return;
  // NB: larger calls run in key chunks that keep the contract (never gated: their compaction is CUB's).
  TORCH_INTERNAL_ASSERT(gate_of(op) == nullptr || n <= kMaxContributions, name, "(): a gated call of ", n,
                        " contributions");
  if (n > kMaxContributions) return sort_reduce_in_chunks<acc_t>(name, op, n, num_keys, D, device_options);
  sort_reduce_plan<acc_t, false>(name, op, n, num_keys, D, device_options);
}

// One thread per element, grid-stride: op(i) computes element i whole. NB: each element's value comes from
// one thread with the contract's tree, so the bits do not depend on the launch shape.
template <typename Op>
__global__ void for_each_kernel(Op op, int64_t n) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    op(i);
  }
}

// count_kernel's values: an array's (values outside [0, bins) are counted nowhere).
template <typename index_t>
struct ArrayValues {
  const index_t* values;
  __device__ int64_t operator()(int64_t i) const {
    return static_cast<int64_t>(values[i]);
  }
};

// count_kernel's values: the keys of a sort-reduce call's op, each key's contributions counted (kSkipKey,
// negative, counted nowhere).
template <typename Keys>
struct KeyValues {
  Keys keys;
  int64_t num_keys;
  __device__ int64_t operator()(int64_t i) const {
    const int64_t k = keys.key(i);
    const bool ok = k == kSkipKey || (k >= 0 && k < num_keys);
    CUDA_KERNEL_ASSERT(ok && "detops: index out of range (set DETOPS_STRICT=1 for a host-side error)");
    return ok ? k : kSkipKey;
  }
};

// One thread per value, grid-stride, into a histogram of the block in shared memory when kShared (32-bit
// counts, flushed with one atomicAdd per nonzero bin), else straight into counts. A warp whose lanes all name
// one bin adds once (hot bins would otherwise serialise 32 atomics on one address). NB: integer additions
// are exact in any order, so the counts do not depend on the launch shape or the schedule; the host sizes
// the grid so that no block counts 2^32 values.
template <bool kShared, typename Values>
__global__ void count_kernel(Values values, int64_t n, int64_t bins, unsigned long long* counts) {
  extern __shared__ unsigned int block_counts[];
  if constexpr (kShared) {
    for (int64_t b = threadIdx.x; b < bins; b += blockDim.x) block_counts[b] = 0;
    __syncthreads();
  }
  // The trip count depends on blockIdx only: every lane of a warp reaches the vote together.
  for (int64_t base = int64_t{blockIdx.x} * blockDim.x; base < n; base += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = base + threadIdx.x;
    const int64_t v = i < n ? values(i) : -1;
    const bool in_range = v >= 0 && v < bins;
    const int64_t first = __shfl_sync(0xffffffffu, v, 0);
    const unsigned same = __ballot_sync(0xffffffffu, in_range && v == first);
    if (same == 0xffffffffu) {
      if (threadIdx.x % 32 == 0) {
        if constexpr (kShared) {
          atomicAdd(&block_counts[v], 32u);
        } else {
          atomicAdd(&counts[v], 32ull);
        }
      }
    } else if (in_range) {
      if constexpr (kShared) {
        atomicAdd(&block_counts[v], 1u);
      } else {
        atomicAdd(&counts[v], 1ull);
      }
    }
  }
  if constexpr (kShared) {
    __syncthreads();
    for (int64_t b = threadIdx.x; b < bins; b += blockDim.x) {
      if (block_counts[b] != 0) atomicAdd(&counts[b], static_cast<unsigned long long>(block_counts[b]));
    }
  }
}

// The last writer's winners: one thread per contribution, grid-stride, the last positions first (thread t
// takes position n - 1 - t), raises its key's winner to its position (engine::last_writer_key). A warp whose
// 32 contributions name one key raises it once, from lane 0 (the largest position). With kShared (few keys,
// many contributions each), into a table of the block in shared memory first, whose winners are then raised
// in `winner` with one atomic per key the block saw; else straight into `winner`. With `filter` (many
// contributions per key), a raise of `winner` first reads the key's winner and skips the atomic where a larger
// position is there already: the early, larger positions settle most keys, and the later blocks mostly read.
// NB: an integer maximum, exact in any order, and a winner only grows, so a value read, however stale, never
// skips the largest position: each key's winner is its largest contributing position whatever the launch
// shape or the schedule (ops/last_writer_op.h).
template <bool kShared, typename Op>
__global__ void last_writer_winner_kernel(Op op, int32_t n, int64_t num_keys, int* winner, bool filter) {
  extern __shared__ int block_winner[];
  if constexpr (kShared) {
    for (int64_t b = threadIdx.x; b < num_keys; b += blockDim.x) block_winner[b] = -1;
    __syncthreads();
  }
  int* const table = kShared ? block_winner : winner;
  // The trip count depends on blockIdx only: every lane of a warp reaches the vote together.
  for (int64_t base = int64_t{blockIdx.x} * blockDim.x; base < n; base += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = base + threadIdx.x;
    const int64_t i = n - 1 - t;
    int64_t k = kSkipKey;
    if (t < n) {
      const int64_t key = op.key(i);
      k = engine::last_writer_key(key, num_keys);
      CUDA_KERNEL_ASSERT((key == kSkipKey || k != kSkipKey) &&
                         "detops: index out of range (set DETOPS_STRICT=1 for a host-side error)");
    }
    const int64_t first = __shfl_sync(0xffffffffu, k, 0);
    const bool raise = k != kSkipKey && (kShared || !filter || __ldcg(&winner[k]) < i);
    if (__all_sync(0xffffffffu, k == first)) {
      if (threadIdx.x % 32 == 0 && raise) atomicMax(&table[k], static_cast<int>(i));
    } else if (raise) {
      atomicMax(&table[k], static_cast<int>(i));
    }
  }
  if constexpr (kShared) {
    __syncthreads();
    for (int64_t b = threadIdx.x; b < num_keys; b += blockDim.x) {
      const int v = block_winner[b];
      if (v >= 0 && (!filter || __ldcg(&winner[b]) < v)) atomicMax(&winner[b], v);
    }
  }
}

// The CUDA engine: what the op computations (ops/*_op.h, `*_compute<Engine>`) call, on the current device
// and stream; cpu::Engine (ops/sort_reduce_cpu.h) has the same members with the same results.
struct Engine {
  static constexpr int kThreads = 256;

  // From this many contributions per key on, the winner kernel reads a key's winner before raising it.
  static constexpr int64_t kLastWriterFilterPerKey = 4;

  static unsigned grid_for(int64_t n) {
    return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t{1} << 20));
  }

  template <typename acc_t, typename Op>
  static void sort_reduce(const char* name, const Op& op, int64_t n, int64_t num_keys, int64_t D,
                          const at::Tensor& like) {
    plan::record(plan::sort_reduce_call(n, num_keys, D, sizeof(acc_t), gate_of(op) != nullptr));
    cuda::sort_reduce<acc_t>(name, op, n, num_keys, D, like.options());
  }

  // An op folded with Last over source positions (the last writer): where plan::last_writer_table, a winner
  // table (one int32 position per key, filled with -1), the winner kernel and a copy over the keys or the
  // contributions (plan::last_writer_over_keys); otherwise the sort-reduce engine. Both give every key its
  // last contribution in source order.
  template <typename Op>
  static void last_writer(const char* name, const Op& op, int64_t n, int64_t num_keys, int64_t D,
                          const at::Tensor& like) {
    static_assert(std::is_same_v<combine_of_t<Op>, Last>, "last_writer takes ops folded with Last");
    if (!plan::last_writer_table(n, num_keys, D)) return sort_reduce<int64_t>(name, op, n, num_keys, D, like);
    plan::record(plan::last_writer_kernels(n, num_keys));
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    at::Tensor winner = empty_scratch({num_keys}, like.options().dtype(at::kInt));
    C10_CUDA_CHECK(cudaMemsetAsync(winner.data_ptr(), 0xff, static_cast<size_t>(num_keys) * sizeof(int), stream));
    const bool filter = n >= kLastWriterFilterPerKey * num_keys;
    if (filter && num_keys <= kSharedCountBins) {
      // NB: the block tables take a few blocks per multiprocessor; any grid gives the same winners.
      const auto grid = static_cast<unsigned>(std::min<int64_t>(
          grid_for(n), int64_t{at::cuda::getCurrentDeviceProperties()->multiProcessorCount} * kCountBlocksPerSM));
      last_writer_winner_kernel<true><<<grid, kThreads, num_keys * sizeof(int), stream>>>(
          op, static_cast<int32_t>(n), num_keys, winner.data_ptr<int>(), filter);
    } else {
      last_writer_winner_kernel<false><<<grid_for(n), kThreads, 0, stream>>>(op, static_cast<int32_t>(n), num_keys,
                                                                             winner.data_ptr<int>(), filter);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const int* table = winner.const_data_ptr<int>();
    const bool over_keys = plan::last_writer_over_keys(n, num_keys);
    const int64_t pairs = (over_keys ? num_keys : n) * D;
    const int64_t calls = (pairs + plan::kLastWriterPairs - 1) / plan::kLastWriterPairs;
    const auto copy = [&](auto index) {
      using index_t = decltype(index);
      const auto d = static_cast<index_t>(D);
      const auto total = static_cast<index_t>(pairs);
      if (over_keys) {
        for_each(engine::LastWriterGatherOp<Op, index_t>{op, table, Divider<index_t>(d), d, total}, calls);
      } else {
        for_each(engine::LastWriterScatterOp<Op, index_t>{op, table, num_keys, Divider<index_t>(d), d, total}, calls);
      }
    };
    // NB: a call's pairs reach pairs + kLastWriterPairs - 1, which 32-bit indices must hold.
    if (pairs <= INT32_MAX - plan::kLastWriterPairs) {
      copy(int32_t{});
    } else {
      copy(int64_t{});
    }
  }

  template <typename Op>
  static void for_each(const Op& op, int64_t n) {
    plan::record({plan::Kind::kForEach, n, 0, 1, 0, 0});
    if (n == 0) return;
    for_each_kernel<<<grid_for(n), kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(op, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  // Bins counted in shared memory first (4 bytes each: 32 KB), a few blocks per multiprocessor, and enough
  // blocks that none counts 2^32 values (its 32-bit shared counts cannot wrap). The last writer's winner
  // tables in shared memory take the same sizes.
  static constexpr int64_t kSharedCountBins = 8192;
  static constexpr int kCountBlocksPerSM = 4;

  // counts: int64 device memory, zero-filled by the caller.
  template <typename index_t>
  static void count(const index_t* values, int64_t n, int64_t bins, int64_t* counts) {
    plan::record({plan::Kind::kCount, n, bins, 1, 0, sizeof(index_t)});
    launch_count(ArrayValues<index_t>{values}, n, bins, counts);
  }

  // counts[k] += the number of contributions of key k among keys.key(0 .. n-1) (a sort-reduce op or a layout;
  // kSkipKey counted nowhere); counts: int64 device memory, zero-filled by the caller. One launch, where
  // counting through sort_reduce (a contribution of 1 per key) takes a whole sort-reduce call.
  template <typename Keys>
  static void count_keys(const Keys& keys, int64_t n, int64_t num_keys, int64_t* counts) {
    plan::record({plan::Kind::kCount, n, num_keys, 1, 0, sizeof(int64_t)});
    launch_count(KeyValues<Keys>{keys, num_keys}, n, num_keys, counts);
  }

 private:
  template <typename Values>
  static void launch_count(const Values& values, int64_t n, int64_t bins, int64_t* counts) {
    if (n == 0) return;
    static_assert(sizeof(unsigned long long) == sizeof(int64_t));
    auto* out = reinterpret_cast<unsigned long long*>(counts);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    if (bins <= kSharedCountBins) {
      const int64_t blocks = std::max<int64_t>(
          int64_t{at::cuda::getCurrentDeviceProperties()->multiProcessorCount} * kCountBlocksPerSM, (n >> 31) + 1);
      const auto grid = static_cast<unsigned>(std::min<int64_t>(grid_for(n), blocks));
      count_kernel<true><<<grid, kThreads, bins * sizeof(unsigned int), stream>>>(values, n, bins, out);
    } else {
      count_kernel<false><<<grid_for(n), kThreads, 0, stream>>>(values, n, bins, out);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
};

}  // namespace detops::cuda
