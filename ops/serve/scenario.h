// A serve case's expansion: the requests (their token sequences) and the calls a runtime makes for
// them, a pure function of the case's parameters (acceptance is drawn from the seed, not from
// any output), so the same id always means the same calls.
//
// The runtime admits requests in arrival order while a lane is free (a request whose prefix comes
// from an earlier one waits until that one finishes), resets the lane (or loads the checkpoint
// of the prefix hit into it), then alternates:
//   prefill call  every prefilling request advances to its next block boundary or prompt end;
//                 a row ending on a boundary leaves that block's checkpoint (its final state).
//                 contract=serving: to its prompt end in one call, a checkpoint at every
//                 boundary it crosses (the kernel writes them: cache=ckpt)
//   verify call   every decoding request feeds 1 + spec tokens (the last sampled token and the
//                 drafts), accepts 1 + a of them (a drawn in 0 .. spec), resumes from the state
//                 after its last accepted token and checkpoints every block boundary it crossed
// A request leaves after `steps` verify calls; its lane is reused by the next one.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/operation.h"
#include "ops/serve/params.h"

namespace deltacheck::ops::serve {

struct Request {
  int64_t own_prompt = 0;    // prompt tokens of its own
  int64_t hit_request = -1;  // prefix hit: the first hit_tokens tokens are that request's
  int64_t hit_tokens = 0;    // a multiple of block
  int64_t prompt = 0;        // hit_tokens + own_prompt
  int64_t lane = -1;
  std::vector<int64_t> tokens;  // its accepted sequence: ids into the token pool
};

struct ScenarioCall {
  DrivenCall info;
  std::vector<std::vector<int64_t>> row_tokens;  // token ids fed, per row
};

struct Scenario {
  int64_t pool_tokens = 0;  // distinct tokens (drafts included): rows of the input tensors
  std::vector<Request> requests;
  std::vector<ScenarioCall> calls;
  // Row of each request's first token in the [sum of lengths, HV, V] output o.
  std::vector<int64_t> first_row;
};

Scenario expand(const Params& p);

}  // namespace deltacheck::ops::serve
