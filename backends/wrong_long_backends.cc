// A deliberately wrong kernel whose bug shows only on long sequences (docs/cases.md#long-context):
//   wrong:resume-zero-beyond-16k  a call that resumes a sequence from a state (prefill with an
//                                 initial state, each later piece of a chunked prefill) takes a
//                                 long-prompt path when the sequence holds more than 16384 tokens
//                                 in that call, and that path starts from a zero state instead
//                                 (sparkinfer#1071: "resumed prefill started from a zero state",
//                                 found past the 32K tokens where the accuracy gates stopped)
// Up to 16384 tokens a call it is the cpu backend, bit for bit, so every shorter case passes; the
// gdr and layer cases with a longer sequence in one call catch it, in every cache mode that
// resumes from a state (prefill, chunked, dynamic: the harness makes the calls).
#include <cstring>

#include "backends/backends.h"
#include "ops/gdr/params.h"
#include "ops/layer/params.h"

namespace deltacheck::backends {
namespace {

class ResumeZeroBeyond : public Backend {
 public:
  explicit ResumeZeroBeyond(int64_t threshold) : threshold_(threshold) {}
  std::string name() const override { return "wrong:resume-zero-beyond-16k"; }
  std::string description() const override {
    return "deliberately wrong: a call resumed from a state whose sequence holds more than " +
           std::to_string(threshold_) + " tokens starts from a zero state (sparkinfer#1071)";
  }
  bool deliberately_wrong() const override { return true; }
  Support supports(const cases::Case& c) const override {
    if (c.op() == "layer") return Support::Yes();
    return gdr_calls_support(name(), c);
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    const bool layer = c.op() == "layer";
    const std::vector<int64_t> lengths =
        layer ? ops::layer::decode(c).layout.lengths : ops::gdr::decode(c).layout.lengths;
    const cases::Tensor* s0 = in.find("initial_state");
    bool long_call = false;
    for (int64_t len : lengths) long_call = long_call || len > threshold_;
    if (!s0 || !long_call)
      return layer ? run_cpu_layer_case(c, in, out) : run_cpu_gdr_case(c, in, out);
    // The long-prompt path: the recurrent state of every long sequence starts from zeros (the
    // layer's conv state is still read: only the recurrence takes the other path).
    cases::TensorMap zeroed = in;
    cases::Tensor& t = zeroed.at("initial_state");
    const size_t per = t.nbytes() / static_cast<size_t>(lengths.size());
    for (size_t s = 0; s < lengths.size(); ++s)
      if (lengths[s] > threshold_) std::memset(static_cast<uint8_t*>(t.data()) + s * per, 0, per);
    return layer ? run_cpu_layer_case(c, zeroed, out) : run_cpu_gdr_case(c, zeroed, out);
  }

 private:
  int64_t threshold_;
};

}  // namespace

std::vector<std::unique_ptr<Backend>> make_wrong_long_backends() {
  std::vector<std::unique_ptr<Backend>> v;
  v.push_back(std::make_unique<ResumeZeroBeyond>(16384));
  return v;
}

}  // namespace deltacheck::backends
