// The serve operation: a serving scenario, the sequence of calls a runtime makes around the gated
// delta rule (docs/scenarios.md). A seeded, printable case id such as
//   serve(requests=8,lanes=4,prompt=40,block=16,spec=3,steps=6,accept=rand,prefix=shared,...)
// expands (scenario.h) into prefills that write block checkpoints, speculative verify calls with
// random acceptance, prefix hits on earlier requests' checkpoints and lanes reused after
// eviction; every request is judged against its own one-shot FP64 run (operation.cc).
#pragma once

#include <array>
#include <cstdint>

#include "cases/case.h"
#include "cases/op.h"
#include "cases/tensor.h"
#include "ops/operation.h"

namespace deltacheck::ops::serve {

enum class Accept { kRand, kAll, kNone };
enum class Prefix { kNone, kShared };
enum class Gate { kWeak, kStrong };
// How states travel between calls: `plain` — the runtime keeps every state a call returns
// (prefill final states, spec token_states) and hands it to the next call as an initial state or
// pool slot; `accept` — plain prefills, but each verify is a cache=accept call that resumes from
// the row of the last accepted token itself (vLLM's fused_recurrent with num_accepted_tokens);
// `serving` — the kernel contracts throughout (docs/serving.md): accept verifies, and each
// prefill one cache=ckpt call to the prompt's end that writes every block checkpoint into pool
// rows.
enum class Contract { kPlain, kAccept, kServing };

inline constexpr std::array<const char*, 3> kAcceptNames{"rand", "all", "none"};
inline constexpr std::array<const char*, 2> kPrefixNames{"none", "shared"};
inline constexpr std::array<const char*, 2> kGateNames{"weak", "strong"};
inline constexpr std::array<const char*, 3> kContractNames{"plain", "accept", "serving"};

struct Params {
  int64_t requests = 4;  // requests in arrival order
  int64_t lanes = 2;     // state slots: requests running at once
  int64_t prompt = 40;   // a request's own prompt tokens: drawn in [prompt/2, prompt]
  int64_t block = 16;    // checkpoint block size (tokens)
  int64_t spec = 3;      // draft tokens per verify call (0: plain one-token decode)
  int64_t steps = 6;     // verify (decode) calls per request
  Accept accept = Accept::kRand;
  Prefix prefix = Prefix::kShared;
  Contract contract = Contract::kPlain;
  bool accept_verifies() const { return contract != Contract::kPlain; }  // cache=accept
  bool ckpt_prefills() const { return contract == Contract::kServing; }  // cache=ckpt
  int64_t H = 1, HV = 2, K = 32, V = 32;
  cases::DType dtype = cases::DType::kF32;
  Gate gate = Gate::kWeak;
  uint64_t seed = 0;
};

// The parameters of a serve case; throws std::invalid_argument for a case of another op.
Params decode(const cases::Case& c);

cases::OpDefinition definition();  // case.cc
const Operation& operation();      // operation.cc

}  // namespace deltacheck::ops::serve
