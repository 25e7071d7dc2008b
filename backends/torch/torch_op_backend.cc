// Backend "torch-op": a custom operator that some shared library registers with TORCH_LIBRARY,
// checked as a gated delta rule through the calling convention of torch_op_convention.h. The
// library is loaded, the operator found and its schema checked once, on the first run; when any
// of that fails, every case gets verdict error with the reason. gdr cases call the operator
// under InferenceMode; gdr_grad cases call it on autograd leaves and differentiate its outputs
// with torch::autograd::grad (autograd_gradients.h, as the torch backend does for its ATen
// forward), which needs the operator to have an autograd kernel (a registered backward): without
// one, gdr_grad cases are unsupported.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/InferenceMode.h>
#include <dlfcn.h>

#include <cmath>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "backends/torch/aten_tensors.h"
#include "backends/torch/autograd_gradients.h"
#include "backends/torch/torch_backend.h"
#include "backends/torch/torch_op_convention.h"
#include "ops/gdr/params.h"

namespace deltacheck::backends {

namespace {

struct ArgSpec {
  const char* name;
  const char* type;  // as c10::Type::str() prints it
};
constexpr ArgSpec kArguments[] = {
    {"q", "Tensor"},
    {"k", "Tensor"},
    {"v", "Tensor"},
    {"g", "Tensor"},
    {"beta", "Tensor"},
    {"cu_seqlens", "Tensor?"},
    {"initial_state", "Tensor?"},
    {"scale", "float"},
    {"use_qk_l2norm", "bool"},
};
constexpr ArgSpec kReturns[] = {{"o", "Tensor"}, {"final_state", "Tensor"}};

template <size_t N>
std::string mismatch_in(const char* what, const std::vector<c10::Argument>& got,
                        const ArgSpec (&want)[N]) {
  if (got.size() != N)
    return "it has " + std::to_string(got.size()) + " " + what + "s, expected " + std::to_string(N);
  for (size_t i = 0; i < N; ++i) {
    const std::string type = got[i].type()->str();
    if (type != want[i].type)
      return std::string(what) + " " + std::to_string(i + 1) + " (" +
             (got[i].name().empty() ? "unnamed" : got[i].name()) + ") is " + type + ", expected " +
             want[i].type + " " + want[i].name;
  }
  return "";
}

}  // namespace

std::string torch_op_convention_mismatch(const c10::FunctionSchema& schema) {
  if (schema.is_vararg() || schema.is_varret()) return "it is variadic";
  std::string why = mismatch_in("argument", schema.arguments(), kArguments);
  if (why.empty()) why = mismatch_in("return", schema.returns(), kReturns);
  return why;
}

namespace {

using cases::Case;
using cases::TensorMap;

// "ns::name" or "ns::name.overload" as a dispatcher operator name; nullopt if it is neither.
std::optional<c10::OperatorName> parse_op_name(const std::string& op) {
  const size_t sep = op.find("::");
  if (sep == std::string::npos || sep == 0 || sep + 2 >= op.size()) return std::nullopt;
  const size_t dot = op.find('.', sep);
  if (dot == std::string::npos) return c10::OperatorName(op, "");
  return c10::OperatorName(op.substr(0, dot), op.substr(dot + 1));
}

// The operators registered under `ns::`, to name in the error when the one asked for is absent.
std::string operators_in_namespace(const std::string& ns) {
  std::string list;
  int shown = 0;
  for (const c10::OperatorName& n : c10::Dispatcher::singleton().getAllOpNames()) {
    if (n.name.rfind(ns + "::", 0) != 0) continue;
    if (shown++ == 8) {
      list += ", ...";
      break;
    }
    list += (list.empty() ? "" : ", ") + n.name +
            (n.overload_name.empty() ? "" : "." + n.overload_name);
  }
  return list;
}

class TorchOpBackend : public Backend {
 public:
  explicit TorchOpBackend(const BackendOptions& o)
      : library_(o.library),
        op_(o.op),
        device_name_(o.device),
        profile_(o.profile),
        deterministic_(o.deterministic),
        batch_invariant_(o.batch_invariant) {}

  std::string name() const override { return "torch-op"; }
  std::string description() const override {
    if (op_.empty())
      return "a custom torch operator from a shared library: --library libX.so --op ns::name, "
             "called as " +
             std::string(kTorchOpGdrSignature) + " (gdr; gdr_grad through its autograd kernel)";
    return "custom torch operator " + op_ + " from " + library_;
  }
  // Someone else's kernel: bit-identical reruns are not promised (atomics, split reductions)
  // unless declared (--deterministic); the repeat probe measures it.
  bool deterministic() const override { return deterministic_; }
  MatmulPrecision matmul_precision() const override { return profile_.matmul; }
  PrecisionProfile precision_profile() const override { return profile_; }
  bool batch_invariant(const cases::Case&) const override { return batch_invariant_; }

  Support supports(const Case& c) const override {
    if (c.op() != "gdr" && c.op() != "gdr_grad")
      return Support::No("torch-op calls gated delta rule operators only (not '" + c.op() + "')");
    // chunked and dynamic reach the operator as prefill and decode calls (harness/call_plan.h);
    // the convention has no state slots for pool, spec, ckpt, accept and tree. gdr_grad cases
    // are one prefill call (whether the operator has a backward is known once it is loaded).
    if (c.op() == "gdr") {
      const ops::gdr::Params p = ops::gdr::decode(c);
      if (p.pooled() || p.serving())
        return Support::No(std::string("torch-op: the calling convention has no cache mode '") +
                           ops::gdr::name(p.cache) + "'");
    }
    const torch_bridge::DeviceChoice& d = device();
    if (!d.device) return Support::No(d.why_not);
    return Support::Yes();
  }

  Status run(const Case& c, const TensorMap& in, TensorMap& out) override {
    if (Status st = load(); !st.ok()) return st;
    const torch_bridge::DeviceChoice& d = device();
    if (!d.device) return Status::Unsupported(d.why_not);
    if (c.op() == "gdr_grad") {
      if (const std::string why = no_autograd_kernel(*d.device); !why.empty())
        return Status::Unsupported(why);
      return torch_bridge::status_of(op_, [&] {
        return torch_bridge::gdr_grad_through_autograd(
            c, in, out, *d.device, [&](const auto& x, auto& r) { return call_recorded(x, r); });
      });
    }
    return torch_bridge::status_of(op_, [&] { return call(c, in, out, *d.device); });
  }

 private:
  // One boxed call of the operator through the dispatcher (its Autograd kernel when an input
  // requires gradients); o must come back a tensor, final_state is left undefined when it is not
  // one.
  Status call_op(const torch_bridge::GdrForwardInputs& x, torch_bridge::GdrForwardOutputs& r) {
    auto optional = [](const std::optional<at::Tensor>& t) {
      return t ? c10::IValue(*t) : c10::IValue();
    };
    torch::jit::Stack stack{
        x.q, x.k, x.v, x.g, x.beta, optional(x.cu_seqlens), optional(x.initial_state)};
    stack.emplace_back(1.0 / std::sqrt(static_cast<double>(x.key_dim)));
    stack.emplace_back(x.l2);
    handle_->callBoxed(stack);
    if (stack.size() != 2)
      return Status::Internal("returned " + std::to_string(stack.size()) +
                              " values, expected (o, final_state)");
    if (!stack[0].isTensor()) return Status::Internal("o is not a tensor");
    r.o = stack[0].toTensor();
    if (stack[1].isTensor()) r.final_state = stack[1].toTensor();
    return Status::Ok();
  }

  Status call(const Case& c, const TensorMap& in, TensorMap& out, const c10::Device& device) {
    c10::InferenceMode no_autograd;
    // Copies, not views: an operator that writes into its inputs must not change what the
    // runner compares against or hands to the next backend.
    auto input = [&](const char* name) {
      return torch_bridge::to_aten(in.at(name), device).clone();
    };
    auto optional = [&](const char* name) {
      const cases::Tensor* t = in.find(name);
      return t ? std::optional<at::Tensor>(torch_bridge::to_aten(*t, device).clone())
               : std::nullopt;
    };
    const ops::gdr::Params p = ops::gdr::decode(c);
    cases::Tensor* final_state = out.find("final_state");
    torch_bridge::GdrForwardInputs x{input("q"),
                                     input("k"),
                                     input("v"),
                                     input("g"),
                                     input("beta"),
                                     optional("cu_seqlens"),
                                     optional("initial_state"),
                                     p.K,
                                     p.l2,
                                     final_state != nullptr};
    torch_bridge::GdrForwardOutputs r;
    if (Status st = call_op(x, r); !st.ok()) return st;
    if (Status st = torch_bridge::copy_output(r.o, out.at("o"), "o"); !st.ok()) return st;
    if (!final_state) return Status::Ok();  // cache=none: the final state is not looked at
    if (!r.final_state.defined()) return Status::Internal("final_state is not a tensor");
    return torch_bridge::copy_output(r.final_state, *final_state, "final_state");
  }

  // gdr_grad: the operator called on autograd leaves (the inputs are the leaves' own copies);
  // its outputs must have been recorded, or there is nothing to differentiate.
  Status call_recorded(const torch_bridge::GdrForwardInputs& x,
                       torch_bridge::GdrForwardOutputs& r) {
    torch_bridge::GdrForwardInputs copy = x;
    if (x.cu_seqlens) copy.cu_seqlens = x.cu_seqlens->clone();
    if (Status st = call_op(copy, r); !st.ok()) return st;
    if (r.o.numel() > 0 && !r.o.requires_grad())
      return Status::Unsupported("torch-op: op '" + op_ +
                                 "' returned an o that autograd did not record (its kernel is "
                                 "not differentiable: no autograd kernel)");
    if (x.final_state && !r.final_state.defined())
      return Status::Internal("final_state is not a tensor (the case has dht, its gradient)");
    return Status::Ok();
  }

  // Why gdr_grad cases cannot run on the operator, or "": it needs a kernel for autograd, one
  // registered under the Autograd key (TORCH_LIBRARY_IMPL(ns, Autograd, m)) or the device's
  // (AutogradCPU, AutogradCUDA), or a CompositeImplicitAutograd one (m.def with a function:
  // autograd goes through the ATen ops it calls). Without one, autograd would skip the operator
  // (LibTorch 1.13) or hand back no gradients with a warning (2.x).
  std::string no_autograd_kernel(const c10::Device& device) const {
    using c10::DispatchKey;
    const DispatchKey keys[] = {
        DispatchKey::Autograd,
        device.is_cuda() ? DispatchKey::AutogradCUDA : DispatchKey::AutogradCPU,
        DispatchKey::CompositeImplicitAutograd};
    for (DispatchKey k : keys)
      if (handle_->hasKernelForDispatchKey(k)) return "";
    return "torch-op: op '" + op_ +
           "' has no autograd kernel (register its backward with TORCH_LIBRARY_IMPL(ns, "
           "Autograd, m); docs/gradients.md)";
  }

  Status load() {
    std::call_once(load_once_, [&] { load_status_ = find_operator(); });
    return load_status_;
  }

  Status find_operator() {
    if (library_.empty())
      return Status::InvalidArgument(
          "torch-op: no --library given (the shared library that registers the operator)");
    if (op_.empty())
      return Status::InvalidArgument(
          "torch-op: no --op given (e.g. --op myns::chunk_gated_delta_rule)");
    const std::optional<c10::OperatorName> name = parse_op_name(op_);
    if (!name)
      return Status::InvalidArgument("torch-op: --op '" + op_ +
                                     "' is not a qualified operator name (ns::name)");
    // RTLD_GLOBAL: the library's kernels may themselves load libraries that need its symbols.
    // It is never closed: its registrations and kernels must outlive every call.
    dlerror();
    if (!dlopen(library_.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
      const char* why = dlerror();
      return Status::InvalidArgument("torch-op: cannot load library '" + library_ +
                                     "': " + (why ? why : "unknown dlopen error"));
    }
    const auto handle = c10::Dispatcher::singleton().findSchema(*name);
    if (!handle) {
      const std::string ns = op_.substr(0, op_.find("::"));
      const std::string there = operators_in_namespace(ns);
      return Status::InvalidArgument(
          "torch-op: no operator '" + op_ + "' registered after loading '" + library_ + "'" +
          (there.empty() ? " (nothing in namespace '" + ns + "')"
                         : " (namespace '" + ns + "' has: " + there + ")"));
    }
    const std::string mismatch = torch_op_convention_mismatch(handle->schema());
    if (!mismatch.empty()) {
      std::ostringstream s;
      s << handle->schema();
      return Status::InvalidArgument("torch-op: signature mismatch: " + s.str() + ": " + mismatch +
                                     "; the convention is " + kTorchOpGdrSignature);
    }
    handle_ = *handle;
    return Status::Ok();
  }

  const torch_bridge::DeviceChoice& device() const {
    std::call_once(device_once_, [&] { device_ = torch_bridge::choose_device(device_name_); });
    return device_;
  }

  std::string library_, op_, device_name_;
  PrecisionProfile profile_;
  bool deterministic_;
  bool batch_invariant_;
  std::once_flag load_once_;
  Status load_status_;
  std::optional<c10::OperatorHandle> handle_;
  mutable std::once_flag device_once_;
  mutable torch_bridge::DeviceChoice device_;
};

}  // namespace

std::unique_ptr<Backend> make_torch_op_backend(const BackendOptions& options) {
  return std::make_unique<TorchOpBackend>(options);
}

}  // namespace deltacheck::backends
