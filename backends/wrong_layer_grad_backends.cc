// Deliberately wrong backwards of the linear-attention layer (layer_grad cases), each reproducing a
// class of bug seen in real conv backward kernels (issue #21); tests/harness/test_grad_cases.cc
// asserts the verdict each one gets.
//   wrong:grad-conv-dweight-rows  the conv's dweight summed over the wrong rows: every sequence's
//                                 contribution read from the pack's first rows (its offset
//                                 dropped), as FLA's causal_conv1d backward read every batch
//                                 row's activations from row 0 with cu_seqlens and B > 1 (FLA
//                                 PR #955); everything else right
//   wrong:grad-conv-state-carry   the conv's context gradient carried across a boundary: the
//                                 gradient of the W-1 inputs before a sequence's first token goes
//                                 to the previous sequence's last tokens (as a conv backward that
//                                 ignores cu_seqlens computes it) instead of the sequence's own
//                                 d(initial conv state)
#include <cstring>
#include <vector>

#include "backends/backends.h"
#include "harness/op_names.h"
#include "harness/runner.h"
#include "ops/layer_grad/params.h"

namespace deltacheck::backends {
namespace {

class WrongLayerGradBackend : public Backend {
 public:
  bool deliberately_wrong() const override { return true; }
  Support supports(const cases::Case& c) const override {
    if (c.op() != "layer_grad") return Support::No(name() + " implements only layer_grad");
    return Support::Yes();
  }
};

class ConvDweightRows : public WrongLayerGradBackend {
 public:
  std::string name() const override { return "wrong:grad-conv-dweight-rows"; }
  std::string description() const override {
    return "deliberately wrong: the conv's dweight sums every sequence's contribution from the "
           "pack's first rows (its offset dropped; FLA PR #955)";
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    if (Status st = run_cpu_layer_grad_case(c, in, out); !st.ok()) return st;
    const cases::Tensor* cu = in.find("cu_seqlens");
    if (!cu) return Status::Ok();
    const int64_t n = cu->numel() - 1, *offs = cu->as<int64_t>();
    const cases::Tensor& qkv = in.at("qkv");
    const size_t row = qkv.nbytes() / static_cast<size_t>(qkv.shape()[1]);
    const Operation& op = operation_for(c);
    cases::Tensor& dw = out.at("dconv_weight");
    std::vector<double> sum(static_cast<size_t>(dw.numel()), 0.0);
    bool moved = false;
    for (int64_t s = 0; s < n; ++s) {
      const int64_t len = offs[s + 1] - offs[s];
      if (len == 0) continue;
      moved = moved || offs[s] > 0;
      // The sequence alone, with the conv input rows of the pack's first tokens.
      Repacked rp = repack(c, in, {{s, 0, len}});  // (without the padding tail)
      std::memcpy(rp.tensors.at("qkv").data(), qkv.data(), static_cast<size_t>(len) * row);
      cases::TensorMap o = allocate_outputs(op.outputs(rp.c));
      if (Status st = run_cpu_layer_grad_case(rp.c, rp.tensors, o); !st.ok()) return st;
      const cases::Tensor& part = o.at("dconv_weight");
      for (int64_t i = 0; i < part.numel(); ++i) sum[i] += part.get(i);
    }
    if (moved)  // a single sequence starts at row 0: its rows are the right ones
      for (int64_t i = 0; i < dw.numel(); ++i) dw.set(i, sum[i]);
    return Status::Ok();
  }
};

class ConvStateCarry : public WrongLayerGradBackend {
 public:
  std::string name() const override { return "wrong:grad-conv-state-carry"; }
  std::string description() const override {
    return "deliberately wrong: the conv's context gradient flows into the previous sequence's "
           "last tokens instead of the sequence's own d(initial conv state)";
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    const ops::layer::Params d = ops::layer_grad::decode(c).layer;
    const int64_t C = d.W - 1;
    // The context gradients are needed also where the case does not ask for them.
    cases::TensorMap work;
    for (const cases::Tensor& t : out.all()) work.add(t);
    if (!work.find("dinitial_conv_state"))
      work.add(cases::Tensor("dinitial_conv_state", cases::DType::kF32, {d.N, d.D, C}));
    if (Status st = run_cpu_layer_grad_case(c, in, work); !st.ok()) return st;
    if (const cases::Tensor* cu = in.find("cu_seqlens")) {
      const int64_t* offs = cu->as<int64_t>();
      cases::Tensor& dx = work.at("dqkv");
      float* dc0 = work.at("dinitial_conv_state").as<float>();
      // Last sequence first, so that a context reaching through a short sequence goes on back.
      for (int64_t s = d.N - 1; s >= 1; --s) {
        const int64_t prev_len = offs[s] - offs[s - 1];
        for (int64_t ch = 0; ch < d.D; ++ch)
          for (int64_t j = 0; j < C; ++j) {
            float& carried = dc0[(s * d.D + ch) * C + j];
            const int64_t pos = prev_len - C + j;  // in the previous sequence
            if (pos >= 0) {
              const int64_t i = (offs[s - 1] + pos) * d.D + ch;
              dx.set(i, dx.get(i) + carried);
            } else {
              dc0[((s - 1) * d.D + ch) * C + C + pos] += carried;
            }
            carried = 0.0f;
          }
      }
    }
    for (cases::Tensor& t : out.all()) std::memcpy(t.data(), work.at(t.name()).data(), t.nbytes());
    return Status::Ok();
  }
};

}  // namespace

std::vector<std::unique_ptr<Backend>> make_wrong_layer_grad_backends() {
  std::vector<std::unique_ptr<Backend>> v;
  v.push_back(std::make_unique<ConvDweightRows>());
  v.push_back(std::make_unique<ConvStateCarry>());
  return v;
}

}  // namespace deltacheck::backends
