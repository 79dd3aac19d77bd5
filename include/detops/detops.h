// detops public C++ API. Link libdetops.so into a LibTorch application: loading the library registers
// the deterministic CUDA kernels (see detops::covered_ops()) and the torch.ops.detops twins.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace detops {

// "auto" (default): detops kernels when torch's deterministic-algorithms flag is on, stock otherwise.
// "always": detops kernels regardless of the flag. "off": overrides deregistered, stock kernels only.
// The initial mode comes from the environment variable DETOPS_MODE, else "auto".
void set_mode(const std::string& mode);
std::string get_mode();

// Strict mode validates index values on the host before any CUDA kernel runs, so an out-of-range index
// raises a c10::Error and leaves the CUDA context usable (one device-to-host copy per call). Initial
// value from the environment variable DETOPS_STRICT ("1" enables).
void set_strict(bool strict);
bool get_strict();

// The aten overloads detops overrides on CUDA, e.g. "aten::index_add.out".
std::vector<std::string> covered_ops();

// Library version, "MAJOR.MINOR.PATCH".
std::string version();

// The LibTorch side of the reproducibility recipe (python: detops.enable_determinism): seeds the CPU and
// every CUDA generator with `seed`, turns on the deterministic-algorithms flag (warn_only as given), sets
// cuDNN deterministic on and benchmark off, and sets CUBLAS_WORKSPACE_CONFIG=:4096:8 if it is unset (warns
// if a CUDA context already exists then: cuBLAS may have set up its workspaces before). Call it before the
// first CUDA operation. The overrides are on from the moment libdetops.so is loaded (mode "auto").
void enable_determinism(uint64_t seed, bool warn_only = false);

}  // namespace detops
