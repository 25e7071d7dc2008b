// The cuda backend's gdr cases: prefill (cache none / prefill, and the prefill calls the harness
// drives for chunked and dynamic) through the chunked kernel; one-token decode (cache=decode, and
// the decode steps of dynamic) through recurrent_decode; pool in place on a device copy of the
// state pool through the chunked kernel with slot indices, or, when every sequence has one token
// (a serving decode batch), through recurrent_decode with the slots; spec (multi-token decode)
// through recurrent_decode with a state per token; the serving contracts accept and tree through
// recurrent_decode with their row tables; ckpt through the chunked kernel block by block. The
// same mapping as the cpu backend (cpu_gdr.cc), on device buffers.
#include <algorithm>
#include <string>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/device_tensors.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/gated_delta_rule.h"
#include "ops/gdr/problem.h"
#include "ops/gdr/serving.h"

namespace deltacheck::backends {
namespace {

using cuda_backend::DeviceTensor;
using cuda_backend::DeviceTensors;
using kernels::cuda::cuda_status;
namespace kc = kernels::cuda;

// Kernel parameters pointing into the device mirrors of the case's inputs and outputs.
kernels::GatedDeltaRuleParams device_params(const ops::gdr::Params& d, const DeviceTensors& in,
                                            const DeviceTensors& out) {
  kernels::GatedDeltaRuleParams p = ops::gdr::kernel_params(d, in, out);
  if (const DeviceTensor* slots = in.find("state_slots")) {
    p.state_slots = slots->as<int32_t>();
    p.num_state_rows = d.N;  // replaced by the pool's rows below
  }
  return p;
}

// cache=ckpt (docs/serving.md): the chunked kernel block by block and sequence by sequence. Block
// b of sequence s runs from the state block b - 1 ended with (its pool row; for b = 0 the
// sequence's initial state) and writes its end state straight into its row block_slots[s, b] of
// the output pool, which starts as a copy of the input pool. `slots` is the host's block_slots.
Status launch_ckpt(const ops::gdr::Params& d, const kernels::GatedDeltaRuleParams& p,
                   const cases::Tensor& slots, const DeviceTensor& pool_in,
                   const DeviceTensor& pool, cudaStream_t stream) {
  if (Status st = cuda_status(cudaMemcpyAsync(pool.data(), pool_in.data(), pool.nbytes(),
                                              cudaMemcpyDeviceToDevice, stream),
                              "copy of the state pool");
      !st.ok())
    return st;
  const int64_t per = d.HV * d.K * d.V, cols = slots.shape()[1];
  const int64_t bs = ops::gdr::ckpt_block_size(d), act = dtype_size(d.dtype);
  const int64_t rows = static_cast<int64_t>(pool.nbytes() / sizeof(float)) / per;
  auto at_token = [](const void* base, int64_t token, int64_t per_token, int64_t bytes) {
    return static_cast<const char*>(base) + token * per_token * bytes;
  };
  int64_t first = 0;  // the sequence's first token in the flat [B * T] token axis
  for (int64_t s = 0; s < d.N; ++s) {
    const int64_t len = d.layout.lengths[s];
    const float* from = p.initial_state ? p.initial_state + s * per : nullptr;
    for (int64_t b = 0; b * bs < len; ++b) {
      const int32_t row = slots.as<int32_t>()[s * cols + b];
      if (row < 0 || row >= rows)
        return Status::InvalidArgument("block_slots[" + std::to_string(s) + ", " +
                                       std::to_string(b) + "] = " + std::to_string(row) +
                                       " outside the pool's " + std::to_string(rows) + " rows");
      const int64_t t0 = first + b * bs, n = std::min(bs, len - b * bs);
      kernels::GatedDeltaRuleParams piece = p;
      piece.batch = 1;
      piece.seq_len = n;
      piece.cu_seqlens = nullptr;
      piece.num_seqs = 1;
      piece.state_slots = nullptr;
      piece.num_state_rows = 1;
      piece.q = at_token(p.q, t0, d.H * d.K, act);
      piece.k = at_token(p.k, t0, d.H * d.K, act);
      piece.v = at_token(p.v, t0, d.HV * d.V, act);
      piece.g = reinterpret_cast<const float*>(at_token(p.g, t0, d.HV, sizeof(float)));
      piece.beta = at_token(p.beta, t0, d.HV, act);
      piece.o = const_cast<char*>(at_token(p.o, t0, d.HV * d.V, act));
      piece.initial_state = from;
      piece.final_state = pool.as<float>() + row * per;
      if (Status st = kc::chunked_gated_delta_rule(piece, stream); !st.ok()) return st;
      from = piece.final_state;
    }
    first += len;
  }
  return Status::Ok();
}

// Queues the kernels of the case on `stream` (the outputs' mirrors already hold the runner's
// poisoned buffers). `host_in`: the case's inputs on the host (the slot tables).
Status launch(const ops::gdr::Params& d, const DeviceTensors& in, const DeviceTensors& out,
              const cases::TensorMap& host_in, cudaStream_t stream) {
  using ops::gdr::Cache;
  kernels::GatedDeltaRuleParams p = device_params(d, in, out);
  if (d.cache == Cache::kCkpt) {
    if (Status st = kc::validate_sequence_layout(p, stream); !st.ok()) return st;
    return launch_ckpt(d, p, host_in.at("block_slots"), in.at("state_pool"), out.at("state_pool"),
                       stream);
  }
  if (d.cache == Cache::kAccept || d.cache == Cache::kTree) {
    // The serving decode contracts, in place on the output pool (a copy of the input pool).
    const DeviceTensor& pool = out.at("state_pool");
    if (Status st = cuda_status(cudaMemcpyAsync(pool.data(), in.at("state_pool").data(),
                                                pool.nbytes(), cudaMemcpyDeviceToDevice, stream),
                                "copy of the state pool");
        !st.ok())
      return st;
    kc::RecurrentDecodeParams r = kernels::decode_layout(p, d.T);
    r.state = pool.as<float>();
    r.num_state_rows = static_cast<int64_t>(pool.nbytes() / sizeof(float)) / (d.HV * d.K * d.V);
    r.state_indices = in.at("state_indices").as<int32_t>();
    if (d.cache == Cache::kTree) {
      r.state_slots = in.at("state_slots").as<int32_t>();
      r.parents = in.at("parents").as<int32_t>();
    } else {
      r.num_accepted_tokens = in.at("num_accepted_tokens").as<int32_t>();
    }
    return kc::recurrent_decode(r, stream);
  }
  if (d.pooled()) {
    // In place on the output pool, which starts as a copy of the input pool.
    const DeviceTensor& pool_in = in.at("state_pool");
    const DeviceTensor& pool = out.at("state_pool");
    if (Status st = cuda_status(cudaMemcpyAsync(pool.data(), pool_in.data(), pool.nbytes(),
                                                cudaMemcpyDeviceToDevice, stream),
                                "copy of the state pool");
        !st.ok())
      return st;
    p.initial_state = pool.as<float>();
    p.final_state = pool.as<float>();
    p.num_state_rows = static_cast<int64_t>(pool.nbytes() / sizeof(float)) / (d.HV * d.K * d.V);
    if (Status st = kc::validate_sequence_layout(p, stream); !st.ok()) return st;
    // A pool call with one token per sequence is a decode batch: the decode kernel with slots.
    if (d.cache == Cache::kPool && !ops::gdr::one_token_per_sequence(d))
      return kc::chunked_gated_delta_rule(p, stream);
    kc::RecurrentDecodeParams r = kernels::decode_layout(p, d.cache == Cache::kSpec ? d.T : 1);
    r.state = pool.as<float>();
    r.state_slots = p.state_slots;
    r.num_state_rows = p.num_state_rows;
    if (const DeviceTensor* ts = out.find("token_states")) r.token_states = ts->as<float>();
    return kc::recurrent_decode(r, stream);
  }
  if (Status st = kc::validate_sequence_layout(p, stream); !st.ok()) return st;
  if (d.cache == Cache::kDecode) {
    // The decode kernel updates a state in place: the final state, starting as the initial one.
    const DeviceTensor& state = out.at("final_state");
    const cudaError_t err = p.initial_state
                                ? cudaMemcpyAsync(state.data(), p.initial_state, state.nbytes(),
                                                  cudaMemcpyDeviceToDevice, stream)
                                : cudaMemsetAsync(state.data(), 0, state.nbytes(), stream);
    if (Status st = cuda_status(err, "initialization of the decode state"); !st.ok()) return st;
    kc::RecurrentDecodeParams r = kernels::decode_layout(p, 1);
    r.state = state.as<float>();
    return kc::recurrent_decode(r, stream);
  }
  return kc::chunked_gated_delta_rule(p, stream);
}

}  // namespace

Status run_cuda_gdr_case(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) {
  const ops::gdr::Params d = ops::gdr::decode(c);
  return cuda_backend::run_on_device(
      in, out, [&](const DeviceTensors& din, const DeviceTensors& dout, cudaStream_t stream) {
        return launch(d, din, dout, in, stream);
      });
}

}  // namespace deltacheck::backends
