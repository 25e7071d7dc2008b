// The cpu backend's gdr cases: prefill through the chunked kernel, one-token decode through the
// recurrent decode kernel, and the pooled modes in place on a copy of the state pool. A pool call
// in which every sequence has exactly one token is a serving decode batch: it goes to the
// recurrent decode kernel with the slot indices (padding entries skipped), as vLLM routes decode
// batches to its recurrent kernel with ssm_state_indices; other pool calls to the chunked kernel.
#include <cstring>

#include "backends/backends.h"
#include "kernels/cpu/gated_delta_rule.h"
#include "kernels/cpu/recurrent_decode.h"
#include "ops/gdr/problem.h"
#include "ops/gdr/serving.h"

namespace deltacheck::backends {

kernels::RecurrentDecodeParams decode_params(const ops::gdr::Params& d, const cases::TensorMap& in,
                                             cases::TensorMap& out, int64_t tokens) {
  return kernels::decode_layout(ops::gdr::kernel_params(d, in, out), tokens);
}

namespace {

// cache=ckpt: the chunked prefill writing block checkpoints into a copy of the pool; accept: the
// recurrent decode resuming from each sequence's accepted row; tree: the recurrent decode taking
// each token from its parent's row.
Status run_cpu_serving_case(const ops::gdr::Params& d, const cases::TensorMap& in,
                            cases::TensorMap& out) {
  cases::Tensor& pool = out.at("state_pool");
  std::memcpy(pool.data(), in.at("state_pool").data(), pool.nbytes());
  if (d.cache == ops::gdr::Cache::kCkpt) {
    const cases::Tensor& slots = in.at("block_slots");
    kernels::cpu::StateCheckpoints ck;
    ck.block_size = ops::gdr::ckpt_block_size(d);
    ck.block_slots = slots.as<int32_t>();
    ck.max_blocks = slots.shape()[1];
    ck.pool = pool.as<float>();
    ck.num_rows = pool.shape()[0];
    return kernels::cpu::chunked_gated_delta_rule(ops::gdr::kernel_params(d, in, out), ck);
  }
  kernels::RecurrentDecodeParams p = decode_params(d, in, out, d.T);
  p.state = pool.as<float>();
  p.num_state_rows = pool.shape()[0];
  p.state_indices = in.at("state_indices").as<int32_t>();
  if (d.cache == ops::gdr::Cache::kTree) {
    p.state_slots = in.at("state_slots").as<int32_t>();
    p.parents = in.at("parents").as<int32_t>();
  } else {
    p.num_accepted_tokens = in.at("num_accepted_tokens").as<int32_t>();
  }
  return kernels::cpu::recurrent_decode(p);
}

}  // namespace

Status run_cpu_gdr_case(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) {
  using ops::gdr::Cache;
  const ops::gdr::Params d = ops::gdr::decode(c);
  if (d.serving()) return run_cpu_serving_case(d, in, out);
  if (d.pooled()) {
    cases::Tensor& pool = out.at("state_pool");
    std::memcpy(pool.data(), in.at("state_pool").data(), pool.nbytes());
    const cases::Tensor& slots = in.at("state_slots");
    if (d.cache == Cache::kPool && !ops::gdr::one_token_per_sequence(d)) {
      kernels::GatedDeltaRuleParams p = ops::gdr::kernel_params(d, in, out);
      p.initial_state = pool.as<float>();
      p.final_state = pool.as<float>();  // in place on the pool
      p.state_slots = slots.as<int32_t>();
      p.num_state_rows = pool.shape()[0];
      return kernels::cpu::chunked_gated_delta_rule(p);
    }
    // spec: T draft tokens per sequence (batch[NxT]); pool decode: one token per sequence.
    const int64_t tokens = d.cache == Cache::kSpec ? d.T : 1;
    kernels::RecurrentDecodeParams p = decode_params(d, in, out, tokens);
    p.state = pool.as<float>();
    p.state_slots = slots.as<int32_t>();
    p.num_state_rows = pool.shape()[0];
    if (cases::Tensor* ts = out.find("token_states")) p.token_states = ts->as<float>();
    return kernels::cpu::recurrent_decode(p);
  }
  if (d.cache == Cache::kDecode) {
    cases::Tensor& state = out.at("final_state");
    if (const cases::Tensor* s0 = in.find("initial_state"))
      std::memcpy(state.data(), s0->data(), state.nbytes());
    else
      std::memset(state.data(), 0, state.nbytes());
    kernels::RecurrentDecodeParams p = decode_params(d, in, out, 1);
    p.state = state.as<float>();
    return kernels::cpu::recurrent_decode(p);
  }
  return kernels::cpu::chunked_gated_delta_rule(ops::gdr::kernel_params(d, in, out));
}

}  // namespace deltacheck::backends
