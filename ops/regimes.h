// The case parameter `regime` of the ops built on the rule (gdr, gdr_grad, layer, layer_grad):
// where the inputs sit, beyond random (docs/cases.md#regimes). What the ops share: the values,
// their parameter spec, the q/k norm ranges and the correlated keys. How each op places its inputs
// in a regime is the op's own (ops/gdr/regimes.h: the rule's q, k, v directly; ops/layer/case.cc:
// the conv's input channels and weights, so that the rule's inputs after the conv land there).
//   rand       every input random (the generators' inputs before regimes; absent from the id)
//   converged  converged memory: v_t close to the state's prediction S^T k_t (gdr, gdr_grad)
//   tinyqk     q and k tokens of norm log-uniform in [1e-4, 1e-2]: the in-kernel L2 norm's eps
//              form decides the result (unslothai/llama.cpp#156)
//   hugeqk     norms log-uniform in [1e2, 1e4]: sums of squares that overflow fp16
//   corrk      the keys of a sequence and head strongly correlated (pairwise cosine ~0.97): the
//              chunk's UT matrix I + strictly_lower(diag(beta) K K^T (.) decay) far from the
//              identity, its inverse a cancellation (vllm PR #53864's bf16 inversion divergence)
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "cases/rng.h"
#include "ops/schema.h"

namespace deltacheck::ops {

enum class Regime { kRand, kConverged, kTinyQK, kHugeQK, kCorrK };
inline constexpr std::array<const char*, 5> kRegimeNames{"rand", "converged", "tinyqk", "hugeqk",
                                                         "corrk"};
inline const char* name(Regime r) { return kRegimeNames[static_cast<size_t>(r)]; }

// The residual's share of |v_t| in regime=converged, before v is rounded to the dtype. 2^-6: a
// bf16 rounding of S^T k moves u = beta (v - S^T k) by ~2^-9 |v| / sqrt(3) per element (ulp
// spacing 2^-7..2^-8 of the value, uniform error), about 12% of the residual; an fp32-state
// computation moves it by ~1e-7 |v|, 1e-5 of it; and the bf16 rounding of v itself (the input
// the oracle sees) leaves the residual within ~10% of 2^-6 (tests/ops/test_gdr_regimes.cc).
inline constexpr double kConvergedResidual = 1.0 / 64.0;

// The norm range of q and k tokens in regime=tinyqk / hugeqk.
inline constexpr double kTinyNormMin = 1e-4, kTinyNormMax = 1e-2;
inline constexpr double kHugeNormMin = 1e2, kHugeNormMax = 1e4;

// regime=corrk: every key of a sequence and q/k head is sqrt(c) base + sqrt(1 - c) noise, base and
// noise N(0, I) (base one per sequence and head, noise per token), so that two keys' cosine is
// about c. 0.97: the UT matrix's inverse at gate=zero and beta=rand grows to condition numbers of
// ~1e2-1e3 per 64-token chunk where random keys give ~2 (measured in
// tests/ops/test_grad_layer_regimes.cc, docs/tolerance.md#input-regimes-and-their-wrong-backends).
inline constexpr double kCorrKCosine = 0.97;

// The `regime` parameter of an op that takes `allowed` (a prefix of kRegimeNames' order is not
// required); absent from the id when rand, so every case made before regimes keeps its id and its
// bits. `help` says what each regime does there.
ParamSpec regime_param(const std::vector<Regime>& allowed, std::string help);

// The regime a case spells (rand when it spells none).
Regime decode_regime(const cases::Case& c);

// The norm q/k token `i` of stream `st` is scaled to in `regime` (log-uniform in the regime's
// range); 0 for regimes that keep the generated norm.
double qk_token_norm(Regime regime, const cases::Stream& st, uint64_t i);

// regime=corrk: row[0..n) (noise already drawn, N(0,1) per element) becomes sqrt(c) base + sqrt(1 -
// c) row, base[i] = base_stream.normal(first + i): the correlated key of one token.
void correlate_key(const cases::Stream& base_stream, uint64_t first, int64_t n, double* row);

}  // namespace deltacheck::ops
