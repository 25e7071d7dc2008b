// Deliberately wrong backwards of the gated delta rule (gdr_grad cases), each reproducing a class
// of bug seen in real backward kernels (issue #21); tests/harness/test_grad_cases.cc asserts the
// verdict each one gets.
//   wrong:grad-carry-state      the state gradient flows across a packed boundary: a sequence
//                               ends with the next sequence's dh0 added to its own dht
//   wrong:grad-dh0-seq0         every sequence gets sequence 0's dh0
//   wrong:grad-tail-unwritten   gradients of tokens past cu_seqlens[-1] left unwritten (FLA's
//                               low-level varlen kernels)
//   wrong:grad-rows-past-first  B > 1: rows past the first read the gate of row 0 (a missing
//                               batch offset; unsloth-zoo #776, FLA #1115)
//   wrong:grad-dg-cumulative    dg by the cancellation form: per chunk, a reverse cumulative sum
//                               in fp32 of o.do - v.dv (FLA's q.dq - k.dk for linear attention;
//                               FlashQLA #28): exact in real arithmetic, off under strong decay,
//                               where dg is small against the terms it is summed from
//   wrong:grad-cp-gate          context parallelism (cp cases): every rank but the last loads
//                               the gate without its head offset (each value head reads head
//                               0's), as FLA #1115's CP backward; one-call cases are right
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/backends.h"
#include "kernels/cpu/gated_delta_rule_backward.h"
#include "ops/gdr_grad/context_parallel.h"
#include "ops/gdr_grad/params.h"

namespace deltacheck::backends {
namespace {

using kernels::GatedDeltaRuleBackwardParams;

class WrongGradBackend : public Backend {
 public:
  bool deliberately_wrong() const override { return true; }
  Support supports(const cases::Case& c) const override {
    if (c.op() != "gdr_grad") return Support::No(name() + " implements only gdr_grad");
    return Support::Yes();
  }
};

// Runs the backward one sequence at a time, the last first. Sequence s ends with the state
// gradient `end_for(s, own, carried)`: own is its dht (nullptr: zero), carried the dh0 just
// computed for sequence s + 1 (zeros for the last). `tweak(s, sub)` may change the call. Every
// gradient of a token outside the sequences is zero.
template <typename EndFor, typename Tweak>
Status run_sequences_backward(const GatedDeltaRuleBackwardParams& p, EndFor end_for, Tweak tweak) {
  const kernels::GatedDeltaRuleParams& f = p.forward;
  const int64_t n = f.cu_seqlens ? f.num_seqs : f.batch;
  const int64_t H = f.num_heads, HV = f.num_value_heads, K = f.key_dim, V = f.value_dim;
  const int64_t per = HV * K * V, es = dtype_size(f.dtype), tokens = f.batch * f.seq_len;
  std::memset(p.dq, 0, tokens * H * K * es);
  std::memset(p.dk, 0, tokens * H * K * es);
  std::memset(p.dv, 0, tokens * HV * V * es);
  std::memset(p.dg, 0, tokens * HV * sizeof(float));
  std::memset(p.dbeta, 0, tokens * HV * es);
  std::vector<float> carried(static_cast<size_t>(per), 0.0f), dh0(static_cast<size_t>(per));
  for (int64_t s = n - 1; s >= 0; --s) {
    const int64_t begin = f.cu_seqlens ? f.cu_seqlens[s] : s * f.seq_len;
    const int64_t len = f.cu_seqlens ? f.cu_seqlens[s + 1] - begin : f.seq_len;
    const float* own = p.d_final_state ? p.d_final_state + s * per : nullptr;
    const float* end = end_for(s, own, carried.data());
    GatedDeltaRuleBackwardParams sub = p;
    kernels::GatedDeltaRuleParams& sf = sub.forward;
    sf.batch = 1;
    sf.seq_len = len;
    sf.cu_seqlens = nullptr;
    sf.num_seqs = 0;
    sf.state_slots = nullptr;
    sf.num_state_rows = 0;
    auto at = [&](const void* base, int64_t per_token, int64_t size) {
      return static_cast<const char*>(base) + begin * per_token * size;
    };
    auto at_mut = [&](void* base, int64_t per_token, int64_t size) {
      return static_cast<char*>(base) + begin * per_token * size;
    };
    sf.q = at(f.q, H * K, es);
    sf.k = at(f.k, H * K, es);
    sf.v = at(f.v, HV * V, es);
    sf.g = f.g + begin * HV;
    sf.beta = at(f.beta, HV, es);
    sf.initial_state = f.initial_state ? f.initial_state + s * per : nullptr;
    sf.final_state = nullptr;
    sf.o = nullptr;
    sub.d_output = at(p.d_output, HV * V, es);
    sub.d_final_state = end;
    sub.dq = at_mut(p.dq, H * K, es);
    sub.dk = at_mut(p.dk, H * K, es);
    sub.dv = at_mut(p.dv, HV * V, es);
    sub.dg = p.dg + begin * HV;
    sub.dbeta = at_mut(p.dbeta, HV, es);
    sub.dh0 = dh0.data();
    tweak(s, sub);
    if (len == 0) {  // nothing to undo: dh0 is the state gradient it ends with
      for (int64_t i = 0; i < per; ++i) dh0[i] = end ? end[i] : 0.0f;
    } else if (Status st = kernels::cpu::gated_delta_rule_backward(sub); !st.ok()) {
      return st;
    }
    if (p.dh0) std::memcpy(p.dh0 + s * per, dh0.data(), per * sizeof(float));
    carried.swap(dh0);
  }
  return Status::Ok();
}

class GradCarryState : public WrongGradBackend {
 public:
  std::string name() const override { return "wrong:grad-carry-state"; }
  std::string description() const override {
    return "deliberately wrong backward: the state gradient carried across packed sequences";
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    const GatedDeltaRuleBackwardParams p = gdr_grad_params(c, in, out);
    const int64_t per = p.forward.num_value_heads * p.forward.key_dim * p.forward.value_dim;
    const int64_t n = p.forward.cu_seqlens ? p.forward.num_seqs : p.forward.batch;
    std::vector<float> end(static_cast<size_t>(per));
    return run_sequences_backward(
        p,
        [&](int64_t s, const float* own, const float* carried) {
          for (int64_t i = 0; i < per; ++i)
            end[i] = (own ? own[i] : 0.0f) + (s + 1 < n ? carried[i] : 0.0f);
          return end.data();
        },
        [](int64_t, GatedDeltaRuleBackwardParams&) {});
  }
};

class GradDh0Seq0 : public WrongGradBackend {
 public:
  std::string name() const override { return "wrong:grad-dh0-seq0"; }
  std::string description() const override {
    return "deliberately wrong backward: every sequence's dh0 is sequence 0's";
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    const GatedDeltaRuleBackwardParams p = gdr_grad_params(c, in, out);
    if (Status st = kernels::cpu::gated_delta_rule_backward(p); !st.ok() || !p.dh0) return st;
    const int64_t per = p.forward.num_value_heads * p.forward.key_dim * p.forward.value_dim;
    const int64_t n = p.forward.cu_seqlens ? p.forward.num_seqs : p.forward.batch;
    for (int64_t s = 1; s < n; ++s) std::memcpy(p.dh0 + s * per, p.dh0, per * sizeof(float));
    return Status::Ok();
  }
};

class GradTailUnwritten : public WrongGradBackend {
 public:
  std::string name() const override { return "wrong:grad-tail-unwritten"; }
  std::string description() const override {
    return "deliberately wrong backward: gradients past cu_seqlens[-1] left unwritten";
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    GatedDeltaRuleBackwardParams p = gdr_grad_params(c, in, out);
    // Runs over the sequences' tokens only, as if T were cu_seqlens[-1] (B = 1 when packed).
    if (p.forward.cu_seqlens) p.forward.seq_len = p.forward.cu_seqlens[p.forward.num_seqs];
    return kernels::cpu::gated_delta_rule_backward(p);
  }
};

class GradRowsPastFirst : public WrongGradBackend {
 public:
  std::string name() const override { return "wrong:grad-rows-past-first"; }
  std::string description() const override {
    return "deliberately wrong backward: batch rows past the first read row 0's gate (B > 1)";
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    const GatedDeltaRuleBackwardParams p = gdr_grad_params(c, in, out);
    if (p.forward.cu_seqlens) return kernels::cpu::gated_delta_rule_backward(p);
    return run_sequences_backward(
        p, [](int64_t, const float* own, const float*) { return own; },
        [&](int64_t, GatedDeltaRuleBackwardParams& sub) { sub.forward.g = p.forward.g; });
  }
};

// dg of one (sequence, value head) lane by the cancellation form, in fp32 (the lane's tokens are
// [begin, begin + len) of the flat token order; dg is written there).
void cancellation_dg(const ops::gdr_grad::Params& gp, const cases::TensorMap& in, int64_t begin,
                     int64_t len, int64_t seq, int64_t hv, float* dg) {
  const ops::gdr::Params& d = gp.rule;
  const int64_t K = d.K, V = d.V, KV = K * V, h = hv / (d.HV / d.H);
  const float scale = 1.0f / std::sqrt(static_cast<float>(K));
  const cases::Tensor &q = in.at("q"), &k = in.at("k"), &v = in.at("v"), &g = in.at("g"),
                      &beta = in.at("beta"), &dout = in.at("do");
  const cases::Tensor* s0 = in.find("initial_state");
  const cases::Tensor* dht = in.find("dht");
  std::vector<float> qn(len * K), kn(len * K), S((len + 1) * KV), u(V), dS(KV), du(V);
  auto load = [&](const cases::Tensor& x, int64_t t, float f, float* dst) {
    float ss = 0.0f;
    for (int64_t i = 0; i < K; ++i) {
      dst[i] = static_cast<float>(x.get(((begin + t) * d.H + h) * K + i));
      ss += dst[i] * dst[i];
    }
    const float r = d.l2 ? 1.0f / std::sqrt(ss + 1e-6f) : 1.0f;
    for (int64_t i = 0; i < K; ++i) dst[i] *= r * f;
  };
  auto tok = [&](int64_t t) { return (begin + t) * d.HV + hv; };
  for (int64_t i = 0; i < KV; ++i)
    S[i] = s0 ? static_cast<float>(s0->get((seq * d.HV + hv) * KV + i)) : 0.0f;
  // Forward: S[t + 1] is the state after token t.
  for (int64_t t = 0; t < len; ++t) {
    load(q, t, scale, &qn[t * K]);
    load(k, t, 1.0f, &kn[t * K]);
    const float decay = std::exp(static_cast<float>(g.get(tok(t))));
    const float b = static_cast<float>(beta.get(tok(t)));
    const float* prev = &S[t * KV];
    float* next = &S[(t + 1) * KV];
    for (int64_t j = 0; j < V; ++j) u[j] = static_cast<float>(v.get(tok(t) * V + j));
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) u[j] -= decay * prev[i * V + j] * kn[t * K + i];
    for (int64_t j = 0; j < V; ++j) u[j] *= b;
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j)
        next[i * V + j] = decay * prev[i * V + j] + kn[t * K + i] * u[j];
  }
  // Reverse: dS is the gradient carried into the state after token t from later tokens. Raising
  // g_t by e scales every later state of the chunk by exp(e), as v and q of those tokens scaled
  // by exp(-e) and exp(e) do (the states by exp(-e) before the factor): dg_t = sum over s >= t in
  // the chunk of (o_s . do_s - v_s . dv_s), plus <dS, S> after the chunk's last token. Exact, but
  // each term is O(1) where dg_t is small (strong decay): the sum cancels in fp32.
  for (int64_t i = 0; i < KV; ++i)
    dS[i] = dht ? static_cast<float>(dht->get((seq * d.HV + hv) * KV + i)) : 0.0f;
  float acc = 0.0f;
  for (int64_t t = len - 1; t >= 0; --t) {
    const float decay = std::exp(static_cast<float>(g.get(tok(t))));
    const float b = static_cast<float>(beta.get(tok(t)));
    const float* after = &S[(t + 1) * KV];
    if (t % 64 == 63 || t == len - 1) {  // the last token of a chunk: the state it hands on
      acc = 0.0f;
      for (int64_t i = 0; i < KV; ++i) acc += dS[i] * after[i];
    }
    float term = 0.0f;  // o . do - v . dv
    for (int64_t j = 0; j < V; ++j) {
      float o = 0.0f;
      for (int64_t i = 0; i < K; ++i) o += after[i * V + j] * qn[t * K + i];
      term += o * static_cast<float>(dout.get(tok(t) * V + j));
    }
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j)
        dS[i * V + j] += qn[t * K + i] * static_cast<float>(dout.get(tok(t) * V + j));
    for (int64_t j = 0; j < V; ++j) du[j] = 0.0f;
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) du[j] += dS[i * V + j] * kn[t * K + i];
    for (int64_t j = 0; j < V; ++j) term -= static_cast<float>(v.get(tok(t) * V + j)) * b * du[j];
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j)
        dS[i * V + j] = decay * (dS[i * V + j] - kn[t * K + i] * b * du[j]);
    dg[tok(t)] = acc += term;
  }
}

class GradDgCumulative : public WrongGradBackend {
 public:
  std::string name() const override { return "wrong:grad-dg-cumulative"; }
  std::string description() const override {
    return "deliberately wrong backward: dg by the cancellation form (cumulative-gate gradient "
           "as a difference, reverse-summed in fp32), inaccurate under strong decay";
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    const GatedDeltaRuleBackwardParams p = gdr_grad_params(c, in, out);
    if (Status st = kernels::cpu::gated_delta_rule_backward(p); !st.ok()) return st;
    const ops::gdr_grad::Params gp = ops::gdr_grad::decode(c);
    const ops::gdr::Params& d = gp.rule;
    for (int64_t s = 0; s < d.N; ++s) {
      const int64_t begin =
          d.layout.kind == cases::Layout::Kind::kBatch ? s * d.T : d.layout.cu_seqlens()[s];
      for (int64_t hv = 0; hv < d.HV; ++hv)
        cancellation_dg(gp, in, begin, d.layout.lengths[s], s, hv, p.dg);
    }
    return Status::Ok();
  }
};

class GradCpGate : public WrongGradBackend {
 public:
  std::string name() const override { return "wrong:grad-cp-gate"; }
  std::string description() const override {
    return "deliberately wrong backward: on context-parallel ranks but the last, the gate read "
           "without its head offset (FLA #1115)";
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    return run_cpu_gdr_grad_case(c, in, out);
  }
  Status run_driven(const ops::DrivenCall& call, DriveMemory&, const cases::Case& c,
                    const cases::TensorMap& in, cases::TensorMap& out) override {
    if (call.index == 0) return run(c, in, out);  // the last rank (called first) is right
    cases::TensorMap wrong = in;
    cases::Tensor& g = wrong.at("g");  // [B, T, HV]
    const int64_t HV = g.shape().back();
    for (int64_t t = 0; t < g.numel() / HV; ++t)
      for (int64_t h = 1; h < HV; ++h) g.set(t * HV + h, g.get(t * HV));
    return run_cpu_gdr_grad_case(c, wrong, out);
  }
};

}  // namespace

std::vector<std::unique_ptr<Backend>> make_wrong_grad_backends() {
  std::vector<std::unique_ptr<Backend>> v;
  v.push_back(std::make_unique<GradCarryState>());
  v.push_back(std::make_unique<GradDh0Seq0>());
  v.push_back(std::make_unique<GradTailUnwritten>());
  v.push_back(std::make_unique<GradRowsPastFirst>());
  v.push_back(std::make_unique<GradDgCumulative>());
  v.push_back(std::make_unique<GradCpGate>());
  return v;
}

}  // namespace deltacheck::backends
