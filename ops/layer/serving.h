// The layer's serving state (docs/serving.md, "The layer's serving state"): the cache modes in
// which the whole linear-attention layer keeps its recurrent and conv states in slot-addressed
// pools, as serving runtimes do, with their FP64 expectations.
//
// cache=pool (continuous batching, vLLM's GDN prefill/decode with ssm_state_indices): state_pool
// [rows, HV, K, V] and conv_state_pool [rows, D, W-1] (fp32), state_slots [N] (one row of both per
// sequence; the last `calls` sequences are padding entries, slot -1: nothing of them is read or
// written) and has_initial_state [N] (int32, vLLM's has_initial_state): 0 = a new request on a
// recycled row, which must run from zero recurrent and conv states whatever the row holds (the
// has-initial-state contract). Every row holds garbage before the call (0.5 N(0,1) states, past
// inputs for the conv), so a kernel that reads a dirty row is caught; rows nobody addresses come
// back bit-identical. state=rand: every request continues; mixed: even sequences are new; none:
// every request is new.
//
// cache=accept (speculative verify, vLLM's GDN spec decode): N sequences of T = 1 + k tokens
// (packed[T*N]). state_indices [N, T] and num_accepted_tokens [N] (1..T, the accepted drafts plus
// the bonus token) as for gdr's cache=accept: sequence s starts its recurrent state from row
// state_indices[s, a - 1] (a = num_accepted_tokens[s]) and writes token t's state into row
// state_indices[s, t]. Its conv state is row state_indices[s, 0] of conv_state_pool [rows, D,
// W - 2 + T]: the previous verify's last W - 2 + T inputs, oldest first; the call's window is
// columns [a - 1, a - 1 + W - 1) (the W - 1 inputs that end at the last accepted token), and the
// row afterwards holds window columns 1 .. W - 2 followed by the call's T tokens, so that the
// next verify reads its window at its own a - 1 (vLLM's causal_conv1d_update with
// num_accepted_tokens). Every accepted count 1..T is in a batch of N >= T, counts above the conv
// width W - 1 included.
// cache=ckpt (block checkpoints of a prefill, vLLM's mamba_cache_mode="all" for the whole layer):
// block size `calls` (2..2048) tokens; initial states in as for cache=prefill; block_slots [N,
// max_blocks] names the row of both pools that gets block b's states: the recurrent state and
// the conv state (the last W-1 inputs) after the block's last token, or after the sequence's last
// token for the block that holds it; -1 past a sequence's blocks. Blocks shorter than W-1 make
// the conv state of a block end reach back into earlier blocks or the initial conv state.
// cache=spec (multi-token decode, SGLang's per-draft-token states): N sequences of T tokens
// (packed[T*N]) on rows state_slots [N] of both pools (no padding); outputs the pools after the
// call (each row: the states after the sequence's last token), token_states [N, T, HV, K, V] and
// token_conv_states [N, T, D, W-1], both states after every token, so that a runtime can resume
// from any accepted one.
#pragma once

#include <string>
#include <vector>

#include "cases/case.h"
#include "cases/tensor.h"
#include "ops/layer/params.h"
#include "ops/operation.h"
#include "ops/serving_rows.h"

namespace deltacheck::ops::layer {

// cache=pool: rows of both pools, each sequence's slot (-1: padding entry) and has_initial_state.
int64_t pool_size(const Params& p);
std::vector<int32_t> pool_slots(const Params& p);
std::vector<int32_t> has_initial_state(const Params& p);

// cache=accept: each sequence's T rows (state_indices[s, t] = rows_of[s][t]), the accepted
// counts, and the columns of a conv-state row (W - 2 + T).
PoolRows accept_rows(const Params& p);
std::vector<int32_t> accepted_counts(const Params& p);
int64_t conv_state_columns(const Params& p);

// cache=ckpt: each sequence's ceil(len / block) rows (block_slots[s, b] = rows_of[s][b]) and the
// columns of block_slots (the most blocks of any sequence, at least 1).
PoolRows ckpt_rows(const Params& p);
int64_t ckpt_max_blocks(const Params& p);

// "" or what makes a serving case invalid.
std::string check_serving(const Params& p);

// The serving inputs: the pools and their tables.
void generate_serving(const Params& p, cases::TensorMap& m);

std::vector<OutputSpec> serving_outputs(const Params& p);
std::vector<SeqSlice> serving_slices(const Params& p, const std::string& output);

// The expectation of a serving case through an evaluation of prefill layer cases (the oracle or
// a tolerance baseline): o, final_state and final_conv_state of every sequence.
Values evaluate_serving(const cases::Case& c, const cases::TensorMap& in, const Evaluate& eval);

// The suite's serving cases (seeds of their own, from 5200).
void serving_suite(cases::SuiteBuilder& b, cases::Tier t);

}  // namespace deltacheck::ops::layer
