// The mode API and the dispatcher's tables of aten CUDA and CPU kernels in each mode.
#include "detops/detops.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <algorithm>

namespace {

// The dispatcher's kernel line for `name` on `key` ("CUDA" or "CPU").
std::string kernel_of(const std::string& name, const std::string& key) {
  const auto dot = name.find('.');
  const std::string op = name.substr(0, dot);
  const std::string overload = dot == std::string::npos ? "" : name.substr(dot + 1);
  auto handle = c10::Dispatcher::singleton().findSchema({op, overload});
  EXPECT_TRUE(handle.has_value()) << name;
  const std::string dump = handle->dumpState();
  const auto at = dump.find("\n" + key + ": ");
  EXPECT_NE(at, std::string::npos) << dump;
  return dump.substr(at, dump.find('\n', at + 1) - at);
}

std::string cuda_kernel_of(const std::string& name) {
  return kernel_of(name, "CUDA");
}

// covered_ops() is the one table (registration/ops.def), line for line and in order, and every line names
// a registered aten overload.
TEST(Registration, CoveredOpsAreTheTable) {
  const std::vector<std::string> table = {
#define DETOPS_OP(header, name, overload, front_end, stock) \
  std::string("aten::") + (sizeof(#overload) == 1 ? #name : #name "." #overload),
#include "registration/ops.def"
#undef DETOPS_OP
  };
  EXPECT_EQ(detops::covered_ops(), table);
  EXPECT_GE(table.size(), 25u);
  for (const auto& name : table) {
    const auto dot = name.find('.');
    const std::string overload = dot == std::string::npos ? "" : name.substr(dot + 1);
    EXPECT_TRUE(c10::Dispatcher::singleton().findSchema({name.substr(0, dot), overload}).has_value()) << name;
  }
}

TEST(Registration, ModesInstallAndRemoveTheOverrides) {
  EXPECT_EQ(detops::get_mode(), "auto");
  for (const auto& name : detops::covered_ops()) {
    EXPECT_NE(cuda_kernel_of(name).find("registration/overrides.cpp"), std::string::npos) << name;
  }
  detops::set_mode("off");
  EXPECT_EQ(detops::get_mode(), "off");
  for (const auto& name : detops::covered_ops()) {
    EXPECT_EQ(cuda_kernel_of(name).find("registration/overrides.cpp"), std::string::npos) << name;
  }
  detops::set_mode("always");
  EXPECT_EQ(detops::get_mode(), "always");
  for (const auto& name : detops::covered_ops()) {
    EXPECT_NE(cuda_kernel_of(name).find("registration/overrides.cpp"), std::string::npos) << name;
  }
  detops::set_mode("auto");
}

// covered_cpu_ops() is the CPU table (registration/cpu_ops.def), line for line, and each line is in the CUDA
// table too (which gives it its twin).
TEST(Registration, CoveredCpuOpsAreTheCpuTable) {
  const std::vector<std::string> table = {
#define DETOPS_OP(header, name, overload, front_end, stock) \
  std::string("aten::") + (sizeof(#overload) == 1 ? #name : #name "." #overload),
#include "registration/cpu_ops.def"
#undef DETOPS_OP
  };
  EXPECT_EQ(detops::covered_cpu_ops(), table);
  EXPECT_GE(table.size(), 5u);
  const std::vector<std::string> covered = detops::covered_ops();
  for (const auto& name : table) {
    EXPECT_NE(std::find(covered.begin(), covered.end(), name), covered.end()) << name;
  }
}

TEST(Registration, ModesInstallAndRemoveTheCpuOverrides) {
  EXPECT_EQ(detops::get_mode(), "auto");
  for (const auto& name : detops::covered_cpu_ops()) {
    EXPECT_NE(kernel_of(name, "CPU").find("registration/overrides.cpp"), std::string::npos) << name;
  }
  detops::set_mode("off");
  for (const auto& name : detops::covered_cpu_ops()) {
    EXPECT_EQ(kernel_of(name, "CPU").find("registration/overrides.cpp"), std::string::npos) << name;
  }
  detops::set_mode("always");
  for (const auto& name : detops::covered_cpu_ops()) {
    EXPECT_NE(kernel_of(name, "CPU").find("registration/overrides.cpp"), std::string::npos) << name;
  }
  detops::set_mode("auto");
}

TEST(Registration, UnknownModeIsAClearError) {
  try {
    detops::set_mode("sometimes");
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown mode 'sometimes'"), std::string::npos);
  }
  EXPECT_EQ(detops::get_mode(), "auto");
}

TEST(Registration, StrictModeToggles) {
  const bool before = detops::get_strict();
  detops::set_strict(!before);
  EXPECT_EQ(detops::get_strict(), !before);
  detops::set_strict(before);
}

TEST(Registration, TwinsExistWithTheAtenSchemas) {
  for (const auto& name : detops::covered_ops()) {
    const auto dot = name.find('.');
    const std::string overload = dot == std::string::npos ? "" : name.substr(dot + 1);
    const std::string base = name.substr(6, dot == std::string::npos ? std::string::npos : dot - 6);
    auto aten = c10::Dispatcher::singleton().findSchema({"aten::" + base, overload});
    auto twin = c10::Dispatcher::singleton().findSchema({"detops::" + base, overload});
    ASSERT_TRUE(aten.has_value() && twin.has_value()) << name;
    auto strip = [](std::string s) { return s.substr(s.find('(')); };
    EXPECT_EQ(strip(c10::toString(twin->schema())), strip(c10::toString(aten->schema()))) << name;
  }
}

}  // namespace
