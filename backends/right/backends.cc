// The false-positive panel: deliberately correct backends, each an independent formulation of the
// rule that correct implementations in real use follow (docs/panel.md). Every one must pass the
// full suite with probes in every dtype and gate regime; a non-pass is a false positive of the
// harness (tests/harness/test_false_positive_panel.cc).
//   right:recurrent     the token recurrence, fp32 state and arithmetic
//   right:chunked       chunked (chunk 64), chunk-local cumulative gates, WY/UT solve, all fp32
//   right:chunked-lowp  right:chunked with every matmul operand rounded to the activation dtype
//                       and fp32 accumulation, as tensor-core kernels compute
#include "backends/backends.h"

#include "backends/right/panel.h"

namespace deltacheck::backends {
namespace {

using right::Formulation;

class RightBackend : public Backend {
 public:
  RightBackend(std::string name, std::string description, Formulation f)
      : name_(std::move(name)), description_(std::move(description)), f_(f) {}
  std::string name() const override { return name_; }
  std::string description() const override { return description_; }
  bool deliberately_correct() const override { return true; }
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
};

}  // namespace

std::vector<std::unique_ptr<Backend>> make_right_backends() {
  std::vector<std::unique_ptr<Backend>> v;
  v.push_back(std::make_unique<RightBackend>("right:recurrent",
                                             "the token recurrence, fp32 state and arithmetic",
                                             Formulation::kRecurrent));
  v.push_back(std::make_unique<RightBackend>(
      "right:chunked", "chunked (64), chunk-local cumulative gates, WY/UT solve, all fp32",
      Formulation::kChunked));
  v.push_back(std::make_unique<RightBackend>(
      "right:chunked-lowp",
      "right:chunked with matmul operands in the activation dtype, fp32 accumulation "
      "and state (as tensor-core kernels)",
      Formulation::kChunkedLowp));
  return v;
}

}  // namespace deltacheck::backends
