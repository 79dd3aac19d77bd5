// The torch.ops.detops namespace: a twin of every overload in the one table (registration/ops.def), with
// aten's own schema, running the detops front end on CPU and CUDA tensors whatever the mode; and the
// mode API.
#include "detops/detops.h"
#include "ops/plan.h"
#include "registration/table.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

namespace {

// aten's registered schema of `name.overload`, renamed into the detops namespace: the twin's schema is
// aten's by construction, defaults and alias annotations included.
c10::FunctionSchema twin_schema(const char* name, const char* overload) {
  const auto aten = c10::Dispatcher::singleton().findSchema({std::string("aten::") + name, overload});
  TORCH_CHECK(aten.has_value(), "detops: aten::", detops::table::qualified(name, overload),
              " is not registered in this torch; detops must be built against the torch it is loaded into");
  return aten->schema().cloneWithName(std::string("detops::") + name, overload);
}

}  // namespace

TORCH_LIBRARY(detops, m) {
#define DETOPS_OP(header, name, overload, front_end, stock) m.def(twin_schema(#name, #overload));
#include "registration/ops.def"
#undef DETOPS_OP

  m.def("set_mode(str mode) -> ()", [](std::string mode) { detops::set_mode(mode); });
  m.def("get_mode() -> str", [] { return detops::get_mode(); });
  m.def("set_strict(bool strict) -> ()", [](bool strict) { detops::set_strict(strict); });
  m.def("get_strict() -> bool", [] { return detops::get_strict(); });
  m.def("covered_ops() -> str[]", [] { return detops::covered_ops(); });
  m.def("covered_cpu_ops() -> str[]", [] { return detops::covered_cpu_ops(); });
  m.def("version() -> str", [] { return detops::version(); });

  // Private: the engine's plan model (ops/plan.h), for detops.plan_summary. Not twins of aten ops.
  m.def("_plan_start(bool plan_only) -> ()", [](bool plan_only) { detops::plan::start_recording(plan_only); });
  m.def("_plan_stop() -> int[]", [] {
    std::vector<int64_t> flat;
    for (const auto& call : detops::plan::stop_recording()) {
      const auto fields = detops::plan::to_list(call);
      flat.insert(flat.end(), fields.begin(), fields.end());
    }
    return flat;
  });
  m.def("_plan_summary(int[] call) -> int[]", [](std::vector<int64_t> call) {
    return detops::plan::to_list(detops::plan::plan_for(detops::plan::call_from_list(call)));
  });
}

#define DETOPS_OP(header, name, overload, front_end, stock) \
  m.impl(detops::table::qualified(#name, #overload).c_str(), TORCH_FN(detops::front_end));

TORCH_LIBRARY_IMPL(detops, CPU, m) {
#include "registration/ops.def"
}

TORCH_LIBRARY_IMPL(detops, CUDA, m) {
#include "registration/ops.def"
}

#undef DETOPS_OP

// The twins have no derivatives of their own. Where an input requires grad, their outputs get a grad_fn that
// raises on backward (derivative not implemented) instead of the gradients an op without an autograd kernel
// leaves silently missing; the aten ops (the overrides) are the ones to differentiate.
#define DETOPS_OP(header, name, overload, front_end, stock) \
  m.impl(detops::table::qualified(#name, #overload).c_str(), torch::autograd::autogradNotImplementedFallback());

TORCH_LIBRARY_IMPL(detops, Autograd, m) {
#include "registration/ops.def"
}

#undef DETOPS_OP
#define DETOPS_OP(header, name, overload, front_end, stock)     \
  m.impl(detops::table::qualified(#name, #overload).c_str(), \
         torch::autograd::autogradNotImplementedInplaceOrViewFallback());

TORCH_LIBRARY_IMPL(detops, ADInplaceOrView, m) {
#include "registration/ops.def"
}

#undef DETOPS_OP
