// Deliberately wrong handling of the layer's serving state (docs/serving.md, "The layer's serving
// state"), each a bug reported in 2026; tests/harness/test_layer_serving_verdicts.cc pins the
// verdict each gets in the gate. Each runs the cpu backend on inputs the bug would have read:
//   wrong:layer-conv-offset        cache=accept: the conv window read at the offset of a full
//                                  acceptance (columns T-1 ..) whatever was accepted, the recurrent
//                                  state from the right row (vllm#39273)
//   wrong:layer-accept-clamped     cache=accept: num_accepted_tokens clamped to the conv width
//                                  W-1, for the conv window and the recurrent row alike
//                                  (xllm#2247: wrong state with >= W accepted)
//   wrong:layer-dirty-slot         cache=pool: a one-token sequence without an initial state is
//                                  classified as a decode and reads its recycled row
//                                  (vllm#51562)
//   wrong:conv-update-no-shift     a call of one token: causal_conv1d_update writes the token
//                                  into the newest column without shifting the older ones
//   wrong:layer-ckpt-conv-stale    cache=ckpt: only the recurrent state is checkpointed; the
//                                  checkpoint rows' conv states keep what the rows held (only the
//                                  running block's row gets its conv state)
//   wrong:layer-spec-conv-last     cache=spec: every token's conv state is the last token's (the
//                                  per-token conv states not kept, the final one copied)
#include <algorithm>

#include "backends/backends.h"
#include "ops/layer/params.h"

namespace deltacheck::backends {
namespace {

using ops::layer::Cache;

class WrongLayerServing : public Backend {
 public:
  WrongLayerServing(std::string name, std::string description, Cache mode)
      : name_(std::move(name)), description_(std::move(description)), mode_(mode) {}
  std::string name() const override { return name_; }
  std::string description() const override { return "deliberately wrong: " + description_; }
  bool deliberately_wrong() const override { return true; }
  Support supports(const cases::Case& c) const override {
    if (c.op() == "layer" && ops::layer::decode(c).cache == mode_) return Support::Yes();
    return Support::No(std::string("layer cache=") +
                       ops::layer::kCacheNames[static_cast<int>(mode_)] + " only");
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    cases::TensorMap wrong = in;
    misread(ops::layer::decode(c), wrong);
    return run_cpu_layer_case(c, wrong, out);
  }

 protected:
  // Rewrites the inputs into what the bug reads.
  virtual void misread(const ops::layer::Params& d, cases::TensorMap& in) const = 0;

 private:
  std::string name_, description_;
  Cache mode_;
};

class ConvOffset : public WrongLayerServing {
 public:
  ConvOffset()
      : WrongLayerServing("wrong:layer-conv-offset",
                          "the conv window read as after a full acceptance (columns T-1 ..) "
                          "whatever was accepted (vllm#39273)",
                          Cache::kAccept) {}
  void misread(const ops::layer::Params& d, cases::TensorMap& in) const override {
    const int64_t T = d.layout.lengths[0];
    cases::Tensor& conv = in.at("conv_state_pool");
    const int64_t cols = conv.shape()[2];
    const int32_t* idx = in.at("state_indices").as<int32_t>();
    const int32_t* acc = in.at("num_accepted_tokens").as<int32_t>();
    float* rows = conv.as<float>();
    for (int64_t s = 0; s < d.N; ++s) {
      float* row = rows + idx[s * T] * d.D * cols;
      for (int64_t ch = 0; ch < d.D; ++ch)
        for (int64_t j = 0; j < d.W - 1; ++j)
          row[ch * cols + acc[s] - 1 + j] = row[ch * cols + T - 1 + j];
    }
  }
};

class AcceptClamped : public WrongLayerServing {
 public:
  AcceptClamped()
      : WrongLayerServing("wrong:layer-accept-clamped",
                          "num_accepted_tokens clamped to the conv width W-1 for the conv window "
                          "and the recurrent row (xllm#2247)",
                          Cache::kAccept) {}
  void misread(const ops::layer::Params& d, cases::TensorMap& in) const override {
    cases::Tensor& acc = in.at("num_accepted_tokens");
    for (int64_t s = 0; s < acc.numel(); ++s)
      acc.as<int32_t>()[s] = std::min<int32_t>(acc.as<int32_t>()[s], static_cast<int32_t>(d.W - 1));
  }
};

class DirtySlot : public WrongLayerServing {
 public:
  DirtySlot()
      : WrongLayerServing("wrong:layer-dirty-slot",
                          "a one-token sequence without an initial state taken as a decode: it "
                          "reads its recycled row (vllm#51562)",
                          Cache::kPool) {}
  void misread(const ops::layer::Params& d, cases::TensorMap& in) const override {
    int32_t* has = in.at("has_initial_state").as<int32_t>();
    for (int64_t s = 0; s < d.N; ++s)
      if (d.layout.lengths[s] == 1) has[s] = 1;
  }
};

class ConvNoShift : public Backend {
 public:
  std::string name() const override { return "wrong:conv-update-no-shift"; }
  std::string description() const override {
    return "deliberately wrong: a call of one token writes it into the conv state's newest "
           "column without shifting the older ones";
  }
  bool deliberately_wrong() const override { return true; }
  Support supports(const cases::Case& c) const override {
    if (c.op() == "layer" && ops::layer::decode(c).states() && !ops::layer::decode(c).serving())
      return Support::Yes();
    return Support::No("layer cases that carry a conv state, outside the pools");
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    if (Status st = run_cpu_layer_case(c, in, out); !st.ok()) return st;
    const cases::Tensor& qkv = in.at("qkv");
    cases::Tensor* conv = out.find("final_conv_state");
    if (qkv.shape()[1] != 1 || !conv) return Status::Ok();
    const int64_t D = qkv.shape()[2], cols = conv->shape()[2];
    const cases::Tensor* before = in.find("initial_conv_state");
    for (int64_t ch = 0; ch < D; ++ch) {
      for (int64_t j = 0; j + 1 < cols; ++j)
        conv->set(ch * cols + j, before ? before->get(ch * cols + j) : 0.0);
      conv->set(ch * cols + cols - 1, qkv.get(ch));
    }
    return Status::Ok();
  }
};

class CkptConvStale : public WrongLayerServing {
 public:
  CkptConvStale()
      : WrongLayerServing("wrong:layer-ckpt-conv-stale",
                          "block checkpoints of the recurrent state only: the conv rows of the "
                          "checkpoints keep what they held",
                          Cache::kCkpt) {}
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    if (Status st = run_cpu_layer_case(c, in, out); !st.ok()) return st;
    const ops::layer::Params d = ops::layer::decode(c);
    const cases::Tensor& table = in.at("block_slots");
    const cases::Tensor& before = in.at("conv_state_pool");
    cases::Tensor& after = out.at("conv_state_pool");
    const int64_t cols = table.shape()[1], per = d.D * (d.W - 1);
    for (int64_t s = 0; s < d.N; ++s) {
      const int64_t blocks = (d.layout.lengths[s] + d.calls - 1) / d.calls;
      for (int64_t b = 0; b + 1 < blocks; ++b) {  // every block but the running state's
        const int64_t row = table.as<int32_t>()[s * cols + b];
        std::copy_n(before.as<float>() + row * per, per, after.as<float>() + row * per);
      }
    }
    return Status::Ok();
  }
  void misread(const ops::layer::Params&, cases::TensorMap&) const override {}
};

class SpecConvLast : public WrongLayerServing {
 public:
  SpecConvLast()
      : WrongLayerServing("wrong:layer-spec-conv-last",
                          "multi-token decode: every token's conv state is the last token's",
                          Cache::kSpec) {}
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    if (Status st = run_cpu_layer_case(c, in, out); !st.ok()) return st;
    cases::Tensor& tc = out.at("token_conv_states");
    const int64_t T = tc.shape()[1], per = tc.numel() / (tc.shape()[0] * T);
    float* v = tc.as<float>();
    for (int64_t s = 0; s < tc.shape()[0]; ++s)
      for (int64_t t = 0; t + 1 < T; ++t)
        std::copy_n(v + (s * T + T - 1) * per, per, v + (s * T + t) * per);
    return Status::Ok();
  }
  void misread(const ops::layer::Params&, cases::TensorMap&) const override {}
};

}  // namespace

std::vector<std::unique_ptr<Backend>> make_wrong_layer_serving_backends() {
  std::vector<std::unique_ptr<Backend>> v;
  v.push_back(std::make_unique<ConvOffset>());
  v.push_back(std::make_unique<AcceptClamped>());
  v.push_back(std::make_unique<DirtySlot>());
  v.push_back(std::make_unique<ConvNoShift>());
  v.push_back(std::make_unique<CkptConvStale>());
  v.push_back(std::make_unique<SpecConvLast>());
  return v;
}

}  // namespace deltacheck::backends
