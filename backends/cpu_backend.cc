// Backend "cpu": the project's chunked CPU kernels.
#include "backends/backends.h"
#include "backends/mask_builders.h"
#include "backends/ssd_backends.h"
#include "kernels/cpu/gated_delta_rule.h"
#include "ops/gdr/problem.h"

namespace deltacheck::backends {
namespace {

class CpuBackend : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  std::string description() const override {
    return "chunked CPU kernels (fp32 accumulation, chunk 64, threaded over sequence x head)";
  }
  Support supports(const cases::Case& c) const override {
    if (c.op() == "gdr" || c.op() == "gdr_grad" || c.op() == "layer" || c.op() == "layer_grad" ||
        c.op() == "ssd")
      return Support::Yes();
    if (is_mask_case(c)) return Support::Yes();  // kernels/cpu/mask_builder
    return Support::No("cpu backend has no kernel for op '" + c.op() + "'");
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    if (is_mask_case(c)) return run_cpu_mask_case(c, in, out);
    if (c.op() == "layer") return run_cpu_layer_case(c, in, out);
    if (c.op() == "gdr_grad") return run_cpu_gdr_grad_case(c, in, out);
    if (c.op() == "layer_grad") return run_cpu_layer_grad_case(c, in, out);
    if (c.op() == "ssd") return run_cpu_ssd_case(c, in, out);
    return run_cpu_gdr_case(c, in, out);
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace deltacheck::backends
