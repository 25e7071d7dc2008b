// The gated delta rule as the false-positive panel computes it: one sequence of one value head at
// a time, in compute type T (float for the backends; double for the self-test's FP64 check), in
// three formulations that correct implementations in real use follow (docs/panel.md):
//   recurrent_rule  the token recurrence (docs/semantics.md, "Gated delta rule"), state in T
//   chunked_rule    the chunked WY/UT form with chunk-local cumulative gates, as FLA, FlashInfer
//                   and Transformers compute it; with `operands` bf16 or fp16, every matmul
//                   operand is rounded to that dtype and accumulated in T, as tensor-core kernels
//                   (FLA's chunk_gated_delta_rule) do. The state stays in T between chunks.
// Written from the rule's definition, independently of kernels/ and reference/.
#pragma once

#include <cstdint>

#include "cases/tensor.h"

namespace deltacheck::backends::right {

// One sequence of one value head, rows contiguous: q, k [length, K] (already L2-normalized when
// the case asks for it, not scaled), v [length, V], g, beta [length].
template <typename T>
struct HeadSequence {
  int64_t length = 0, K = 0, V = 0;
  const T* q = nullptr;
  const T* k = nullptr;
  const T* v = nullptr;
  const T* g = nullptr;
  const T* beta = nullptr;
  T scale = 1;  // applied to q after the norm (each formulation where its kind of kernel does)
};

// Runs the sequence from `state` [K, V] (updated in place to the state after the last token),
// writing o [length, V] and, when token_states is not null, the state after every token
// [length, K, V].
template <typename T>
void recurrent_rule(const HeadSequence<T>& s, T* state, T* o, T* token_states);

constexpr int64_t kChunk = 64;

// The formulation choices of a chunked kernel besides its operands (docs/tolerance.md,
// "Precision profiles"): its chunk size, and the cumulative gates as a running sum in T (a
// kernel's loop) or each prefix sum rounded to T on its own from a sum in double (jnp.cumsum,
// torch.cumsum on a CPU).
struct ChunkChoices {
  int64_t chunk = kChunk;
  bool independent_cumsum = false;
  bool lowp_solve = false;  // wrong:ut-solve-lowp's planted bug (below)
};

// `operands`: kF32 (every matmul in T) or the activation dtype (kBF16 / kF16) whose rounding the
// matmul operands get. Token states (speculative decode) are the final states of the prefixes,
// each computed in the chunked form, as a chunked kernel run on each prefix would give them.
// `lowp_solve` plants wrong:ut-solve-lowp's bug: the forward substitution's entries and running
// sums rounded to `operands` as they are computed (panel.h, kChunkedLowpSolve).
template <typename T>
void chunked_rule(const HeadSequence<T>& s, T* state, T* o, T* token_states,
                  cases::DType operands = cases::DType::kF32, ChunkChoices choices = {});

// x / sqrt(sum(x^2) + 1e-6) over n elements, in T.
template <typename T>
void l2_normalize(T* x, int64_t n);

// The same as a model computes it on tensors of `dtype` (bf16 / fp16; Transformers 4.57's
// l2norm on bf16 activations): x * x, the sum, the sum plus eps, its inverse square root and
// x times it each a tensor of that dtype (the sum accumulated in T).
template <typename T>
void l2_normalize_in(T* x, int64_t n, cases::DType dtype);

}  // namespace deltacheck::backends::right
