// The layer operation (the whole linear-attention layer around the rule): its parameters, decoded
// once from a case id into types, its definition (case.cc) and its Operation (operation.cc).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "cases/case.h"
#include "cases/op.h"
#include "cases/tensor.h"
#include "ops/operation.h"
#include "ops/regimes.h"
#include "reference/linear_attention_layer.h"

namespace deltacheck::ops::layer {

enum class State { kNone, kRand, kMixed };
// pool, accept, ckpt, spec: the layer's serving state (ops/layer/serving.h, docs/serving.md).
enum class Cache { kNone, kPrefill, kDecode, kChunked, kDynamic, kPool, kAccept, kCkpt, kSpec };

// The names the case id spells each value with (index = enum value).
inline constexpr std::array<const char*, 3> kStateNames{"none", "rand", "mixed"};
inline constexpr std::array<const char*, 9> kCacheNames{
    "none", "prefill", "decode", "chunked", "dynamic", "pool", "accept", "ckpt", "spec"};

// A layer case's parameters. T: total tokens; D = 2 H K + HV V, the conv's channels.
struct Params {
  cases::Layout layout;
  int64_t T = 0, N = 0, H = 0, HV = 0, K = 0, V = 0, W = 0, D = 0;
  bool bias = true;
  cases::DType dtype = cases::DType::kF32;
  State state = State::kRand;
  Cache cache = Cache::kPrefill;
  // Where the rule's inputs sit after the conv (ops/regimes.h; case.cc places the conv's inputs):
  // rand (absent from the id), tinyqk, hugeqk, corrk. Not converged (case.cc says why).
  Regime regime = Regime::kRand;
  int64_t calls = 0;
  uint64_t seed = 0;
  // Whether recurrent and conv states flow in and out (every cache mode but none).
  bool states() const { return cache != Cache::kNone; }
  // cache=pool, accept or spec: the states in and out live in slot-addressed pools; ckpt: they come
  // in as for prefill and go out into pool rows, one per block (ops/layer/serving.h).
  bool pooled() const {
    return cache == Cache::kPool || cache == Cache::kAccept || cache == Cache::kSpec;
  }
  bool serving() const { return pooled() || cache == Cache::kCkpt; }
};

// The parameters of a layer case; throws std::invalid_argument for a case of another op.
Params decode(const cases::Case& c);

// The FP64 reference's arguments for a layer case's tensors (T from qkv's rows, so a gradient
// case's padding tail counts; cu_seqlens from its tensor, else one sequence); `buffers` holds the
// values they point into. operation.cc.
reference::LinearAttentionLayerArgs reference_args(const Params& d, const cases::TensorMap& in,
                                                   std::vector<std::vector<double>>& buffers);

cases::OpDefinition definition();  // case.cc
// The rule for a case given with a layout that holds no token (OpSchema::check_given; case.cc):
// refused. Shared with layer_grad's forward case.
Status check_zero_tokens(const cases::Case& c);
const Operation& operation();  // operation.cc

}  // namespace deltacheck::ops::layer
