// The false-positive panel: deliberately correct backends, each an independent formulation of the
// rule that correct implementations in real use follow (docs/panel.md). Every one must pass the
// full suite with probes in every dtype and gate regime; a non-pass is a false positive of the
// harness (tests/harness/test_false_positive_panel.cc).
//   right:recurrent     the token recurrence, fp32 state and arithmetic
//   right:chunked       chunked (chunk 64), chunk-local cumulative gates, WY/UT solve, all fp32
//   right:chunked-lowp  right:chunked with every matmul operand rounded to the activation dtype
//                       and fp32 accumulation, as tensor-core kernels compute
//   right:chunked-cumsum  right:chunked with each prefix sum of the gates rounded on its own
//                       (jnp.cumsum, torch.cumsum on a CPU): in the default profile
//   right:chunked128    right:chunked by chunks of 128, declaring the profile chunk=128
//   right:chunked-l2act right:chunked with the q/k L2 norm in the activation dtype, declaring
//                       l2norm=act (Transformers 4.57)
// Each declares the precision profile it computes with (docs/tolerance.md, "Precision
// profiles"); right:recurrent declares operands=fp32 (fp32 state and operands).
#include "backends/backends.h"

#include "backends/right/panel.h"
#include "backends/ssd_backends.h"

namespace deltacheck::backends {
namespace {

using right::Formulation;

class RightBackend : public Backend {
 public:
  RightBackend(std::string name, std::string description, Formulation f,
               const std::string& profile = "fp32")
      : name_(std::move(name)),
        description_(std::move(description)),
        f_(f),
        profile_(harness::profile_from_name(profile)) {}
  std::string name() const override { return name_; }
  std::string description() const override { return description_; }
  bool deliberately_correct() const override { return true; }
  PrecisionProfile precision_profile() const override { return profile_; }
  Support supports(const cases::Case& c) const override {
    if (c.op() == "gdr" || c.op() == "layer") return Support::Yes();
    return Support::No("right:* implement gdr and layer only");
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    if (c.op() == "layer") return right::run_layer(f_, c, in, out);
    return right::run_gdr(f_, c, in, out);
  }

 private:
  std::string name_, description_;
  Formulation f_;
  PrecisionProfile profile_;
};

}  // namespace

std::vector<std::unique_ptr<Backend>> make_right_backends() {
  std::vector<std::unique_ptr<Backend>> v;
  v.push_back(std::make_unique<RightBackend>("right:recurrent",
                                             "the token recurrence, fp32 state and arithmetic",
                                             Formulation::kRecurrent, "operands=fp32"));
  v.push_back(std::make_unique<RightBackend>(
      "right:chunked", "chunked (64), chunk-local cumulative gates, WY/UT solve, all fp32",
      Formulation::kChunked));
  v.push_back(std::make_unique<RightBackend>(
      "right:chunked-lowp",
      "right:chunked with matmul operands in the activation dtype, fp32 accumulation "
      "and state (as tensor-core kernels)",
      Formulation::kChunkedLowp));
  v.push_back(std::make_unique<RightBackend>(
      "right:chunked-cumsum",
      "right:chunked with each prefix sum of the gates rounded on its own (jnp.cumsum)",
      Formulation::kChunkedCumsum));
  v.push_back(std::make_unique<RightBackend>(
      "right:chunked128", "right:chunked by chunks of 128 (declares --profile chunk=128)",
      Formulation::kChunked128, "chunk=128"));
  v.push_back(std::make_unique<RightBackend>(
      "right:chunked-l2act",
      "right:chunked with the q/k L2 norm in the activation dtype (declares l2norm=act)",
      Formulation::kChunkedNormAct, "l2norm=act"));
  for (auto& b : make_right_ssd_backends()) v.push_back(std::move(b));  // right:ssd-*
  return v;
}

}  // namespace deltacheck::backends
