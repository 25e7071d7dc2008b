// The layer op on the panel's formulations, composed as the model composes it, in fp32 with the
// activations rounded to the case's dtype between steps (as a model keeps them):
//   qkv -> depthwise causal conv (width W, per-sequence zero or cached left context) + SiLU
//       -> q | k | v -> rule (in-kernel L2 norm, scale K^-0.5) -> w x / sqrt(mean(x^2) + eps)
//       silu(z)
//   g = -exp(A_log) softplus(a + dt_bias) (fp32), beta = sigmoid(b) (activation dtype)
#include <algorithm>
#include <cmath>

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

}  // namespace

Status run_layer(Formulation f, const cases::Case& c, const cases::TensorMap& in,
                 cases::TensorMap& out) {
  const cases::Tensor &qkv = in.at("qkv"), &z = in.at("z"), &a = in.at("a"), &b = in.at("b");
  const ops::layer::Params d = ops::layer::decode(c);
  const int64_t T = qkv.shape()[1], D = qkv.shape()[2], H = d.H, HV = d.HV, K = d.K, V = d.V,
                W = d.W;
  if (D != 2 * H * K + HV * V) return Status::InvalidArgument("qkv channels != 2 H K + HV V");
  const cases::DType act = qkv.dtype();
  const std::vector<float> weight = floats(&in.at("conv_weight")),
                           bias = floats(in.find("conv_bias")), A_log = floats(&in.at("A_log")),
                           dt_bias = floats(&in.at("dt_bias")),
                           norm_weight = floats(&in.at("norm_weight")),
                           conv0 = floats(in.find("initial_conv_state"));
  const cases::Tensor* state0 = in.find("initial_state");
  cases::Tensor& o = out.at("o");
  cases::Tensor* final_state = out.find("final_state");
  cases::Tensor* final_conv = out.find("final_conv_state");
  const std::vector<int64_t> offs = sequence_offsets(in, 1, T);
  const int64_t per = HV * K * V, HK = H * K;
  std::vector<float> state(static_cast<size_t>(per));
  for (size_t s = 0; s + 1 < offs.size(); ++s) {
    const int64_t begin = offs[s], L = offs[s + 1] - offs[s];
    // The conv's input: W-1 rows of left context (cached, oldest first, or zeros), then the
    // sequence's own rows.
    std::vector<float> ext(static_cast<size_t>((W - 1 + L) * D), 0.0f);
    if (!conv0.empty())
      for (int64_t ch = 0; ch < D; ++ch)
        for (int64_t j = 0; j < W - 1; ++j) ext[j * D + ch] = conv0[(s * D + ch) * (W - 1) + j];
    for (int64_t i = 0; i < L * D; ++i)
      ext[(W - 1) * D + i] = static_cast<float>(qkv.get(begin * D + i));
    SequenceInputs<float> x;
    x.length = L, x.H = H, x.HV = HV, x.K = K, x.V = V, x.l2 = true;
    x.q.resize(L * HK), x.k.resize(L * HK), x.v.resize(L * HV * V);
    x.g.resize(L * HV), x.beta.resize(L * HV);
    for (int64_t t = 0; t < L; ++t)
      for (int64_t ch = 0; ch < D; ++ch) {
        float acc = bias.empty() ? 0.0f : bias[ch];
        for (int64_t j = 0; j < W; ++j) acc += weight[ch * W + j] * ext[(t + j) * D + ch];
        const float y = round_to(silu(acc), act);
        if (ch < HK)
          x.q[t * HK + ch] = y;
        else if (ch < 2 * HK)
          x.k[t * HK + ch - HK] = y;
        else
          x.v[t * HV * V + ch - 2 * HK] = y;
      }
    if (final_conv)
      for (int64_t ch = 0; ch < D; ++ch)
        for (int64_t j = 0; j < W - 1; ++j)
          final_conv->as<float>()[(s * D + ch) * (W - 1) + j] = ext[(L + j) * D + ch];
    for (int64_t t = 0; t < L; ++t)
      for (int64_t h = 0; h < HV; ++h) {
        const int64_t i = (begin + t) * HV + h;
        x.g[t * HV + h] = -std::exp(A_log[h]) * softplus(static_cast<float>(a.get(i)) + dt_bias[h]);
        x.beta[t * HV + h] = round_to(sigmoid(static_cast<float>(b.get(i))), act);
      }
    if (state0)
      std::copy_n(state0->as<float>() + s * per, per, state.begin());
    else
      std::fill(state.begin(), state.end(), 0.0f);
    std::vector<float> rule_out(static_cast<size_t>(L * HV * V));
    rule_sequence<float>(f, act, x, state.data(), rule_out.data(), nullptr);
    if (final_state) std::copy_n(state.begin(), per, final_state->as<float>() + s * per);
    // Gated RMS norm per token and value head, on the rule's output as the model holds it.
    for (int64_t t = 0; t < L; ++t)
      for (int64_t h = 0; h < HV; ++h) {
        float* xr = &rule_out[(t * HV + h) * V];
        float ss = 0.0f;
        for (int64_t j = 0; j < V; ++j) {
          xr[j] = round_to(xr[j], act);
          ss += xr[j] * xr[j];
        }
        const float inv = 1.0f / std::sqrt(ss / static_cast<float>(V) + kNormEps);
        const int64_t row = ((begin + t) * HV + h) * V;
        for (int64_t j = 0; j < V; ++j)
          store(o, row + j,
                norm_weight[j] * xr[j] * inv * silu(static_cast<float>(z.get(row + j))));
      }
  }
  return Status::Ok();
}

}  // namespace deltacheck::backends::right
