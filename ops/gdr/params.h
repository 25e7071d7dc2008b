// The gdr operation (gated delta rule prefill and its cache modes): its parameters, decoded once
// from a case id into types, and its definition (schema, generator, suite entries: case.cc) and
// Operation (outputs, oracle, baselines, slices: operation.cc). Kernel parameters: problem.h.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "cases/case.h"
#include "cases/op.h"
#include "cases/tensor.h"
#include "ops/operation.h"
#include "ops/regimes.h"
#include "reference/gated_delta_rule.h"

namespace deltacheck::ops::gdr {

enum class Gate { kZero, kWeak, kStrong, kTail };
enum class Beta { kRand, kZero, kOne, kWide };
enum class Keys { kNorm, kPos };
enum class State { kNone, kRand, kMixed };
enum class Cache {
  kNone,
  kPrefill,
  kDecode,
  kChunked,
  kDynamic,
  kPool,
  kSpec,
  kCkpt,
  kAccept,
  kTree
};

// The names the case id spells each value with (index = enum value).
inline constexpr std::array<const char*, 4> kGateNames{"zero", "weak", "strong", "tail"};
inline constexpr std::array<const char*, 4> kBetaNames{"rand", "zero", "one", "wide"};
inline constexpr std::array<const char*, 2> kKeysNames{"norm", "pos"};
inline constexpr std::array<const char*, 3> kStateNames{"none", "rand", "mixed"};
inline constexpr std::array<const char*, 10> kCacheNames{
    "none", "prefill", "decode", "chunked", "dynamic", "pool", "spec", "ckpt", "accept", "tree"};
inline const char* name(Cache c) { return kCacheNames[static_cast<size_t>(c)]; }

// A gdr case's parameters. B, T: the [B, T, ...] tensors' leading dims; N: packed sequences.
struct Params {
  cases::Layout layout;
  int64_t B = 1, T = 0, H = 0, HV = 0, K = 0, V = 0, N = 0;
  cases::DType dtype = cases::DType::kF32;
  Gate gate = Gate::kWeak;
  Beta beta = Beta::kRand;
  Keys keys = Keys::kNorm;
  // Where the inputs sit (ops/regimes.h, ops/gdr/regimes.h); absent from the id when rand.
  Regime regime = Regime::kRand;
  bool l2 = true;
  State state = State::kRand;
  Cache cache = Cache::kPrefill;
  int64_t calls = 0;
  uint64_t seed = 0;
  // Whether the outputs hold final_state (every mode but none; the pool modes keep their states
  // in the pool instead: see pooled()).
  bool final_state = true;

  // cache=pool or spec: states live in a slot-addressed pool.
  bool pooled() const { return cache == Cache::kPool || cache == Cache::kSpec; }
  // cache=ckpt, accept or tree: the serving kernel contracts (ops/gdr/serving.h).
  bool serving() const {
    return cache == Cache::kCkpt || cache == Cache::kAccept || cache == Cache::kTree;
  }
};

// The parameters of a gdr case; throws std::invalid_argument for a case of another op.
Params decode(const cases::Case& c);

// cache=pool / spec: rows of the state pool, and each sequence's slot (-1: padding entry).
int64_t pool_size(const Params& p);
std::vector<int32_t> pool_slots(const Params& p);

// Every sequence has exactly one token (a decode batch): backends route such pool calls to their
// decode kernel, as serving runtimes do.
bool one_token_per_sequence(const Params& p);

cases::OpDefinition definition();  // case.cc
// The rule for a case given with a layout that holds no token (OpSchema::check_given): Ok where
// its states still say something (case.cc); shared with gdr_grad's forward case.
Status check_zero_tokens(const cases::Case& c);
const Operation& operation();  // operation.cc

// Shared with the operations built on the rule's forward problem (ops/gdr_grad): the inputs of a
// gdr case (case.cc; the schema's generator), and the FP64 reference arguments of a (non-pool)
// problem `d` over `inputs` (operation.cc), whose FP64 copies `buffers` keeps alive.
cases::TensorMap generate(const cases::Case& c, const cases::GenOptions& o);
reference::GatedDeltaRuleArgs reference_args(const Params& d, const cases::TensorMap& inputs,
                                             std::vector<std::vector<double>>& buffers);

}  // namespace deltacheck::ops::gdr
