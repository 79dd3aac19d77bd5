// The aten CUDA overrides made from the one table (registration/ops.def), the aten CPU overrides made from
// the CPU table (registration/cpu_ops.def), covered_ops(), covered_cpu_ops(), and the modes that install them.
//
// Every table line routes one aten overload on its dispatch key (CUDA or CPU) to its detops front end when
// use_detops_kernels() says so, and otherwise to the stock kernel of that device, called directly through
// its at::cuda:: or at::cpu:: function (never through the dispatcher, which would come back here).
#include "detops/detops.h"
#include "ops/common.h"
#include "registration/table.h"

#include <ATen/Context.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace detops {
namespace {

enum class Mode : int { Auto = 0, Always = 1, Off = 2 };

std::atomic<int> g_mode{static_cast<int>(Mode::Auto)};
std::atomic<bool> g_strict{false};
std::mutex g_mutex;
torch::Library* g_library = nullptr;      // owns the CUDA overrides; deleting it restores the stock kernels
torch::Library* g_cpu_library = nullptr;  // the same for the CPU overrides

// detops when the mode says so, else the stock kernel. NB: Stock's parameter has Ours' type, so an
// overloaded at::cuda:: name (_ctc_loss_backward) resolves to the overload with the front end's signature.
template <typename Fn, Fn Ours, Fn Stock>
struct Route;
template <typename R, typename... Args, R (*Ours)(Args...), R (*Stock)(Args...)>
struct Route<R (*)(Args...), Ours, Stock> {
  static R call(Args... args) {
    return use_detops_kernels() ? Ours(args...) : Stock(args...);
  }
};

template <auto Fn>
void install(torch::Library& m, const char* name) {
  m.impl(name, TORCH_FN(Fn));
}

// The installer of one table line's route.
#define DETOPS_ROUTE(front_end, stock) \
  &install<&Route<decltype(&detops::front_end), &detops::front_end, &stock>::call>

struct Override {
  std::string name;  // aten overload, "name" or "name.overload"
  void (*install)(torch::Library&, const char*);
};

const Override kOverrides[] = {
#define DETOPS_OP(header, name, overload, front_end, stock) \
  Override{table::qualified(#name, #overload), DETOPS_ROUTE(front_end, at::cuda::stock)},
#include "registration/ops.def"
#undef DETOPS_OP
};

const Override kCpuOverrides[] = {
#define DETOPS_OP(header, name, overload, front_end, stock) \
  Override{table::qualified(#name, #overload), DETOPS_ROUTE(front_end, at::cpu::stock)},
#include "registration/cpu_ops.def"
#undef DETOPS_OP
};
#undef DETOPS_ROUTE

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
  for (const Override& o : kOverrides) o.install(*lib, o.name.c_str());
  auto cpu_lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::CPU, __FILE__,
                                                  __LINE__);
  for (const Override& o : kCpuOverrides) o.install(*cpu_lib, o.name.c_str());
  g_library = lib.release();
  g_cpu_library = cpu_lib.release();
}

void remove_overrides_locked() {
  delete g_library;
  g_library = nullptr;
  delete g_cpu_library;
  g_cpu_library = nullptr;
}

std::optional<Mode> try_parse_mode(const std::string& mode) {
  if (mode == "auto") return Mode::Auto;
  if (mode == "always") return Mode::Always;
  if (mode == "off") return Mode::Off;
  return std::nullopt;
}

Mode parse_mode(const std::string& mode) {
  const std::optional<Mode> m = try_parse_mode(mode);
  TORCH_CHECK(m.has_value(), "detops.set_mode(): unknown mode '", mode, "'; expected 'auto', 'always' or 'off'");
  return *m;
}

void apply_mode(Mode m) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  if (m == Mode::Off) {
    remove_overrides_locked();
  } else {
    install_overrides_locked();
  }
  g_mode = static_cast<int>(m);
}

// Installs the overrides when the library is loaded, following DETOPS_MODE and DETOPS_STRICT.
// NB: nothing here may throw: an exception from a static initialiser terminates the host process. A bad
// value warns and keeps the default.
[[maybe_unused]] const bool g_loaded = [] {
  const char* strict = std::getenv("DETOPS_STRICT");
  const std::string strict_value = strict != nullptr ? strict : "";
  if (strict_value != "" && strict_value != "0" && strict_value != "1") {
    TORCH_WARN("detops: DETOPS_STRICT='", strict_value, "' is neither '0' nor '1'; strict mode stays off");
  }
  g_strict = strict_value == "1";
  const char* env = std::getenv("DETOPS_MODE");
  const std::string mode_value = env != nullptr ? env : "";
  std::optional<Mode> mode = mode_value.empty() ? Mode::Auto : try_parse_mode(mode_value);
  if (!mode.has_value()) {
    TORCH_WARN("detops: DETOPS_MODE='", mode_value, "' is not a mode ('auto', 'always' or 'off'); using 'auto'");
    mode = Mode::Auto;
  }
  try {
    apply_mode(*mode);
  } catch (const std::exception& e) {
    TORCH_WARN("detops: the overrides could not be installed (", e.what(), "); mode 'off'");
    g_mode = static_cast<int>(Mode::Off);
  }
  return true;
}();

}  // namespace

bool use_detops_kernels() {
  const Mode mode = static_cast<Mode>(g_mode.load(std::memory_order_relaxed));
  return mode == Mode::Always || (mode == Mode::Auto && at::globalContext().deterministicAlgorithms());
}

void set_mode(const std::string& mode) {
  apply_mode(parse_mode(mode));
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

std::vector<std::string> covered_cpu_ops() {
  std::vector<std::string> names;
  for (const Override& o : kCpuOverrides) names.push_back(std::string("aten::") + o.name);
  return names;
}

std::string version() {
  return DETOPS_VERSION;
}

}  // namespace detops
