// The torch.ops.detops namespace: a twin of every overload in the one table (registration/ops.def), with
// aten's own schema, running the detops front end on CPU and CUDA tensors whatever the mode; and the
// mode API.
#include "detops/detops.h"
#include "registration/table.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
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
