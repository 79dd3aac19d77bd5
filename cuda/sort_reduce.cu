// The plan of the sort-reduce engine: stable radix sort of (key, source position), segment starts, and
// compact scratch slots for the blocks of long segments (docs/order_contract.md).
#include "cuda/sort_reduce.h"
#include "cuda/sort_reduce_steps.h"
#include "ops/contract.h"

#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cuda/functional>

namespace detops::cuda {
namespace {

namespace cub = CUB_NS_QUALIFIER;  // detops' own CUB namespace (CUB_WRAPPED_NAMESPACE), not torch's

constexpr int kThreads = 256;

inline int blocks_for(int64_t n) {
  return static_cast<int>((n + kThreads - 1) / kThreads);
}

at::Tensor cub_temp(size_t bytes, const at::Tensor& like) {
  // NB: never zero bytes: a null temp pointer would turn the second CUB call into a size query.
  return at::empty({static_cast<int64_t>(bytes > 0 ? bytes : 1)}, like.options().dtype(at::kByte));
}

// One thread per position.
__global__ void iota_kernel(int32_t* out, int32_t n) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<int32_t>(i);
}

// One thread per sorted position: its head value (engine::head_value), max-scanned next.
template <typename KeyT>
__global__ void head_kernel(const KeyT* keys, int32_t n, int32_t* head) {
  const int64_t p = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (p < n) head[p] = engine::head_value(keys, static_cast<int32_t>(p));
}

// One thread per sorted position: 1 if it leads a block of a long segment (engine::long_leader).
template <typename KeyT>
__global__ void long_leader_kernel(const KeyT* keys, const int32_t* segstart, int32_t n, int64_t num_keys,
                                   int32_t* lead) {
  const int64_t p = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (p < n) lead[p] = engine::long_leader(keys, segstart, n, num_keys, static_cast<int32_t>(p));
}

// One thread per sorted position: slots of long-segment leaders and the slot count (engine::fill_slot).
__global__ void fill_slots_kernel(const int32_t* segstart, const int32_t* lead, const int32_t* slot,
                                  int32_t n, int32_t* slot_first, int32_t* slot_pos, int32_t* num_slots) {
  const int64_t p = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (p < n) engine::fill_slot(segstart, lead, slot, n, static_cast<int32_t>(p), slot_first, slot_pos, num_slots);
}

template <typename KeyT>
SegmentPlan plan_typed(const at::Tensor& keys_in, int64_t num_keys) {
  const auto stream = c10::cuda::getCurrentCUDAStream();
  SegmentPlan plan;
  const int32_t n = static_cast<int32_t>(keys_in.numel());
  plan.n = n;
  plan.wide_keys = sizeof(KeyT) == 8;
  const auto int_opts = keys_in.options().dtype(at::kInt);

  at::Tensor positions = at::empty({n}, int_opts);
  iota_kernel<<<blocks_for(n), kThreads, 0, stream>>>(positions.data_ptr<int32_t>(), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  // NB: radix sort is stable, so equal keys keep source order. Sort only the bits num_keys needs.
  int end_bit = 1;
  while (end_bit < static_cast<int>(8 * sizeof(KeyT)) && (static_cast<uint64_t>(num_keys) >> end_bit) != 0) ++end_bit;
  plan.keys = at::empty({n}, keys_in.options());
  plan.perm = at::empty({n}, int_opts);
  const KeyT* kin = reinterpret_cast<const KeyT*>(keys_in.data_ptr());
  KeyT* kout = reinterpret_cast<KeyT*>(plan.keys.data_ptr());
  size_t bytes = 0;
  C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, kin, kout, positions.data_ptr<int32_t>(),
                                                 plan.perm.data_ptr<int32_t>(), n, 0, end_bit, stream));
  at::Tensor temp = cub_temp(bytes, keys_in);
  C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data_ptr(), bytes, kin, kout, positions.data_ptr<int32_t>(),
                                                 plan.perm.data_ptr<int32_t>(), n, 0, end_bit, stream));

  // Segment start of every position: max-scan of head positions.
  at::Tensor head = positions;  // reuse: positions are no longer needed
  head_kernel<KeyT><<<blocks_for(n), kThreads, 0, stream>>>(kout, n, head.data_ptr<int32_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  plan.segstart = at::empty({n}, int_opts);
  bytes = 0;
  C10_CUDA_CHECK(cub::DeviceScan::InclusiveScan(nullptr, bytes, head.data_ptr<int32_t>(),
                                                plan.segstart.data_ptr<int32_t>(), ::cuda::maximum<>{}, n, stream));
  temp = cub_temp(bytes, keys_in);
  C10_CUDA_CHECK(cub::DeviceScan::InclusiveScan(temp.data_ptr(), bytes, head.data_ptr<int32_t>(),
                                                plan.segstart.data_ptr<int32_t>(), ::cuda::maximum<>{}, n, stream));

  // Compact scratch slots for the blocks of long segments; none can exist with at most one block.
  plan.levels = tree_levels(n);
  if (plan.levels == 0) return plan;
  at::Tensor lead = head;  // reuse again
  long_leader_kernel<KeyT><<<blocks_for(n), kThreads, 0, stream>>>(kout, plan.segstart.data_ptr<int32_t>(), n,
                                                                   num_keys, lead.data_ptr<int32_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  plan.slot = at::empty({n}, int_opts);
  bytes = 0;
  C10_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, bytes, lead.data_ptr<int32_t>(),
                                               plan.slot.data_ptr<int32_t>(), n, stream));
  temp = cub_temp(bytes, keys_in);
  C10_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp.data_ptr(), bytes, lead.data_ptr<int32_t>(),
                                               plan.slot.data_ptr<int32_t>(), n, stream));

  // A segment longer than kBlock has ceil(len / kBlock) < len / 16 blocks, so n / 16 + 1 slots suffice.
  plan.max_slots = n / 16 + 1;
  plan.slot_first = at::empty({plan.max_slots}, int_opts);
  plan.slot_pos = at::empty({plan.max_slots}, int_opts);
  plan.num_slots = at::empty({1}, int_opts);
  fill_slots_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
      plan.segstart.data_ptr<int32_t>(), lead.data_ptr<int32_t>(), plan.slot.data_ptr<int32_t>(), n,
      plan.slot_first.data_ptr<int32_t>(), plan.slot_pos.data_ptr<int32_t>(), plan.num_slots.data_ptr<int32_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return plan;
}

}  // namespace

SegmentPlan plan_segments(const at::Tensor& keys, int64_t num_keys) {
  TORCH_CHECK(keys.is_cuda() && keys.dim() == 1 && keys.is_contiguous(), "detops: bad key tensor for the plan");
  TORCH_CHECK(keys.numel() > 0 && keys.numel() <= kMaxContributions,
              "detops: the sort-reduce engine takes 1 to 2^31-1 contributions, got ", keys.numel());
  if (keys.scalar_type() == at::kInt) return plan_typed<uint32_t>(keys, num_keys);
  TORCH_CHECK(keys.scalar_type() == at::kLong, "detops: keys must be int32 or int64 storage");
  return plan_typed<uint64_t>(keys, num_keys);
}

}  // namespace detops::cuda
