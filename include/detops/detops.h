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

// The aten overloads detops overrides on the CPU, where stock's CPU kernel throws under the deterministic
// flag, e.g. "aten::max_unpool2d". Each is in covered_ops() too. The modes apply to them as to the CUDA ones.
std::vector<std::string> covered_cpu_ops();

// Library version, "MAJOR.MINOR.PATCH".
std::string version();

// One setting as detops::enable_determinism found it and left it.
template <typename T>
struct Setting {
  T before{};
  T after{};
  bool changed() const { return !(before == after); }
};

// What detops::enable_determinism found and set (python: detops.DeterminismRecord).
struct DeterminismRecord {
  uint64_t seed = 0;
  Setting<uint64_t> cpu_seed;                // the CPU generator's seed (at::manual_seed also seeds CUDA)
  Setting<bool> deterministic_algorithms;    // at::globalContext().deterministicAlgorithms()
  Setting<bool> warn_only;                   // deterministicAlgorithmsWarnOnly()
  Setting<bool> cudnn_deterministic;         // deterministicCuDNN()
  Setting<bool> cudnn_benchmark;             // benchmarkCuDNN()
  Setting<std::string> cublas_workspace_config;  // CUBLAS_WORKSPACE_CONFIG ("" = unset)
  Setting<int> num_threads;                  // at::get_num_threads(), the intra-op thread count
  bool num_threads_pinned = false;           // num_threads > 0 was given
  bool cuda_was_initialized = false;         // a CUDA primary context existed before the call
  std::vector<std::string> warnings;         // what it warned about (TORCH_WARN)
  // One line per setting: "set <name>: <before> -> <after>" or "kept <name> = <value>".
  std::string to_string() const;
};

// The LibTorch side of the reproducibility recipe (python: detops.enable_determinism): seeds the CPU and
// every CUDA generator with `seed`, turns on the deterministic-algorithms flag (warn_only as given), sets
// cuDNN deterministic on and benchmark off, and sets CUBLAS_WORKSPACE_CONFIG=:4096:8 if it is unset (warns
// if a CUDA context already exists then: cuBLAS may have set up its workspaces before). With
// num_threads > 0 it pins the intra-op thread count (at::set_num_threads): stock CPU kernels such as
// convolution and matmul can change bits with it (detops' own ops do not); -1 leaves it as it is, any
// other value is an error raised before anything is changed. Call it before the first CUDA operation. The
// overrides are on from the moment libdetops.so is loaded (mode "auto"). Returns what it found and set.
DeterminismRecord enable_determinism(uint64_t seed, bool warn_only = false, int num_threads = -1);

}  // namespace detops
