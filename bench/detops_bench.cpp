// Google Benchmark suite: detops against the stock kernels.
//
// CUDA, per case: stock_atomic (flag off, detops mode "off"), stock_deterministic (flag on, mode "off": the
// stock deterministic fallback, an error entry where stock throws) and detops (flag on, mode "auto"). Manual
// time from CUDA events around each call, after warm-up; repetitions reported as their median; random data;
// inputs smaller than the L2 cache rotated through enough copies to overflow it twice. Without a CUDA
// device these are not registered (a line on stderr says so).
// CPU, per case (small shapes): stock_cpu (the aten op) against detops_cpu (the twin's function).
//
// Table-driven: a case is an entry of kOps times a shape of its family in kShapes; an op added later adds
// one entry (with its build and run functions), or several with a shape suffix each (one per reduction). Run names are <device>/<aten op>/<shape>/<variant>, the
// schema python -m detops report and bench/bench_ops.py share. Counter bytes_min: the fewest bytes the op
// must move, for the achieved bandwidth. Context detops_copy_bandwidth_GBps: a device-to-device copy.
//
//   detops_bench --benchmark_format=json --benchmark_out=bench.json [--benchmark_filter=^cpu/]
#include "detops/detops.h"
#include "ops/index_add.h"
#include "ops/index_copy.h"
#include "ops/index_put.h"
#include "ops/scatter.h"
#include "ops/scatter_add.h"
#include "ops/scatter_reduce.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <benchmark/benchmark.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/headeronly/version.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace {

enum class Family { IndexAdd, ScatterAdd };
enum class Overload { Functional, Inplace, Out };
enum class Variant { StockAtomic, StockDeterministic, Detops, StockCpu, DetopsCpu };

const char* variant_name(Variant v) {
  switch (v) {
    case Variant::StockAtomic:
      return "stock_atomic";
    case Variant::StockDeterministic:
      return "stock_deterministic";
    case Variant::Detops:
      return "detops";
    case Variant::StockCpu:
      return "stock_cpu";
    default:
      return "detops_cpu";
  }
}

// index_add: (rows of self M, indices N, row width D). scatter_add: (self rows, src rows, D); D == 0 is
// 1-D, D > 0 a [rows, D] scatter along dim 0 with the index of each src row expanded over D (GNN
// message passing). Same shapes as python_shim/detops/cases.py.
struct Shape {
  const char* name;
  Family family;
  int64_t full[3];
  int64_t small[3];
};

const Shape kShapes[] = {
    {"low_contention", Family::IndexAdd, {1 << 20, 1 << 20, 16}, {1 << 13, 1 << 13, 16}},
    {"high_contention", Family::IndexAdd, {1000, 1 << 20, 16}, {100, 1 << 13, 16}},
    {"hot_destination", Family::IndexAdd, {1, 1 << 20, 1}, {1, 1 << 15, 1}},
    {"wide_rows", Family::IndexAdd, {1 << 20, 100000, 256}, {1 << 12, 2000, 256}},
    {"low_contention", Family::ScatterAdd, {1 << 22, 1 << 22, 0}, {1 << 15, 1 << 15, 0}},
    {"high_contention", Family::ScatterAdd, {1000, 1 << 22, 0}, {100, 1 << 15, 0}},
    {"hot_destination", Family::ScatterAdd, {1, 1 << 20, 0}, {1, 1 << 15, 0}},
    {"message_passing", Family::ScatterAdd, {100000, 1 << 20, 64}, {2000, 1 << 13, 64}},
};

// One random argument set (never zeros: randn values, randint indices).
struct Args {
  at::Tensor self, index, src, out;
  int64_t bytes_min = 0;
  int64_t nbytes() const {
    int64_t total = 0;
    for (const at::Tensor* t : {&self, &index, &src, &out}) {
      if (t->defined()) total += static_cast<int64_t>(t->storage().nbytes());
    }
    return total;
  }
};

constexpr int64_t kElem = 4;  // float32

int64_t touched(const at::Tensor& index) {
  return std::get<0>(at::_unique(index.flatten())).numel();
}

Args build_index_add(const Shape& shape, const at::TensorOptions& opts, bool full, Overload overload) {
  const int64_t* dims = full ? shape.full : shape.small;
  const int64_t m = dims[0], n = dims[1], d = dims[2];
  Args a;
  a.self = at::randn({m, d}, opts);
  a.index = at::randint(m, {n}, opts.dtype(at::kLong));
  a.src = at::randn({n, d}, opts);
  if (overload == Overload::Out) a.out = at::empty_like(a.self);
  const int64_t rows = overload == Overload::Inplace ? touched(a.index) : m;
  a.bytes_min = n * d * kElem + n * 8 + 2 * rows * d * kElem;
  return a;
}

Args build_scatter_add(const Shape& shape, const at::TensorOptions& opts, bool full, Overload overload) {
  const int64_t* dims = full ? shape.full : shape.small;
  const int64_t rows = dims[0], n = dims[1], d = dims[2];
  Args a;
  if (d == 0) {
    a.self = at::randn({rows}, opts);
    a.index = at::randint(rows, {n}, opts.dtype(at::kLong));
    a.src = at::randn({n}, opts);
  } else {
    a.self = at::randn({rows, d}, opts);
    a.index = at::randint(rows, {n, 1}, opts.dtype(at::kLong)).expand({n, d});
    a.src = at::randn({n, d}, opts);
  }
  if (overload == Overload::Out) a.out = at::empty_like(a.self);
  const int64_t width = std::max<int64_t>(d, 1);
  const int64_t dests = overload == Overload::Inplace
                            ? (d == 0 ? touched(a.index) : touched(a.index.select(1, 0)) * width)
                            : a.self.numel();
  a.bytes_min = n * width * kElem + n * 8 + 2 * dests * kElem;
  return a;
}

// NB: `twin` calls detops' own function (the torch.ops.detops twin), the rest go through the dispatcher,
// where the mode and the deterministic flag pick the kernel.
void run_index_add(Args& a, Overload overload, bool twin) {
  switch (overload) {
    case Overload::Functional:
      benchmark::DoNotOptimize(twin ? detops::index_add(a.self, 0, a.index, a.src, 0.5)
                                    : at::index_add(a.self, 0, a.index, a.src, 0.5));
      break;
    case Overload::Inplace:
      twin ? detops::index_add_(a.self, 0, a.index, a.src, 0.5) : a.self.index_add_(0, a.index, a.src, 0.5);
      break;
    case Overload::Out:
      twin ? detops::index_add_out(a.self, 0, a.index, a.src, 0.5, a.out)
           : at::index_add_out(a.out, a.self, 0, a.index, a.src, 0.5);
      break;
  }
}

void run_scatter_add(Args& a, Overload overload, bool twin) {
  switch (overload) {
    case Overload::Functional:
      benchmark::DoNotOptimize(twin ? detops::scatter_add(a.self, 0, a.index, a.src)
                                    : at::scatter_add(a.self, 0, a.index, a.src));
      break;
    case Overload::Inplace:
      twin ? detops::scatter_add_(a.self, 0, a.index, a.src) : a.self.scatter_add_(0, a.index, a.src);
      break;
    case Overload::Out:
      twin ? detops::scatter_add_out(a.self, 0, a.index, a.src, a.out)
           : at::scatter_add_out(a.out, a.self, 0, a.index, a.src);
      break;
  }
}

// Products of a million values stay finite: src and self within 1e-3 of 1.
Args build_scatter_prod(const Shape& shape, const at::TensorOptions& opts, bool full, Overload overload) {
  Args a = build_scatter_add(shape, opts, full, overload);
  a.self = 1 + (at::rand_like(a.self) - 0.5) * 1e-3;
  a.src = 1 + (at::rand_like(a.src) - 0.5) * 1e-3;
  return a;
}

// The in-place overloads of the keyed family beyond index_add/scatter_add, on the same shapes.
void run_index_put(Args& a, Overload, bool twin) {
  const c10::List<std::optional<at::Tensor>> indices({std::optional<at::Tensor>(a.index)});
  twin ? detops::index_put_impl_(a.self, indices, a.src, true, false) : a.self.index_put_(indices, a.src, true);
}

void run_index_copy(Args& a, Overload, bool twin) {
  twin ? detops::index_copy_(a.self, 0, a.index, a.src) : a.self.index_copy_(0, a.index, a.src);
}

template <const char* Reduce>
void run_scatter_reduce(Args& a, Overload, bool twin) {
  twin ? detops::scatter_reduce_(a.self, 0, a.index, a.src, Reduce, true)
       : a.self.scatter_reduce_(0, a.index, a.src, Reduce, true);
}

void run_scatter_src(Args& a, Overload, bool twin) {
  twin ? detops::scatter_src_(a.self, 0, a.index, a.src) : a.self.scatter_(0, a.index, a.src);
}

template <const char* Reduce>
void run_scatter_with_reduce(Args& a, Overload, bool twin) {
  twin ? detops::scatter_src_reduce_(a.self, 0, a.index, a.src, Reduce) : a.self.scatter_(0, a.index, a.src, Reduce);
}

constexpr char kSum[] = "sum";
constexpr char kMean[] = "mean";
constexpr char kProd[] = "prod";
constexpr char kAdd[] = "add";
constexpr char kMultiply[] = "multiply";

// How to build and run the case of a covered op; which ops run comes from detops::covered_ops().
struct OpEntry {
  const char* op;  // as detops::covered_ops() spells it
  Family family;
  Overload overload;
  Args (*build)(const Shape&, const at::TensorOptions&, bool, Overload);
  void (*run)(Args&, Overload, bool);
  const char* shape_suffix = "";  // appended to the shape's name in the run name
};

const OpEntry kOps[] = {
    {"aten::index_add", Family::IndexAdd, Overload::Functional, build_index_add, run_index_add},
    {"aten::index_add_", Family::IndexAdd, Overload::Inplace, build_index_add, run_index_add},
    {"aten::index_add.out", Family::IndexAdd, Overload::Out, build_index_add, run_index_add},
    {"aten::scatter_add", Family::ScatterAdd, Overload::Functional, build_scatter_add, run_scatter_add},
    {"aten::scatter_add_", Family::ScatterAdd, Overload::Inplace, build_scatter_add, run_scatter_add},
    {"aten::scatter_add.out", Family::ScatterAdd, Overload::Out, build_scatter_add, run_scatter_add},
    {"aten::_index_put_impl_", Family::IndexAdd, Overload::Inplace, build_index_add, run_index_put, "_accumulate"},
    {"aten::index_copy_", Family::IndexAdd, Overload::Inplace, build_index_add, run_index_copy},
    {"aten::scatter_reduce_.two", Family::ScatterAdd, Overload::Inplace, build_scatter_add,
     run_scatter_reduce<kSum>, "_sum"},
    {"aten::scatter_reduce_.two", Family::ScatterAdd, Overload::Inplace, build_scatter_add,
     run_scatter_reduce<kMean>, "_mean"},
    {"aten::scatter_reduce_.two", Family::ScatterAdd, Overload::Inplace, build_scatter_prod,
     run_scatter_reduce<kProd>, "_prod"},
    {"aten::scatter_.src", Family::ScatterAdd, Overload::Inplace, build_scatter_add, run_scatter_src},
    {"aten::scatter_.reduce", Family::ScatterAdd, Overload::Inplace, build_scatter_add,
     run_scatter_with_reduce<kAdd>, "_add"},
    {"aten::scatter_.reduce", Family::ScatterAdd, Overload::Inplace, build_scatter_prod,
     run_scatter_with_reduce<kMultiply>, "_multiply"},
};

// Sets the deterministic flag and the detops mode for a variant; restores both when destroyed.
class VariantSettings {
 public:
  explicit VariantSettings(Variant v)
      : flag_(at::globalContext().deterministicAlgorithms()), mode_(detops::get_mode()) {
    const bool on = v == Variant::StockDeterministic || v == Variant::Detops;
    at::globalContext().setDeterministicAlgorithms(on, false);
    if (v == Variant::StockAtomic || v == Variant::StockDeterministic) detops::set_mode("off");
    if (v == Variant::Detops) detops::set_mode("auto");
  }
  ~VariantSettings() {
    at::globalContext().setDeterministicAlgorithms(flag_, false);
    detops::set_mode(mode_);
  }

 private:
  bool flag_;
  std::string mode_;
};

std::string first_line(const std::string& s) {
  return s.substr(0, std::min(s.find('\n'), static_cast<size_t>(300)));
}

void BM_cuda(benchmark::State& state, const OpEntry* op, const Shape* shape, Variant variant) {
  const VariantSettings settings(variant);
  at::manual_seed(1234);
  const auto opts = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  std::vector<Args> sets{op->build(*shape, opts, true, op->overload)};
  const int64_t l2 = at::cuda::getCurrentDeviceProperties()->l2CacheSize;
  const int64_t set_bytes = std::max<int64_t>(sets[0].nbytes(), 1);
  if (set_bytes < l2) {
    const int64_t count = std::min<int64_t>(32, (2 * l2 + set_bytes - 1) / set_bytes);
    while (static_cast<int64_t>(sets.size()) < count) sets.push_back(op->build(*shape, opts, true, op->overload));
  }
  try {
    for (int i = 0; i < 3; ++i) op->run(sets[i % sets.size()], op->overload, false);
    c10::cuda::device_synchronize();
  } catch (const c10::Error& e) {
    state.SkipWithError(first_line(e.what_without_backtrace()).c_str());
    return;
  }
  at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
  size_t i = 0;
  for (auto _ : state) {
    start.record();
    op->run(sets[i++ % sets.size()], op->overload, false);
    stop.record();
    stop.synchronize();
    state.SetIterationTime(start.elapsed_time(stop) * 1e-3);
  }
  state.counters["bytes_min"] = static_cast<double>(sets[0].bytes_min);
  state.counters["input_sets"] = static_cast<double>(sets.size());
}

void BM_cpu(benchmark::State& state, const OpEntry* op, const Shape* shape, Variant variant) {
  at::manual_seed(1234);
  Args args = op->build(*shape, at::TensorOptions().dtype(at::kFloat), false, op->overload);
  const bool twin = variant == Variant::DetopsCpu;
  for (auto _ : state) op->run(args, op->overload, twin);
  state.counters["bytes_min"] = static_cast<double>(args.bytes_min);
}

double copy_bandwidth_GBps() {
  const int64_t bytes = int64_t{1} << 30;
  const at::Tensor src = at::rand({bytes / 4}, at::TensorOptions().device(at::kCUDA));
  at::Tensor dst = at::empty_like(src);
  for (int i = 0; i < 3; ++i) dst.copy_(src);
  std::vector<float> ms;
  at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
  for (int i = 0; i < 20; ++i) {
    start.record();
    dst.copy_(src);
    stop.record();
    stop.synchronize();
    ms.push_back(start.elapsed_time(stop));
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return 2.0 * static_cast<double>(bytes) / (ms[ms.size() / 2] * 1e-3) / 1e9;
}

std::string run_name(const char* device, const OpEntry& op, const Shape& shape, Variant v) {
  return std::string(device) + "/" + op.op + "/" + shape.name + op.shape_suffix + "/" + variant_name(v);
}

// The CUDA (where a device is present) and CPU runs of one entry over its family's shapes.
void register_cases(const OpEntry& op, bool cuda) {
  for (const Shape& shape : kShapes) {
    if (shape.family != op.family) continue;
    if (cuda) {
      for (Variant v : {Variant::StockAtomic, Variant::StockDeterministic, Variant::Detops}) {
        benchmark::RegisterBenchmark(run_name("cuda", op, shape, v).c_str(), BM_cuda, &op, &shape, v)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond)
            ->MinWarmUpTime(0.02)
            ->MinTime(0.05)
            ->Repetitions(10)
            ->ReportAggregatesOnly(true);
      }
    }
    for (Variant v : {Variant::StockCpu, Variant::DetopsCpu}) {
      benchmark::RegisterBenchmark(run_name("cpu", op, shape, v).c_str(), BM_cpu, &op, &shape, v)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond)
          ->MinWarmUpTime(0.02)
          ->MinTime(0.05)
          ->Repetitions(5)
          ->ReportAggregatesOnly(true);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const bool cuda = at::globalContext().hasCUDA() && at::cuda::getNumGPUs() > 0;
  benchmark::AddCustomContext("detops_version", detops::version());
  benchmark::AddCustomContext("detops_torch", TORCH_VERSION);
  benchmark::AddCustomContext("detops_statistic", "median");
  if (cuda) {
    benchmark::AddCustomContext("detops_device", at::cuda::getCurrentDeviceProperties()->name);
    benchmark::AddCustomContext("detops_l2_bytes",
                                std::to_string(at::cuda::getCurrentDeviceProperties()->l2CacheSize));
    benchmark::AddCustomContext("detops_copy_bandwidth_GBps", std::to_string(copy_bandwidth_GBps()));
  } else {
    std::fprintf(stderr, "detops: no CUDA device; the CUDA benchmarks are skipped, the CPU ones run\n");
    benchmark::AddCustomContext("detops_device", "CPU");
  }
  std::string without_case;
  for (const std::string& name : detops::covered_ops()) {
    bool has_case = false;
    for (const OpEntry& op : kOps) {
      if (name != op.op) continue;
      register_cases(op, cuda);
      has_case = true;
    }
    if (!has_case) without_case += (without_case.empty() ? "" : " ") + name;
  }
  // The C++ suite has cases for the scatter family; bench/bench_ops.py has them for every covered op.
  benchmark::AddCustomContext("detops_covered_without_cpp_case", without_case);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
