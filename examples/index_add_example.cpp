// A LibTorch program that links libdetops.so, turns on torch's deterministic-algorithms flag and runs
// index_add_: through the aten override on CUDA when a device is present, else through the CPU twin.
#include <detops/detops.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/torch.h>

#include <iostream>

int main() {
  torch::manual_seed(0);
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  const bool cuda = torch::cuda::is_available();
  const torch::Device device = cuda ? torch::kCUDA : torch::kCPU;
  const auto self = torch::zeros({1000, 16}, device);
  const auto index = torch::randint(0, 1000, {100000}, torch::TensorOptions().dtype(torch::kLong)).to(device);
  const auto source = torch::randn({100000, 16}).to(device);

  auto run = [&] {
    auto out = self.clone();
    if (cuda) {
      out.index_add_(0, index, source);  // the aten CUDA kernel, overridden by detops
    } else {
      static const auto twin =
          c10::Dispatcher::singleton().findSchemaOrThrow("detops::index_add_", "").typed<
              at::Tensor&(at::Tensor&, int64_t, const at::Tensor&, const at::Tensor&, const at::Scalar&)>();
      twin.call(out, 0, index, source, 1);
    }
    return out;
  };
  const auto first = run();
  const auto second = run();
  std::cout << "detops " << detops::version() << ", mode " << detops::get_mode() << ", device "
            << (cuda ? "CUDA (aten::index_add_ override)" : "CPU (torch.ops.detops.index_add_ twin)") << "\n"
            << "sum " << first.sum().item<double>() << "\n"
            << "bitwise identical: " << (torch::equal(first, second) ? "yes" : "no") << std::endl;
  return torch::equal(first, second) ? 0 : 1;
}
