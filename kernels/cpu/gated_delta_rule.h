// CPU kernels for the gated delta rule: raw buffers in, no harness types.
//
// chunked_gated_delta_rule: the chunked (WY / UT-transform) form with fp32 accumulation; chunks
// never straddle a sequence boundary. recurrent_gated_delta_rule: the plain token-by-token
// recurrence in fp32 (an implementation under test like the chunked one; the tolerance
// baselines live in reference/ and share no code with these kernels).
#pragma once

#include <cstdint>

#include "core/half.h"
#include "core/status.h"
#include "kernels/common/gated_delta_rule_params.h"

namespace deltacheck::kernels::cpu {

// Ok, or InvalidArgument naming what makes p an invalid problem (what both kernels check first).
Status check_gated_delta_rule_params(const GatedDeltaRuleParams& p);

Status chunked_gated_delta_rule(const GatedDeltaRuleParams& p);

// Block checkpoints of a prefill (vLLM mamba_cache_mode="all", docs/serving.md): sequence s's
// tokens form blocks of block_size; block b's state goes to pool row block_slots[s * max_blocks +
// b]: the state after the block's last token, or, for the block holding the sequence's last token,
// the state after that token (a sequence shorter than a block writes no checkpoint, only that).
// Negative entries are not written. Chunks are cut at block boundaries too, so every checkpoint is
// a chunk's end state. p.final_state may be nullptr (the last block's row holds it).
struct StateCheckpoints {
  int64_t block_size = 0;                // >= 1
  const int32_t* block_slots = nullptr;  // [num_seqs, max_blocks]
  int64_t max_blocks = 0;
  float* pool = nullptr;  // fp32 [num_rows, HV, K, V]
  int64_t num_rows = 0;
};
Status chunked_gated_delta_rule(const GatedDeltaRuleParams& p, const StateCheckpoints& ckpt);
Status recurrent_gated_delta_rule(const GatedDeltaRuleParams& p);

}  // namespace deltacheck::kernels::cpu
