// Host tensors <-> ATen tensors for the LibTorch backends.
#include "backends/torch/aten_tensors.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include <cctype>
#include <stdexcept>

namespace deltacheck::backends::torch_bridge {

at::ScalarType aten_dtype(cases::DType t) {
  switch (t) {
    case cases::DType::kF32:
      return at::kFloat;
    case cases::DType::kBF16:
      return at::kBFloat16;
    case cases::DType::kF16:
      return at::kHalf;
    case cases::DType::kF64:
      return at::kDouble;
    case cases::DType::kI32:
      return at::kInt;
    case cases::DType::kI64:
      return at::kLong;
    case cases::DType::kU8:
      return at::kByte;
  }
  throw std::invalid_argument("no ATen dtype for this tensor");
}

at::Tensor to_aten(const cases::Tensor& t, const c10::Device& device) {
  // from_blob wants a mutable pointer; the tensor is only ever read (see the header).
  at::Tensor view = at::from_blob(const_cast<void*>(t.data()), t.shape(),
                                  at::TensorOptions().dtype(aten_dtype(t.dtype())));
  return device.is_cpu() ? view : view.to(device);
}

std::optional<at::Tensor> optional_input(const cases::TensorMap& in, const std::string& name,
                                         const c10::Device& device) {
  if (const cases::Tensor* t = in.find(name)) return to_aten(*t, device);
  return std::nullopt;
}

Status copy_output(const at::Tensor& value, cases::Tensor& out, const std::string& what) {
  if (!value.defined()) return Status::Internal(what + " was not returned (undefined tensor)");
  if (value.sizes() != at::IntArrayRef(out.shape()))
    return Status::Internal(what + " has shape " + cases::shape_string(value.sizes().vec()) +
                            ", expected " + cases::shape_string(out.shape()));
  const at::ScalarType want = aten_dtype(out.dtype());
  if (value.scalar_type() != want)
    return Status::Internal(what + " has dtype " + std::string(c10::toString(value.scalar_type())) +
                            ", expected " + c10::toString(want));
  if (out.numel() == 0) return Status::Ok();
  at::Tensor dst = at::from_blob(out.data(), out.shape(), at::TensorOptions().dtype(want));
  dst.copy_(value);
  return Status::Ok();
}

DeviceChoice choose_device(const std::string& name) {
  DeviceChoice d;
  if (name == "cpu") {
    d.device = c10::Device(c10::kCPU);
    return d;
  }
  int64_t index = 0;
  bool ok = name == "cuda";
  if (!ok && name.rfind("cuda:", 0) == 0 && name.size() > 5) {
    ok = true;
    for (size_t i = 5; i < name.size(); ++i) ok = ok && std::isdigit(name[i]);
    if (ok) index = std::stoll(name.substr(5));
  }
  if (!ok) {
    d.why_not = "unknown device '" + name + "' (cpu | cuda | cuda:N)";
    return d;
  }
  // torch::cuda::device_count() is 0 for a LibTorch built without CUDA, too.
  const int64_t count = static_cast<int64_t>(::torch::cuda::device_count());
  if (count == 0) {
    d.why_not = "no CUDA device";
  } else if (index >= count) {
    d.why_not = "no CUDA device " + std::to_string(index) + " (this machine has " +
                std::to_string(count) + ")";
  } else {
    d.device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  return d;
}

Status status_of(const std::string& who, const std::function<Status()>& fn) {
  try {
    return fn();
  } catch (const c10::Error& e) {
    std::string m = e.what_without_backtrace();
    // ATen messages may span lines (context, op frames); a report row takes one.
    for (char& c : m)
      if (c == '\n') c = ' ';
    return Status::Internal(who + ": " + m);
  } catch (const std::exception& e) {
    return Status::Internal(who + ": " + e.what());
  }
}

}  // namespace deltacheck::backends::torch_bridge
