// THE audited list of aten CUDA kernels that detops overrides, and the modes that install them.
//
// Every entry routes one aten overload on the CUDA dispatch key to its detops front end (ops/ops.h) when
// use_detops_kernels() says so, and otherwise to the stock CUDA kernel, called directly through its
// at::cuda:: function (never through the dispatcher, which would come back here). Adding an op means
// adding one line to kOverrides, its twin schema in registration/schemas.cpp, and tests.
#include "detops/detops.h"
#include "ops/common.h"
#include "ops/ctc_loss.h"
#include "ops/ops.h"
#include "ops/bincount.h"
#include "ops/embedding_bag.h"
#include "ops/pooling.h"

#include <ATen/Context.h>
#include <ATen/ops/_ctc_loss_backward_cuda_dispatch.h>
#include <ATen/ops/index_add_cuda_dispatch.h>
#include <ATen/ops/bincount_cuda_dispatch.h>
#include <ATen/ops/_embedding_bag_dense_backward_cuda_dispatch.h>
#include <ATen/ops/scatter_add_cuda_dispatch.h>
#include <ATen/ops/_adaptive_avg_pool2d_backward_cuda_dispatch.h>
#include <ATen/ops/_adaptive_avg_pool3d_backward_cuda_dispatch.h>
#include <ATen/ops/adaptive_avg_pool3d_backward_cuda_dispatch.h>
#include <ATen/ops/adaptive_max_pool2d_backward_cuda_dispatch.h>
#include <ATen/ops/adaptive_max_pool3d_backward_cuda_dispatch.h>
#include <ATen/ops/avg_pool3d_backward_cuda_dispatch.h>
#include <ATen/ops/fractional_max_pool2d_backward_cuda_dispatch.h>
#include <ATen/ops/fractional_max_pool3d_backward_cuda_dispatch.h>
#include <ATen/ops/max_pool3d_with_indices_backward_cuda_dispatch.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

namespace detops {
namespace {

enum class Mode : int { Auto = 0, Always = 1, Off = 2 };

std::atomic<int> g_mode{static_cast<int>(Mode::Auto)};
std::atomic<bool> g_strict{false};
std::mutex g_mutex;
torch::Library* g_library = nullptr;  // owns the overrides; deleting it restores the stock kernels

// detops when the mode says so, else the stock CUDA kernel.
template <auto Ours, auto Stock>
struct Choose;
template <typename R, typename... Args, R (*Ours)(Args...), R (*Stock)(Args...)>
struct Choose<Ours, Stock> {
  static R call(Args... args) {
    return use_detops_kernels() ? Ours(args...) : Stock(args...);
  }
};

template <auto Fn>
void install(torch::Library& m, const char* name) {
  m.impl(name, TORCH_FN(Fn));
}

struct Override {
  const char* name;  // aten overload, "name" or "name.overload"
  void (*install)(torch::Library&, const char*);
};

#define DETOPS_OVERRIDE(name, ours, stock) \
  Override { name, &install<&Choose<&ours, &stock>::call> }

// at::cuda::_ctc_loss_backward is overloaded; these name each overload for DETOPS_OVERRIDE.
at::Tensor stock_ctc_loss_backward(const at::Tensor& grad, const at::Tensor& log_probs, const at::Tensor& targets,
                                   at::IntArrayRef input_lengths, at::IntArrayRef target_lengths,
                                   const at::Tensor& nll, const at::Tensor& log_alpha, int64_t blank,
                                   bool zero_infinity) {
  return at::cuda::_ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths, nll, log_alpha, blank,
                                      zero_infinity);
}
at::Tensor stock_ctc_loss_backward_tensor(const at::Tensor& grad, const at::Tensor& log_probs,
                                          const at::Tensor& targets, const at::Tensor& input_lengths,
                                          const at::Tensor& target_lengths, const at::Tensor& nll,
                                          const at::Tensor& log_alpha, int64_t blank, bool zero_infinity) {
  return at::cuda::_ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths, nll, log_alpha, blank,
                                      zero_infinity);
}

const Override kOverrides[] = {
    DETOPS_OVERRIDE("index_add", detops::index_add, at::cuda::index_add),
    DETOPS_OVERRIDE("index_add_", detops::index_add_, at::cuda::index_add_),
    DETOPS_OVERRIDE("index_add.out", detops::index_add_out, at::cuda::index_add_outf),
    DETOPS_OVERRIDE("scatter_add", detops::scatter_add, at::cuda::scatter_add),
    DETOPS_OVERRIDE("scatter_add_", detops::scatter_add_, at::cuda::scatter_add_),
    DETOPS_OVERRIDE("scatter_add.out", detops::scatter_add_out, at::cuda::scatter_add_outf),
    DETOPS_OVERRIDE("bincount", detops::bincount, at::cuda::bincount),
    DETOPS_OVERRIDE("_embedding_bag_dense_backward", detops::embedding_bag_dense_backward,
                    at::cuda::_embedding_bag_dense_backward),
    DETOPS_OVERRIDE("_adaptive_avg_pool2d_backward", detops::adaptive_avg_pool2d_backward,
                    at::cuda::_adaptive_avg_pool2d_backward),
    DETOPS_OVERRIDE("_adaptive_avg_pool3d_backward", detops::adaptive_avg_pool3d_backward,
                    at::cuda::_adaptive_avg_pool3d_backward),
    DETOPS_OVERRIDE("adaptive_avg_pool3d_backward.grad_input", detops::adaptive_avg_pool3d_backward_out,
                    at::cuda::adaptive_avg_pool3d_backward_outf),
    DETOPS_OVERRIDE("avg_pool3d_backward", detops::avg_pool3d_backward, at::cuda::avg_pool3d_backward),
    DETOPS_OVERRIDE("avg_pool3d_backward.grad_input", detops::avg_pool3d_backward_out,
                    at::cuda::avg_pool3d_backward_outf),
    DETOPS_OVERRIDE("adaptive_max_pool2d_backward", detops::adaptive_max_pool2d_backward,
                    at::cuda::adaptive_max_pool2d_backward),
    DETOPS_OVERRIDE("adaptive_max_pool2d_backward.grad_input", detops::adaptive_max_pool2d_backward_out,
                    at::cuda::adaptive_max_pool2d_backward_outf),
    DETOPS_OVERRIDE("adaptive_max_pool3d_backward", detops::adaptive_max_pool3d_backward,
                    at::cuda::adaptive_max_pool3d_backward),
    DETOPS_OVERRIDE("adaptive_max_pool3d_backward.grad_input", detops::adaptive_max_pool3d_backward_out,
                    at::cuda::adaptive_max_pool3d_backward_outf),
    DETOPS_OVERRIDE("fractional_max_pool2d_backward", detops::fractional_max_pool2d_backward,
                    at::cuda::fractional_max_pool2d_backward),
    DETOPS_OVERRIDE("fractional_max_pool2d_backward.grad_input", detops::fractional_max_pool2d_backward_out,
                    at::cuda::fractional_max_pool2d_backward_outf),
    DETOPS_OVERRIDE("fractional_max_pool3d_backward", detops::fractional_max_pool3d_backward,
                    at::cuda::fractional_max_pool3d_backward),
    DETOPS_OVERRIDE("fractional_max_pool3d_backward.grad_input", detops::fractional_max_pool3d_backward_out,
                    at::cuda::fractional_max_pool3d_backward_outf),
    DETOPS_OVERRIDE("max_pool3d_with_indices_backward", detops::max_pool3d_with_indices_backward,
                    at::cuda::max_pool3d_with_indices_backward),
    DETOPS_OVERRIDE("max_pool3d_with_indices_backward.grad_input", detops::max_pool3d_with_indices_backward_out,
                    at::cuda::max_pool3d_with_indices_backward_outf),
    DETOPS_OVERRIDE("_ctc_loss_backward", detops::ctc_loss_backward, stock_ctc_loss_backward),
    DETOPS_OVERRIDE("_ctc_loss_backward.Tensor", detops::ctc_loss_backward_tensor, stock_ctc_loss_backward_tensor),
};

#undef DETOPS_OVERRIDE

// Drops the dispatcher's multi-line "Overriding a previously registered kernel" warning, which is the
// point of this library; forwards every other warning.
class QuietOverrideWarnings : public c10::WarningHandler {
 public:
  explicit QuietOverrideWarnings(c10::WarningHandler* next) : next_(next) {}
  void process(const c10::Warning& warning) override {
    if (warning.msg().find("Overriding a previously registered kernel") != std::string::npos) return;
    next_->process(warning);
  }

 private:
  c10::WarningHandler* next_;
};

void install_overrides_locked() {
  if (g_library != nullptr) return;
  QuietOverrideWarnings quiet(c10::WarningUtils::get_warning_handler());
  const c10::WarningUtils::WarningHandlerGuard guard(&quiet);
  auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::CUDA, __FILE__,
                                              __LINE__);
  for (const Override& o : kOverrides) o.install(*lib, o.name);
  g_library = lib.release();
}

void remove_overrides_locked() {
  delete g_library;
  g_library = nullptr;
}

Mode parse_mode(const std::string& mode) {
  if (mode == "auto") return Mode::Auto;
  if (mode == "always") return Mode::Always;
  if (mode == "off") return Mode::Off;
  TORCH_CHECK(false, "detops.set_mode(): unknown mode '", mode, "'; expected 'auto', 'always' or 'off'");
}

// Installs the overrides when the library is loaded, following DETOPS_MODE and DETOPS_STRICT.
[[maybe_unused]] const bool g_loaded = [] {
  const char* strict = std::getenv("DETOPS_STRICT");
  g_strict = strict != nullptr && std::string(strict) == "1";
  const char* mode = std::getenv("DETOPS_MODE");
  set_mode(mode != nullptr && *mode != '\0' ? mode : "auto");
  return true;
}();

}  // namespace

bool use_detops_kernels() {
  const Mode mode = static_cast<Mode>(g_mode.load(std::memory_order_relaxed));
  return mode == Mode::Always || (mode == Mode::Auto && at::globalContext().deterministicAlgorithms());
}

void set_mode(const std::string& mode) {
  const Mode m = parse_mode(mode);
  const std::lock_guard<std::mutex> lock(g_mutex);
  if (m == Mode::Off) {
    remove_overrides_locked();
  } else {
    install_overrides_locked();
  }
  g_mode = static_cast<int>(m);
}

std::string get_mode() {
  switch (static_cast<Mode>(g_mode.load())) {
    case Mode::Always:
      return "always";
    case Mode::Off:
      return "off";
    default:
      return "auto";
  }
}

void set_strict(bool strict) {
  g_strict = strict;
}

bool get_strict() {
  return g_strict.load();
}

std::vector<std::string> covered_ops() {
  std::vector<std::string> names;
  for (const Override& o : kOverrides) names.push_back(std::string("aten::") + o.name);
  return names;
}

std::string version() {
  return DETOPS_VERSION;
}

}  // namespace detops
