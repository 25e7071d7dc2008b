// Deliberately wrong implementations. They exist to prove the harness can fail: each reproduces a
// bug seen in real implementations, and the tests assert the verdict each one gets.
//   wrong:ignore-cu-seqlens  the packed row is treated as one sequence: state flows from each
//                            sequence into the next (the Qwen3.5 padding-free bug)
//   wrong:drop-initial-state sequences after the first start from zero instead of their state
//   wrong:row-chunk-grid     chunks are laid on the row, not per sequence; a sequence boundary
//                            inside a chunk does not reset the state (aligned boundaries do)
//   wrong:readout-before-update  o_t = S_{t-1}^T q_t (off by one token in the read-out)
//   wrong:ignore-state       every initial state ignored
// The wrong mask builders (wrong:mask-*) are in wrong_mask_backends.cc, the wrong backwards
// (wrong:grad-*) in wrong_grad_backends.cc, the bugs of an input regime (wrong:rounded-stk,
// wrong:l2norm-max-eps) in wrong_regime_backends.cc, the biased output stores
// (wrong:truncated-store, wrong:round-up-store) in wrong_rounding_backends.cc.
#include <cstring>
#include <vector>

#include "backends/backends.h"
#include "backends/mask_builders.h"
#include "backends/ssd_backends.h"
#include "kernels/cpu/gated_delta_rule.h"
#include "ops/gdr/problem.h"

namespace deltacheck::backends {
namespace {

using kernels::GatedDeltaRuleParams;

class WrongBackend : public Backend {
 public:
  bool deliberately_wrong() const override { return true; }
  Support supports(const cases::Case& c) const override { return gdr_calls_support(name(), c); }
};

// Runs the sequences one after another, each a one-sequence call of the chunked kernel whose
// initial state is chosen by `initial_for(i, carried)`.
template <typename InitialFor>
Status run_sequences(const GatedDeltaRuleParams& p, InitialFor initial_for) {
  const int64_t n = p.cu_seqlens ? p.num_seqs : p.batch;
  const int64_t per = p.num_value_heads * p.key_dim * p.value_dim;
  std::vector<float> carried(static_cast<size_t>(per), 0.0f), next(static_cast<size_t>(per));
  const int64_t es = dtype_size(p.dtype);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t begin = p.cu_seqlens ? p.cu_seqlens[i] : i * p.seq_len;
    const int64_t len = p.cu_seqlens ? p.cu_seqlens[i + 1] - begin : p.seq_len;
    GatedDeltaRuleParams s = p;
    s.batch = 1;
    s.seq_len = len;
    s.cu_seqlens = nullptr;
    s.state_slots = nullptr;
    s.num_state_rows = 0;
    auto off = [&](const void* base, int64_t per_token, int64_t size) {
      return static_cast<const char*>(base) + begin * per_token * size;
    };
    s.q = off(p.q, p.num_heads * p.key_dim, es);
    s.k = off(p.k, p.num_heads * p.key_dim, es);
    s.v = off(p.v, p.num_value_heads * p.value_dim, es);
    s.g = p.g + begin * p.num_value_heads;
    s.beta = off(p.beta, p.num_value_heads, es);
    s.o = static_cast<char*>(p.o) + begin * p.num_value_heads * p.value_dim * es;
    const float* own = p.initial_state ? p.initial_state + i * per : nullptr;
    s.initial_state = initial_for(i, own, carried.data());
    s.final_state = next.data();
    if (Status st = kernels::cpu::chunked_gated_delta_rule(s); !st.ok()) return st;
    carried.swap(next);
    if (p.final_state) std::memcpy(p.final_state + i * per, carried.data(), per * sizeof(float));
  }
  return Status::Ok();
}

class IgnoreCuSeqlens : public WrongBackend {
 public:
  std::string name() const override { return "wrong:ignore-cu-seqlens"; }
  std::string description() const override {
    return "deliberately wrong: ignores cu_seqlens, state carried across packed sequences";
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    const GatedDeltaRuleParams p = ops::gdr::kernel_params(c, in, out);
    if (!p.cu_seqlens) return kernels::cpu::chunked_gated_delta_rule(p);  // batch rows are separate
    return run_sequences(p, [](int64_t i, const float* own, const float* carried) {
      return i == 0 ? own : carried;
    });
  }
};

class DropInitialState : public WrongBackend {
 public:
  std::string name() const override { return "wrong:drop-initial-state"; }
  std::string description() const override {
    return "deliberately wrong: sequences after the first start from a zero state";
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    const GatedDeltaRuleParams p = ops::gdr::kernel_params(c, in, out);
    return run_sequences(
        p, [](int64_t i, const float* own, const float*) { return i == 0 ? own : nullptr; });
  }
};

class IgnoreState : public WrongBackend {
 public:
  std::string name() const override { return "wrong:ignore-state"; }
  std::string description() const override {
    return "deliberately wrong: every initial state ignored (starts from zero)";
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    GatedDeltaRuleParams p = ops::gdr::kernel_params(c, in, out);
    p.initial_state = nullptr;
    return kernels::cpu::chunked_gated_delta_rule(p);
  }
};

class RowChunkGrid : public WrongBackend {
 public:
  std::string name() const override { return "wrong:row-chunk-grid"; }
  std::string description() const override {
    return "deliberately wrong: chunk grid anchored at the row start; state resets only at "
           "boundaries that fall on a chunk edge";
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    const GatedDeltaRuleParams p = ops::gdr::kernel_params(c, in, out);
    if (!p.cu_seqlens) return kernels::cpu::chunked_gated_delta_rule(p);
    return run_sequences(p, [&](int64_t i, const float* own, const float* carried) {
      const bool aligned = p.cu_seqlens[i] % p.chunk_size == 0;
      return i == 0 || aligned ? own : carried;
    });
  }
};

class ReadoutBeforeUpdate : public WrongBackend {
 public:
  std::string name() const override { return "wrong:readout-before-update"; }
  std::string description() const override {
    return "deliberately wrong: reads o_t from the state before token t's update (off by one)";
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    const GatedDeltaRuleParams p = ops::gdr::kernel_params(c, in, out);
    // o_t = S_{t-1}^T q_t with S_{t-1} the state after token t-1: equal to running the kernel on
    // the sequence shifted by one token with q_t paired to the earlier state. Implemented by
    // running the one-token recurrence with beta = 0 for the read-out, token by token.
    const int64_t n = p.cu_seqlens ? p.num_seqs : p.batch;
    const int64_t per = p.num_value_heads * p.key_dim * p.value_dim;
    const int64_t es = dtype_size(p.dtype);
    const int64_t HV = p.num_value_heads;
    std::vector<float> state(static_cast<size_t>(per)), zero_g(static_cast<size_t>(HV), 0.0f);
    std::vector<char> zero_beta(static_cast<size_t>(HV * es), 0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t begin = p.cu_seqlens ? p.cu_seqlens[i] : i * p.seq_len;
      const int64_t len = p.cu_seqlens ? p.cu_seqlens[i + 1] - begin : p.seq_len;
      if (p.initial_state)
        std::memcpy(state.data(), p.initial_state + i * per, per * sizeof(float));
      else
        std::fill(state.begin(), state.end(), 0.0f);
      for (int64_t t = begin; t < begin + len; ++t) {
        GatedDeltaRuleParams s = p;
        s.batch = 1;
        s.seq_len = 1;
        s.cu_seqlens = nullptr;
        s.state_slots = nullptr;
        s.num_state_rows = 0;
        s.q = static_cast<const char*>(p.q) + t * p.num_heads * p.key_dim * es;
        s.k = static_cast<const char*>(p.k) + t * p.num_heads * p.key_dim * es;
        s.v = static_cast<const char*>(p.v) + t * HV * p.value_dim * es;
        s.o = static_cast<char*>(p.o) + t * HV * p.value_dim * es;
        s.num_threads = 1;
        // Read-out with the state as it was (no decay, no update) ...
        s.g = zero_g.data();
        s.beta = zero_beta.data();
        s.initial_state = state.data();
        s.final_state = nullptr;
        if (Status st = kernels::cpu::recurrent_gated_delta_rule(s); !st.ok()) return st;
        // ... then the real update, whose output is discarded.
        std::vector<char> scratch_o(static_cast<size_t>(HV * p.value_dim * es));
        s.o = scratch_o.data();
        s.g = p.g + t * HV;
        s.beta = static_cast<const char*>(p.beta) + t * HV * es;
        s.final_state = state.data();
        if (Status st = kernels::cpu::recurrent_gated_delta_rule(s); !st.ok()) return st;
      }
      if (p.final_state) std::memcpy(p.final_state + i * per, state.data(), per * sizeof(float));
    }
    return Status::Ok();
  }
};

}  // namespace

Support gdr_calls_support(const std::string& name, const cases::Case& c) {
  if (c.op() != "gdr") return Support::No(name + " implements only gdr");
  const ops::gdr::Params d = ops::gdr::decode(c);
  if (d.pooled()) return Support::No(name + " has no pooled-state mode");
  if (d.serving()) return Support::No(name + " has no serving mode (cache=ckpt, accept, tree)");
  return Support::Yes();
}

std::vector<std::unique_ptr<Backend>> make_wrong_backends() {
  std::vector<std::unique_ptr<Backend>> v;
  v.push_back(std::make_unique<IgnoreCuSeqlens>());
  v.push_back(std::make_unique<DropInitialState>());
  v.push_back(std::make_unique<RowChunkGrid>());
  v.push_back(std::make_unique<ReadoutBeforeUpdate>());
  v.push_back(std::make_unique<IgnoreState>());
  for (auto& b : make_wrong_mask_backends()) v.push_back(std::move(b));    // mask builders
  for (auto& b : make_wrong_cache_backends()) v.push_back(std::move(b));   // state between calls
  for (auto& b : make_wrong_serve_backends()) v.push_back(std::move(b));   // serving runtimes
  for (auto& b : make_wrong_regime_backends()) v.push_back(std::move(b));  // input regimes
  for (auto& b : make_wrong_long_backends()) v.push_back(std::move(b));    // long sequences
  // output stores rounded one way
  for (auto& b : make_wrong_rounding_backends()) v.push_back(std::move(b));
  for (auto& b : make_wrong_grad_backends()) v.push_back(std::move(b));  // backwards
  for (auto& b : make_wrong_layer_grad_backends()) v.push_back(std::move(b));
  // The layer's serving state (wrong_layer_serving_backends.cc).
  for (auto& b : make_wrong_layer_serving_backends()) v.push_back(std::move(b));
  for (auto& b : make_wrong_ssd_backends()) v.push_back(std::move(b));  // Mamba2 SSD
  return v;
}

}  // namespace deltacheck::backends
