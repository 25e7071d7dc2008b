// Backend "cuda": the kernels of kernels/cuda behind the Backend interface. What it supports is
// decided in two steps: a usable device (checked once, on first use: listing the backends must
// not initialize CUDA), then whether kernels/cuda has a kernel for the case (cuda_kernels_support,
// from the case alone, asking the kernels' own can_implement where there is one).
#include "backends/cuda/cuda_backend.h"

#include <mutex>
#include <string>

#include "cases/case.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/gated_delta_rule.h"
#include "kernels/cuda/gated_delta_rule_backward.h"
#include "ops/gdr/problem.h"
#include "ops/gdr_grad/params.h"
#include "ops/mask/params.h"

namespace deltacheck::backends {
namespace {

// gdr: every cache mode. chunked and dynamic reach run() as the prefill and decode calls the
// harness drives (harness/call_plan.h); the shapes must suit the kernels.
// The kernels' own host-side checks run on placeholder pointers (they read only shapes, dtype
// and which pointers are set).
const char kPlaceholder = 0;

kernels::GatedDeltaRuleParams placeholder_params(const ops::gdr::Params& d) {
  kernels::GatedDeltaRuleParams p = ops::gdr::kernel_dims(d);
  p.q = p.k = p.v = p.beta = &kPlaceholder;
  p.g = reinterpret_cast<const float*>(&kPlaceholder);
  p.o = const_cast<char*>(&kPlaceholder);
  if (d.layout.has_cu_seqlens()) {
    p.cu_seqlens = reinterpret_cast<const int64_t*>(&kPlaceholder);
    p.num_seqs = d.N;
  }
  return p;
}

Support from_status(const Status& st) {
  if (!st.ok()) return Support::No("kernels/cuda: " + st.message());
  return Support::Yes();
}

Support gdr_support(const cases::Case& c) {
  return from_status(kernels::cuda::gated_delta_rule_can_implement(
      placeholder_params(ops::gdr::decode(c))));  // every cache mode
}

// gdr_grad, cp=S included: its ranks' calls are plain gdr_grad cases of the same shapes.
Support gdr_grad_support(const cases::Case& c) {
  kernels::GatedDeltaRuleBackwardParams b;
  b.forward = placeholder_params(ops::gdr_grad::decode(c).rule);
  b.d_output = b.dq = b.dk = b.dv = b.dbeta = const_cast<char*>(&kPlaceholder);
  b.dg = reinterpret_cast<float*>(const_cast<char*>(&kPlaceholder));
  return from_status(kernels::cuda::gated_delta_rule_backward_can_implement(b));
}

Support mask_support(const cases::Case& c) {
  using ops::mask::Format;
  using ops::mask::Source;
  const ops::mask::Params d = ops::mask::decode(c);
  if (d.op == ops::mask::Op::kMask) {
    if (d.format == Format::kBool) return Support::Yes();
    return Support::No(std::string("kernels/cuda builds boolean masks only (format=") +
                       ops::mask::kFormatNames[static_cast<size_t>(d.format)] + ")");
  }
  if (d.op == ops::mask::Op::kSegments) {
    if (d.source == Source::kPosition) return Support::Yes();
    return Support::No(
        std::string("kernels/cuda derives segments from position_ids only (source=") +
        ops::mask::kSourceNames[static_cast<size_t>(d.source)] + ")");
  }
  return Support::No("kernels/cuda has no per-layer-type mask builder (op '" + c.op() + "')");
}

class CudaBackend : public Backend {
 public:
  std::string name() const override { return "cuda"; }
  std::string description() const override {
    return "CUDA kernels (kernels/cuda): chunked gated delta rule (prefill, pool), recurrent "
           "decode (decode, spec), recurrent backward (gdr_grad), boolean masks, segments from "
           "position_ids";
  }

  Support supports(const cases::Case& c) const override {
    if (const Status& device = device_status(); !device.ok()) return Support::No(device.message());
    return cuda_kernels_support(c);
  }

  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    if (const Status& device = device_status(); !device.ok()) return device;
    if (const Support s = cuda_kernels_support(c); !s.ok) return Status::Unsupported(s.reason);
    if (c.op() == "gdr") return run_cuda_gdr_case(c, in, out);
    if (c.op() == "gdr_grad") return run_cuda_gdr_grad_case(c, in, out);
    return run_cuda_mask_case(c, in, out);
  }

 private:
  // Unsupported("no CUDA device: <why>") where there is none; asked once, on first use.
  const Status& device_status() const {
    std::call_once(device_once_, [&] { device_ = kernels::cuda::cuda_device_available(); });
    return device_;
  }

  mutable std::once_flag device_once_;
  mutable Status device_;
};

}  // namespace

Support cuda_kernels_support(const cases::Case& c) {
  if (c.op() == "gdr") return gdr_support(c);
  if (c.op() == "gdr_grad") return gdr_grad_support(c);
  if (c.op() == "mask" || c.op() == "segments" || c.op() == "layers") return mask_support(c);
  if (c.op() == "layer")
    return Support::No(
        "kernels/cuda has no gates or output norm kernels for the layer op (only the rule and the "
        "conv)");
  return Support::No("cuda backend has no kernel for op '" + c.op() + "'");
}

std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<CudaBackend>(); }

void register_cuda_backends() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_backend_factory([](const BackendOptions&) {
      std::vector<std::unique_ptr<Backend>> v;
      v.push_back(make_cuda_backend());
      return v;
    });
  });
}

}  // namespace deltacheck::backends
