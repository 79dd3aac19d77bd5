// The plan entry (ops/plan_record.h) of a gather that reads tables built on the host: the resampling
// backwards' CUDA path, recorded by it and by its CPU twin in its place.
#pragma once

#include "ops/plan_record.h"

#include <cstdint>

namespace detops::plan {

// The tables copied to the device (one allocation, one copy) and one gather launch over grad_in, which reads
// grad_out and the tables.
inline EngineCall table_gather_call(int64_t table_bytes, int64_t grad_in_bytes, int64_t grad_out_bytes) {
  return kernel_call(/*launches=*/1, /*copies=*/1, /*allocations=*/1, table_bytes,
                     grad_out_bytes + grad_in_bytes + table_bytes);
}

}  // namespace detops::plan
