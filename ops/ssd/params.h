// The ssd operation (Mamba2's state-space duality forward and its cache modes): its parameters,
// decoded once from a case id into types, its definition (schema, generator, suite entries:
// case.cc) and Operation (outputs, oracle, baselines, slices: operation.cc).
// docs/semantics.md ("Mamba2 SSD") is the contract; docs/cases.md ("Mamba2 SSD: the ssd op") the
// parameters.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "cases/case.h"
#include "cases/op.h"
#include "cases/tensor.h"
#include "ops/operation.h"
#include "reference/ssd.h"

namespace deltacheck::ops::ssd {

// How far a head's memory reaches: rand (mamba_ssm's initialization: A in -[1, 16], dt in
// [1e-3, 1e-1]), weak (A in -[1e-2, 1e-1]: dt A ~ 1e-5..1e-2, the state carries over thousands of
// tokens), strong (dt in [0.5, 4], A in -[16, 64]: exp(dA) underflows inside a chunk, the segment
// sums' exp(dA_i - dA_j) of a chunk's far ends are 0).
enum class Decay { kRand, kWeak, kStrong };
enum class State { kNone, kRand, kMixed };
enum class Cache { kNone, kPrefill, kDecode, kChunked, kDynamic };

inline constexpr std::array<const char*, 3> kDecayNames{"rand", "weak", "strong"};
inline constexpr std::array<const char*, 3> kStateNames{"none", "rand", "mixed"};
inline constexpr std::array<const char*, 5> kCacheNames{"none", "prefill", "decode", "chunked",
                                                        "dynamic"};

// dt_limit=on: the clamp (dt_min, dt_max) after the softplus, inside the range rand's dt spans so
// that about a third of the tokens are clamped at each end.
inline constexpr double kDtLimitMin = 4e-3, kDtLimitMax = 4e-2;

// An ssd case's parameters. B, T: the [B, T, ...] tensors' leading dims; seqs: packed sequences;
// N: the state dim (d_state), as mamba_ssm names it.
struct Params {
  cases::Layout layout;
  int64_t B = 1, T = 0, H = 0, P = 0, G = 0, N = 0, seqs = 0;
  cases::DType dtype = cases::DType::kF32;
  Decay decay = Decay::kRand;
  bool dt_limit = false;
  bool z = false;  // the gate y * silu(z)
  bool D = true;   // the skip D x
  State state = State::kRand;
  Cache cache = Cache::kPrefill;
  int64_t calls = 0;
  uint64_t seed = 0;
  bool final_state = true;  // every mode but none

  double dt_min() const { return dt_limit ? kDtLimitMin : 0.0; }
  double dt_max() const;
};

// The parameters of an ssd case; throws std::invalid_argument for a case of another op.
Params decode(const cases::Case& c);

cases::OpDefinition definition();  // case.cc
const Operation& operation();      // operation.cc

// The FP64 reference arguments of a case over `inputs` (operation.cc), whose FP64 copies
// `buffers` keeps alive: shared with the backends that compute with the reference's own types.
reference::SsdArgs reference_args(const Params& d, const cases::TensorMap& inputs,
                                  std::vector<std::vector<double>>& buffers);

}  // namespace deltacheck::ops::ssd
