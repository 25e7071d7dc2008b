// The gdr serving kernel contracts (docs/serving.md): the cache modes a serving runtime's state
// handling rests on, with their FP64 expectations.
//
// cache=ckpt (block checkpoints, vLLM mamba_cache_mode="all"): one prefill call, block size
// `calls` tokens. Sequence s has ceil(len_s / block) blocks; block_slots[s, b] names the pool row
// of block b. A block that ends inside the sequence gets the state after its last token (a
// checkpoint); the block holding the sequence's last token gets the state after that token (the
// running state, vLLM's "block of the last computed token"): at a sequence end that is a block
// boundary the two are the same row. A sequence shorter than a block writes no checkpoint, only
// its running state into the row of block 0; a zero-length one writes nothing. Entries past a
// sequence's blocks are -1. Initial states: initial_state [N, HV, K, V] as for cache=prefill.
//
// cache=accept (speculative verify with partial acceptance, vLLM's fused_recurrent with
// ssm_state_indices and num_accepted_tokens): layout batch[NxT], T = 1 + k tokens per sequence
// (the last verified token, then k drafts). state_indices[s, t] is the pool row of token t's state
// (of the previous spec call when read, of this call when written); num_accepted_tokens[s] in
// 1..T counts the accepted drafts plus the bonus token. Sequence s starts from row
// state_indices[s, num_accepted_tokens[s] - 1] (j = num_accepted_tokens - 1 drafts accepted: 0 is
// all rejected, k all accepted) and writes the state after each of its T tokens into row
// state_indices[s, t], in place on the pool.
//
// cache=tree (tree-shaped speculative drafts, SGLang's retrieve_parent_token / FlashInfer's tree
// verify): layout batch[NxT], T draft tokens per request forming a tree: parents[s, t] is the
// index of token t's parent among the request's tokens (parents come before their children), -1
// the request's start state, pool row state_slots[s] (read, never written). Token t's state is
// its parent's state (or the start state) updated with token t; it is written into row
// state_indices[s, t]; every token has its output. The shapes come from the seed: request s is a
// chain, a fan (one root, every other token its child), a star (every token from the start
// state) or a random tree, in a seeded rotation; batch[Nx1] is a batch of single nodes.
//
// In every mode a sequence's rows lie in a range of its own (shuffled inside, ranges in shuffled
// order, unused rows between them); unused rows must come back bit-identical.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cases/case.h"
#include "cases/tensor.h"
#include "ops/gdr/params.h"
#include "ops/operation.h"

namespace deltacheck::ops::gdr {

// cache=ckpt: tokens per block, and sequence s's blocks (ceil(len / block)).
int64_t ckpt_block_size(const Params& p);
int64_t ckpt_blocks(const Params& p, int64_t seq);
// Columns of block_slots: the most blocks of any sequence (at least 1).
int64_t ckpt_max_blocks(const Params& p);

// The pool of a serving case: its rows, each sequence's first row and row count, and the slot
// table (ckpt: block_slots [N, max_blocks]; accept, tree: state_indices [N, T]); tree: each
// request's start row (state_slots, inside its range).
struct ServingSlots {
  int64_t rows = 0;
  std::vector<int64_t> first, count, start;
  std::vector<int32_t> table;
  int64_t columns = 0;
};
ServingSlots serving_slots(const Params& p);

// cache=accept: num_accepted_tokens [N], each in 1..T, every value present when N >= T.
std::vector<int32_t> accepted_counts(const Params& p);

// cache=tree: the shapes a request's draft tree takes, and request s's shape.
enum class TreeShape { kChain, kFan, kStar, kRandom };
const char* name(TreeShape t);
TreeShape tree_shape(const Params& p, int64_t seq);
// cache=tree: parents [N, T] (row-major), each in -1 .. t - 1.
std::vector<int32_t> tree_parents(const Params& p);
// cache=tree: "token t of request s (parent u, a fan of 5)" for failure messages; t < 0: the
// request alone.
std::string describe_tree_token(const Params& p, int64_t seq, int64_t token);

// "" or what makes a serving case invalid.
std::string check_serving(const Params& p);

// The serving inputs: state_pool and the slot table (and num_accepted_tokens for accept,
// state_slots and parents for tree).
void generate_serving(const Params& p, cases::TensorMap& m);

std::vector<OutputSpec> serving_outputs(const Params& p);
std::vector<SeqSlice> serving_pool_slices(const Params& p);

// The expectation of a serving case through a prefill evaluation (the oracle or a baseline).
using Evaluate = std::function<Values(const cases::Case&, const cases::TensorMap&)>;
Values evaluate_serving(const cases::Case& c, const cases::TensorMap& in, const Evaluate& eval);

}  // namespace deltacheck::ops::gdr
