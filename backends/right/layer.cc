// The layer op on the panel's formulations, composed as the model composes it, in fp32 with the
// activations rounded to the case's dtype between steps (as a model keeps them):
//   qkv -> depthwise causal conv (width W, per-sequence zero or cached left context) + SiLU
//       -> q | k | v -> rule (in-kernel L2 norm, scale K^-0.5) -> w x / sqrt(mean(x^2) + eps)
//       silu(z)
//   g = -exp(A_log) softplus(a + dt_bias) (fp32), beta = sigmoid(b) (activation dtype)
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/right/panel.h"
#include "backends/right/rounding.h"
#include "ops/layer/params.h"

namespace deltacheck::backends::right {
namespace {

constexpr float kNormEps = 1e-6f;

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float silu(float x) { return x * sigmoid(x); }
// log(1 + exp(x)), linear above 20 as torch.nn.functional.softplus.
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

std::vector<float> floats(const cases::Tensor* t) {
  std::vector<float> x;
  if (!t) return x;
  x.resize(static_cast<size_t>(t->numel()));
  for (int64_t i = 0; i < t->numel(); ++i) x[i] = static_cast<float>(t->get(i));
  return x;
}

// The case's inputs, widened once.
struct Layer {
  const cases::Tensor &qkv, &z, &a, &b;
  int64_t D, H, HV, K, V, W;
  cases::DType act;
  std::vector<float> weight, bias, A_log, dt_bias, norm_weight;
};

// One sequence of L tokens from token `begin`: its conv context conv0 [D, W-1] (nullptr: zeros)
// and its state [HV, K, V] (updated in place); o rows written; conv_out [D, cols] (nullptr: not
// kept) gets the last `cols` inputs (context included), token_states [L, HV, K, V] each token's
// state (nullptr: not kept).
void run_sequence(Formulation f, const Layer& l, cases::Tensor& o, int64_t begin, int64_t L,
                  const float* conv0, float* state, float* conv_out, int64_t cols,
                  float* token_states) {
  const int64_t D = l.D, H = l.H, HV = l.HV, K = l.K, V = l.V, W = l.W, HK = H * K;
  // The conv's input: W-1 rows of left context (cached, oldest first, or zeros), then the
  // sequence's own rows.
  std::vector<float> ext(static_cast<size_t>((W - 1 + L) * D), 0.0f);
  if (conv0)
    for (int64_t ch = 0; ch < D; ++ch)
      for (int64_t j = 0; j < W - 1; ++j) ext[j * D + ch] = conv0[ch * (W - 1) + j];
  for (int64_t i = 0; i < L * D; ++i)
    ext[(W - 1) * D + i] = static_cast<float>(l.qkv.get(begin * D + i));
  SequenceInputs<float> x;
  x.length = L, x.H = H, x.HV = HV, x.K = K, x.V = V, x.l2 = true;
  x.q.resize(L * HK), x.k.resize(L * HK), x.v.resize(L * HV * V);
  x.g.resize(L * HV), x.beta.resize(L * HV);
  for (int64_t t = 0; t < L; ++t)
    for (int64_t ch = 0; ch < D; ++ch) {
      float acc = l.bias.empty() ? 0.0f : l.bias[ch];
      for (int64_t j = 0; j < W; ++j) acc += l.weight[ch * W + j] * ext[(t + j) * D + ch];
      const float y = round_to(silu(acc), l.act);
      if (ch < HK)
        x.q[t * HK + ch] = y;
      else if (ch < 2 * HK)
        x.k[t * HK + ch - HK] = y;
      else
        x.v[t * HV * V + ch - 2 * HK] = y;
    }
  if (conv_out)
    for (int64_t ch = 0; ch < D; ++ch)
      for (int64_t j = 0; j < cols; ++j)
        conv_out[ch * cols + j] = ext[(W - 1 + L - cols + j) * D + ch];
  for (int64_t t = 0; t < L; ++t)
    for (int64_t h = 0; h < HV; ++h) {
      const int64_t i = (begin + t) * HV + h;
      x.g[t * HV + h] =
          -std::exp(l.A_log[h]) * softplus(static_cast<float>(l.a.get(i)) + l.dt_bias[h]);
      x.beta[t * HV + h] = round_to(sigmoid(static_cast<float>(l.b.get(i))), l.act);
    }
  std::vector<float> rule_out(static_cast<size_t>(L * HV * V));
  rule_sequence<float>(f, l.act, x, state, rule_out.data(), token_states);
  // Gated RMS norm per token and value head, on the rule's output as the model holds it.
  for (int64_t t = 0; t < L; ++t)
    for (int64_t h = 0; h < HV; ++h) {
      float* xr = &rule_out[(t * HV + h) * V];
      float ss = 0.0f;
      for (int64_t j = 0; j < V; ++j) {
        xr[j] = round_to(xr[j], l.act);
        ss += xr[j] * xr[j];
      }
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(V) + kNormEps);
      const int64_t row = ((begin + t) * HV + h) * V;
      for (int64_t j = 0; j < V; ++j)
        store(o, row + j,
              l.norm_weight[j] * xr[j] * inv * silu(static_cast<float>(l.z.get(row + j))));
    }
}

// cache=pool and accept (docs/serving.md): each sequence from its rows of copies of the pools.
Status run_layer_serving(Formulation f, const Layer& l, const ops::layer::Params& d,
                         const cases::TensorMap& in, cases::TensorMap& out) {
  cases::Tensor &pool = out.at("state_pool"), &conv = out.at("conv_state_pool");
  std::memcpy(pool.data(), in.at("state_pool").data(), pool.nbytes());
  std::memcpy(conv.data(), in.at("conv_state_pool").data(), conv.nbytes());
  float *rows = pool.as<float>(), *conv_rows = conv.as<float>();
  const int64_t per = l.HV * l.K * l.V, cols = conv.shape()[2], per_conv = l.D * cols;
  const std::vector<int64_t> offs = sequence_offsets(in, 1, l.qkv.shape()[1]);
  std::vector<float> state(static_cast<size_t>(per)), window(static_cast<size_t>(l.D * (l.W - 1)));
  for (size_t s = 0; s + 1 < offs.size(); ++s) {
    const int64_t L = offs[s + 1] - offs[s];
    if (d.cache == ops::layer::Cache::kCkpt) {  // block by block from the initial states
      const cases::Tensor& table = in.at("block_slots");
      const int64_t cols_t = table.shape()[1], bs = d.calls;
      const std::vector<float> s0 = floats(in.find("initial_state")),
                               c0 = floats(in.find("initial_conv_state"));
      if (!s0.empty())
        std::copy_n(s0.begin() + s * per, per, state.begin());
      else
        std::fill(state.begin(), state.end(), 0.0f);
      if (!c0.empty())
        std::copy_n(c0.begin() + s * window.size(), window.size(), window.begin());
      else
        std::fill(window.begin(), window.end(), 0.0f);
      for (int64_t b = 0; b * bs < L; ++b) {
        const int64_t row = table.as<int32_t>()[s * cols_t + b];
        run_sequence(f, l, out.at("o"), offs[s] + b * bs, std::min(bs, L - b * bs), window.data(),
                     state.data(), window.data(), l.W - 1, nullptr);
        std::copy(state.begin(), state.end(), rows + row * per);
        std::copy(window.begin(), window.end(), conv_rows + row * per_conv);
      }
      continue;
    }
    if (d.cache == ops::layer::Cache::kSpec) {  // from its rows, every token's states kept
      const int32_t slot = in.at("state_slots").as<int32_t>()[s];
      std::copy_n(rows + slot * per, per, state.begin());
      std::copy_n(conv_rows + slot * per_conv, per_conv, window.begin());
      const int64_t win = l.D * (l.W - 1);
      float* ts = out.at("token_states").as<float>() + s * L * per;
      float* tc = out.at("token_conv_states").as<float>() + s * L * win;
      run_sequence(f, l, out.at("o"), offs[s], L, window.data(), state.data(),
                   conv_rows + slot * per_conv, cols, ts);
      for (int64_t t = 0; t < L; ++t)  // the W-1 inputs ending at token t: context, then tokens
        for (int64_t ch = 0; ch < l.D; ++ch)
          for (int64_t j = 0; j < l.W - 1; ++j) {
            const int64_t at = t + 1 + j;  // in (window ++ tokens)
            tc[(t * l.D + ch) * (l.W - 1) + j] =
                at < l.W - 1 ? window[ch * (l.W - 1) + at]
                             : static_cast<float>(l.qkv.get((offs[s] + at - (l.W - 1)) * l.D + ch));
          }
      std::copy(state.begin(), state.end(), rows + slot * per);
      continue;
    }
    if (d.cache == ops::layer::Cache::kPool) {
      const int32_t slot = in.at("state_slots").as<int32_t>()[s];
      if (slot < 0) continue;  // padding entry
      const bool has = in.at("has_initial_state").as<int32_t>()[s] != 0;
      if (has)
        std::copy_n(rows + slot * per, per, state.begin());
      else
        std::fill(state.begin(), state.end(), 0.0f);
      std::copy_n(conv_rows + slot * per_conv, per_conv, window.begin());
      run_sequence(f, l, out.at("o"), offs[s], L, has ? window.data() : nullptr, state.data(),
                   conv_rows + slot * per_conv, cols, nullptr);
      std::copy(state.begin(), state.end(), rows + slot * per);
      continue;
    }
    const int32_t* idx = in.at("state_indices").as<int32_t>() + s * L;
    const int64_t a = in.at("num_accepted_tokens").as<int32_t>()[s];
    std::copy_n(rows + idx[a - 1] * per, per, state.begin());
    float* conv_row = conv_rows + idx[0] * per_conv;
    for (int64_t ch = 0; ch < l.D; ++ch)
      for (int64_t j = 0; j < l.W - 1; ++j)
        window[ch * (l.W - 1) + j] = conv_row[ch * cols + a - 1 + j];
    std::vector<float> token_states(static_cast<size_t>(L * per));
    run_sequence(f, l, out.at("o"), offs[s], L, window.data(), state.data(), conv_row, cols,
                 token_states.data());
    for (int64_t t = 0; t < L; ++t)
      std::copy_n(token_states.begin() + t * per, per, rows + idx[t] * per);
  }
  return Status::Ok();
}

}  // namespace

Status run_layer(Formulation f, const cases::Case& c, const cases::TensorMap& in,
                 cases::TensorMap& out) {
  const ops::layer::Params d = ops::layer::decode(c);
  const cases::Tensor& qkv = in.at("qkv");
  const Layer l{qkv,
                in.at("z"),
                in.at("a"),
                in.at("b"),
                qkv.shape()[2],
                d.H,
                d.HV,
                d.K,
                d.V,
                d.W,
                qkv.dtype(),
                floats(&in.at("conv_weight")),
                floats(in.find("conv_bias")),
                floats(&in.at("A_log")),
                floats(&in.at("dt_bias")),
                floats(&in.at("norm_weight"))};
  if (l.D != 2 * l.H * l.K + l.HV * l.V)
    return Status::InvalidArgument("qkv channels != 2 H K + HV V");
  if (d.serving()) return run_layer_serving(f, l, d, in, out);
  const int64_t T = qkv.shape()[1], W = l.W, per = l.HV * l.K * l.V, per_conv = l.D * (W - 1);
  const std::vector<float> conv0 = floats(in.find("initial_conv_state"));
  const cases::Tensor* state0 = in.find("initial_state");
  cases::Tensor* final_state = out.find("final_state");
  cases::Tensor* final_conv = out.find("final_conv_state");
  const std::vector<int64_t> offs = sequence_offsets(in, 1, T);
  std::vector<float> state(static_cast<size_t>(per));
  for (size_t s = 0; s + 1 < offs.size(); ++s) {
    if (state0)
      std::copy_n(state0->as<float>() + s * per, per, state.begin());
    else
      std::fill(state.begin(), state.end(), 0.0f);
    run_sequence(f, l, out.at("o"), offs[s], offs[s + 1] - offs[s],
                 conv0.empty() ? nullptr : conv0.data() + s * per_conv, state.data(),
                 final_conv ? final_conv->as<float>() + s * per_conv : nullptr, W - 1, nullptr);
    if (final_state) std::copy_n(state.begin(), per, final_state->as<float>() + s * per);
  }
  return Status::Ok();
}

}  // namespace deltacheck::backends::right
