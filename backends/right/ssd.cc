// The false-positive panel's Mamba2 SSD members, written from docs/semantics.md ("Mamba2 SSD")
// alone, sharing nothing with the CPU kernel or the reference:
//   right:ssd-recurrent  the token recurrence, fp32 state and arithmetic, S as [P][N]
//   right:ssd-chunked    the "minimal SSD" form of the Transformers mixers' torch_forward, fp32,
//                        chunk 256: per chunk the segment-sum matrix L = exp(segsum(dt A)), the
//                        diagonal blocks (C B^T * L) (dt x), the chunk states, and the states
//                        passed between chunks through the whole chunk-decay matrix at once
// Both run every sequence on one thread from its own data: deterministic and batch-invariant.
#include <cmath>
#include <vector>

#include "backends/right/rounding.h"
#include "backends/ssd_backends.h"
#include "ops/ssd/params.h"

namespace deltacheck::backends {
namespace {

// Every input widened to float once; absent ones empty.
struct Widened {
  std::vector<float> x, dt, B, C, z, A, dt_bias, D, s0;
};

std::vector<float> widen(const cases::TensorMap& in, const char* name) {
  const cases::Tensor* t = in.find(name);
  std::vector<float> v;
  if (!t) return v;
  v.resize(static_cast<size_t>(t->numel()));
  for (int64_t i = 0; i < t->numel(); ++i) v[i] = static_cast<float>(t->get(i));
  return v;
}

float softplus(float v) { return v > 20.0f ? v : std::log(1.0f + std::exp(v)); }

// One call: the case's sizes, its widened inputs and where the outputs go.
struct SsdRun {
  ops::ssd::Params d_;
  Widened w_;
  cases::Tensor* y_ = nullptr;
  cases::Tensor* fs_ = nullptr;

  void all(const cases::Tensor* cu, bool chunked_form) {
    for (int64_t s = 0; s < d_.seqs; ++s) {
      const int64_t begin = cu ? cu->as<int64_t>()[s] : s * d_.T;
      const int64_t len = cu ? cu->as<int64_t>()[s + 1] - begin : d_.T;
      for (int64_t h = 0; h < d_.H; ++h) {
        std::vector<float> S(d_.P * d_.N, 0.0f);  // [P][N]
        if (!w_.s0.empty())
          for (int64_t i = 0; i < d_.P * d_.N; ++i) S[i] = w_.s0[(s * d_.H + h) * d_.P * d_.N + i];
        chunked_form ? chunked(begin, len, h, S) : recurrent(begin, len, h, S);
        if (fs_)
          for (int64_t i = 0; i < d_.P * d_.N; ++i)
            fs_->as<float>()[(s * d_.H + h) * d_.P * d_.N + i] = S[i];
      }
    }
  }

  float step(int64_t tok, int64_t h) const {
    float v = softplus(w_.dt[tok * d_.H + h] + w_.dt_bias[h]);
    if (d_.dt_limit)
      v = std::min(std::max(v, static_cast<float>(d_.dt_min())), static_cast<float>(d_.dt_max()));
    return v;
  }
  // y_tok = (acc + D x) silu(z), stored.
  void emit(int64_t tok, int64_t h, const std::vector<float>& acc) {
    for (int64_t p = 0; p < d_.P; ++p) {
      const int64_t e = (tok * d_.H + h) * d_.P + p;
      float v = acc[p];
      if (!w_.D.empty()) v += w_.D[h] * w_.x[e];
      if (!w_.z.empty()) v *= w_.z[e] / (1.0f + std::exp(-w_.z[e]));
      right::store(*y_, e, v);
    }
  }
  const float* row(const std::vector<float>& t, int64_t tok, int64_t h) const {
    return t.data() + (tok * d_.G + h / (d_.H / d_.G)) * d_.N;
  }

  void recurrent(int64_t begin, int64_t len, int64_t h, std::vector<float>& S) {
    std::vector<float> acc(d_.P);
    for (int64_t tok = begin; tok < begin + len; ++tok) {
      const float dt = step(tok, h), a = std::exp(dt * w_.A[h]);
      const float *b = row(w_.B, tok, h), *c = row(w_.C, tok, h);
      for (int64_t p = 0; p < d_.P; ++p) {
        const float xp = w_.x[(tok * d_.H + h) * d_.P + p];
        float y = 0.0f;
        for (int64_t n = 0; n < d_.N; ++n) {
          float& s = S[p * d_.N + n];
          s = a * s + dt * xp * b[n];
          y += s * c[n];
        }
        acc[p] = y;
      }
      emit(tok, h, acc);
    }
  }

  void chunked(int64_t begin, int64_t len, int64_t h, std::vector<float>& S) {
    const int64_t Q = 256, K = (len + Q - 1) / Q, PN = d_.P * d_.N;
    // states[0] = the initial state, states[k + 1] = chunk k's own state (from zero).
    std::vector<std::vector<float>> states(K + 1, std::vector<float>(PN, 0.0f));
    states[0] = S;
    std::vector<std::vector<float>> cum(K);  // per chunk: running sum of dt A
    std::vector<float> chunk_sum(K + 1, 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const int64_t b0 = begin + k * Q, n = std::min(Q, len - k * Q);
      cum[k].resize(n);
      float run = 0.0f;
      for (int64_t i = 0; i < n; ++i) cum[k][i] = run += step(b0 + i, h) * w_.A[h];
      chunk_sum[k + 1] = chunk_sum[k] + run;
      for (int64_t j = 0; j < n; ++j) {
        const float f = std::exp(run - cum[k][j]) * step(b0 + j, h);
        const float* b = row(w_.B, b0 + j, h);
        for (int64_t p = 0; p < d_.P; ++p) {
          const float xp = f * w_.x[((b0 + j) * d_.H + h) * d_.P + p];
          for (int64_t m = 0; m < d_.N; ++m) states[k + 1][p * d_.N + m] += xp * b[m];
        }
      }
    }
    // The state entering chunk z: sum over c <= z of exp(chunk_sum[z] - chunk_sum[c]) states[c].
    std::vector<std::vector<float>> entering(K + 1, std::vector<float>(PN, 0.0f));
    for (int64_t z = 0; z <= K; ++z)
      for (int64_t c = 0; c <= z; ++c) {
        const float f = std::exp(chunk_sum[z] - chunk_sum[c]);
        for (int64_t i = 0; i < PN; ++i) entering[z][i] += f * states[c][i];
      }
    std::vector<float> acc(d_.P);
    for (int64_t k = 0; k < K; ++k) {
      const int64_t b0 = begin + k * Q, n = std::min(Q, len - k * Q);
      for (int64_t i = 0; i < n; ++i) {
        const float* c = row(w_.C, b0 + i, h);
        const float off = std::exp(cum[k][i]);
        for (int64_t p = 0; p < d_.P; ++p) {
          float s = 0.0f;
          for (int64_t m = 0; m < d_.N; ++m) s += entering[k][p * d_.N + m] * c[m];
          acc[p] = off * s;
        }
        for (int64_t j = 0; j <= i; ++j) {
          const float* b = row(w_.B, b0 + j, h);
          float cb = 0.0f;
          for (int64_t m = 0; m < d_.N; ++m) cb += c[m] * b[m];
          const float wgt = cb * std::exp(cum[k][i] - cum[k][j]) * step(b0 + j, h);
          for (int64_t p = 0; p < d_.P; ++p) acc[p] += wgt * w_.x[((b0 + j) * d_.H + h) * d_.P + p];
        }
        emit(b0 + i, h, acc);
      }
    }
    S = entering[K];
  }
};

class RightSsd : public Backend {
 public:
  explicit RightSsd(bool chunked) : chunked_(chunked) {}
  std::string name() const override {
    return chunked_ ? "right:ssd-chunked" : "right:ssd-recurrent";
  }
  std::string description() const override {
    return chunked_ ? "SSD by chunks of 256 with the whole chunk-decay matrix, fp32 (the "
                      "Transformers mixers' torch_forward)"
                    : "the SSD token recurrence, fp32 state and arithmetic";
  }
  bool deliberately_correct() const override { return true; }
  PrecisionProfile precision_profile() const override {
    return harness::profile_from_name(chunked_ ? "fp32" : "operands=fp32");
  }
  Support supports(const cases::Case& c) const override {
    if (c.op() == "ssd") return Support::Yes();
    return Support::No(name() + " implements only ssd");
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    SsdRun r;
    r.d_ = ops::ssd::decode(c);
    r.w_ = {widen(in, "x"),       widen(in, "dt"), widen(in, "B"),
            widen(in, "C"),       widen(in, "z"),  widen(in, "A"),
            widen(in, "dt_bias"), widen(in, "D"),  widen(in, "initial_state")};
    r.y_ = &out.at("y");
    r.fs_ = out.find("final_state");
    r.all(in.find("cu_seqlens"), chunked_);
    return Status::Ok();
  }

 private:
  bool chunked_;
};

}  // namespace

std::vector<std::unique_ptr<Backend>> make_right_ssd_backends() {
  std::vector<std::unique_ptr<Backend>> v;
  v.push_back(std::make_unique<RightSsd>(false));
  v.push_back(std::make_unique<RightSsd>(true));
  return v;
}

}  // namespace deltacheck::backends
