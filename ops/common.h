// Host-side helpers shared by the op front ends.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace detops {

// Dtypes the sort-reduce engine computes; other dtypes (integers: exact in stock already; bool,
// complex) go to the stock kernel of the tensor's device.
bool engine_dtype(at::ScalarType t);

void check_same_device(const char* op, const at::Tensor& self, const at::Tensor& other, const char* name);

// Raises, naming `op` and the first bad value in source order, if any index is outside [0, size).
// CPU tensors are always checked; CUDA tensors only in strict mode (a device-to-host copy), otherwise
// the kernel asserts on the device and never writes out of bounds.
void check_index_values(const char* op, const at::Tensor& index, int64_t size, int64_t dim);

// Read by the aten overrides: true when detops should compute this call (mode and flag).
bool use_detops_kernels();

}  // namespace detops
