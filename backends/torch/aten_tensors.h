// Between the harness's host tensors (cases::Tensor) and ATen tensors, for the LibTorch backends:
// inputs become ATen views (no copy on the CPU), results are checked for shape and dtype before
// they are copied into the runner's poisoned, guarded outputs.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <functional>
#include <optional>
#include <string>

#include "cases/tensor.h"
#include "core/status.h"

namespace deltacheck::backends::torch_bridge {

at::ScalarType aten_dtype(cases::DType t);

// Input `t` as an ATen tensor on `device`: a view of the host bytes on the CPU (the kernels take
// their inputs const and never write them), a copy elsewhere.
at::Tensor to_aten(const cases::Tensor& t, const c10::Device& device);

// The input named `name` if the case has it.
std::optional<at::Tensor> optional_input(const cases::TensorMap& in, const std::string& name,
                                         const c10::Device& device);

// Copies `value` (any device, any strides) into `out` when its shape and dtype are exactly those
// of `out`; otherwise an error naming `what` ("o", "final_state") and both shapes / dtypes.
Status copy_output(const at::Tensor& value, cases::Tensor& out, const std::string& what);

// "cpu", "cuda" or "cuda:N" as a device, or the reason it is not one this build can use
// ("no CUDA device", "unknown device 'x' (cpu | cuda | cuda:N)").
struct DeviceChoice {
  std::optional<c10::Device> device;
  std::string why_not;
};
DeviceChoice choose_device(const std::string& name);

// Runs `fn` and turns what ATen and the kernels throw into an error Status "<who>: <what>" with a
// one-line message (ATen's c10::Error without its backtrace).
Status status_of(const std::string& who, const std::function<Status()>& fn);

}  // namespace deltacheck::backends::torch_bridge
