// Host side of the CUDA gated delta rule: problem checks, launch configuration, dtype dispatch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <unordered_set>
#include <vector>

#include "kernels/common/serving_rows.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/gated_delta_rule.h"
#include "kernels/cuda/gated_delta_rule_kernels.cuh"

namespace deltacheck::kernels::cuda {
namespace {

int64_t sequence_count(const GatedDeltaRuleParams& p) {
  return p.cu_seqlens ? p.num_seqs : p.batch;
}

// The serving decode tables of recurrent_decode (device pointers), none for the other entries.
struct DecodeTables {
  const int32_t* state_indices = nullptr;
  const int32_t* num_accepted_tokens = nullptr;
  const int32_t* parents = nullptr;
};

gdr::KernelArgs make_args(const GatedDeltaRuleParams& p, float* token_states,
                          const DecodeTables& tables) {
  gdr::KernelArgs a{};
  a.seq_len = p.seq_len;
  a.num_heads = p.num_heads;
  a.num_value_heads = p.num_value_heads;
  a.key_dim = static_cast<int>(p.key_dim);
  a.value_dim = p.value_dim;
  a.q = p.q;
  a.k = p.k;
  a.v = p.v;
  a.g = p.g;
  a.beta = p.beta;
  a.o = p.o;
  a.cu_seqlens = p.cu_seqlens;
  a.num_seqs = sequence_count(p);
  a.initial_state = p.initial_state;
  a.final_state = p.final_state;
  a.state_slots = p.state_slots;
  a.num_state_rows = p.num_state_rows > 0 ? p.num_state_rows : a.num_seqs;
  a.token_states = token_states;
  a.token_rows = tables.state_indices;
  a.num_accepted = tables.num_accepted_tokens;
  a.parents = tables.parents;
  a.scale = p.scale > 0.0f ? p.scale : 1.0f / std::sqrt(static_cast<float>(p.key_dim));
  a.use_qk_l2norm = p.use_qk_l2norm;
  a.chunk_size = static_cast<int>(p.chunk_size);
  a.num_value_blocks = ceil_div(p.value_dim, gdr::kBlockV);
  a.num_items = a.num_seqs * p.num_value_heads * a.num_value_blocks;
  return a;
}

enum class Algorithm { kChunked, kRecurrent };

template <typename T>
Status launch(Algorithm algo, const gdr::KernelArgs& a, cudaStream_t stream) {
  const int64_t smem = algo == Algorithm::kChunked ? gdr::chunked_smem_bytes(a.key_dim)
                                                   : gdr::recurrent_smem_bytes(a.key_dim);
  void (*kernel)(gdr::KernelArgs) =
      algo == Algorithm::kChunked ? gdr::chunked_kernel<T> : gdr::recurrent_kernel<T>;
  if (Status st =
          opt_in_shared_memory(reinterpret_cast<const void*>(kernel), smem, "gated delta rule");
      !st.ok())
    return st;
  // One CTA per work item up to the grid.x limit; beyond it the kernels loop over items.
  const int64_t grid = std::min<int64_t>(a.num_items, std::numeric_limits<int32_t>::max());
  kernel<<<static_cast<unsigned>(grid), gdr::kThreads, static_cast<size_t>(smem), stream>>>(a);
  return cuda_status(cudaGetLastError(), algo == Algorithm::kChunked
                                             ? "launch of the chunked gated delta rule"
                                             : "launch of the recurrent gated delta rule");
}

Status check_common(const GatedDeltaRuleParams& p);

Status run(Algorithm algo, const GatedDeltaRuleParams& p, float* token_states, cudaStream_t stream,
           const DecodeTables& tables = {}) {
  const Status st =
      algo == Algorithm::kChunked ? gated_delta_rule_can_implement(p) : check_common(p);
  if (!st.ok()) return st;
  const gdr::KernelArgs a = make_args(p, token_states, tables);
  if (a.num_items == 0) return Status::Ok();
  switch (p.dtype) {
    case DType::kF32:
      return launch<float>(algo, a, stream);
    case DType::kBF16:
      return launch<__nv_bfloat16>(algo, a, stream);
    case DType::kF16:
      return launch<__half>(algo, a, stream);
    default:
      break;
  }
  return Status::Unsupported(std::string("gated delta rule: dtype ") + dtype_name(p.dtype) +
                             " (supported: fp32, bf16, fp16)");
}

// What both kernels require (the recurrent kernel ignores chunk_size).
Status check_common(const GatedDeltaRuleParams& p) {
  if (p.batch < 1 || p.seq_len < 0) return Status::InvalidArgument("batch must be >= 1, T >= 0");
  if (p.num_heads < 1 || p.num_value_heads < 1 || p.key_dim < 1 || p.value_dim < 1)
    return Status::InvalidArgument("head counts and head dims must be >= 1");
  if (p.num_value_heads % p.num_heads != 0) return Status::InvalidArgument("HV % H != 0");
  if (!p.q || !p.k || !p.v || !p.g || !p.beta || !p.o)
    return Status::InvalidArgument("q, k, v, g, beta and o are required");
  if (p.dtype != DType::kF32 && p.dtype != DType::kBF16 && p.dtype != DType::kF16)
    return Status::Unsupported(std::string("dtype ") + dtype_name(p.dtype) +
                               " (supported: fp32, bf16, fp16)");
  if (p.key_dim > gdr::kMaxKeyDim) {
    return Status::Unsupported("key_dim " + std::to_string(p.key_dim) +
                               " > 128: q/k tiles and per-thread state rows are sized for 128");
  }
  if (p.cu_seqlens) {
    if (p.batch != 1) return Status::InvalidArgument("cu_seqlens requires batch == 1");
    if (p.num_seqs < 0) return Status::InvalidArgument("num_seqs must be >= 0");
  }
  const int64_t n = sequence_count(p);
  if (!p.state_slots && p.num_state_rows > 0 && p.num_state_rows < n &&
      (p.initial_state || p.final_state)) {
    return Status::InvalidArgument("num_state_rows " + std::to_string(p.num_state_rows) + " < " +
                                   std::to_string(n) + " sequences without state_slots");
  }
  return Status::Ok();
}

}  // namespace

Status gated_delta_rule_can_implement(const GatedDeltaRuleParams& p) {
  if (Status st = check_common(p); !st.ok()) return st;
  if (p.chunk_size < 1) return Status::InvalidArgument("chunk_size must be >= 1");
  if (p.chunk_size > gdr::kChunk) {
    return Status::Unsupported("chunk_size " + std::to_string(p.chunk_size) +
                               " > 64: the chunk tiles are sized for 64 tokens");
  }
  return Status::Ok();
}

Status validate_sequence_layout(const GatedDeltaRuleParams& p, cudaStream_t stream,
                                bool allow_tail) {
  if (Status st = check_common(p); !st.ok()) return st;
  const int64_t n = sequence_count(p);
  std::vector<int64_t> cu;
  std::vector<int32_t> slots;
  if (p.cu_seqlens) {
    cu.resize(static_cast<size_t>(n + 1));
    if (Status st =
            cuda_status(cudaMemcpyAsync(cu.data(), p.cu_seqlens, cu.size() * sizeof(int64_t),
                                        cudaMemcpyDeviceToHost, stream),
                        "copy of cu_seqlens");
        !st.ok())
      return st;
  }
  if (p.state_slots) {
    slots.resize(static_cast<size_t>(n));
    if (Status st =
            cuda_status(cudaMemcpyAsync(slots.data(), p.state_slots, slots.size() * sizeof(int32_t),
                                        cudaMemcpyDeviceToHost, stream),
                        "copy of state_slots");
        !st.ok())
      return st;
  }
  if (Status st = cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize"); !st.ok())
    return st;
  if (p.cu_seqlens) {
    if (cu[0] != 0) return Status::InvalidArgument("cu_seqlens[0] must be 0");
    if (allow_tail && cu[static_cast<size_t>(n)] > p.seq_len)
      return Status::InvalidArgument("cu_seqlens ends past T");
    if (!allow_tail && cu[static_cast<size_t>(n)] != p.seq_len)
      return Status::InvalidArgument("cu_seqlens must end at T");
    for (int64_t i = 0; i < n; ++i) {
      if (cu[static_cast<size_t>(i + 1)] < cu[static_cast<size_t>(i)])
        return Status::InvalidArgument("cu_seqlens decreases at " + std::to_string(i + 1));
    }
  }
  if (p.state_slots) {
    const int64_t rows = p.num_state_rows > 0 ? p.num_state_rows : n;
    std::unordered_set<int32_t> seen;
    for (int64_t i = 0; i < n; ++i) {
      const int32_t s = slots[static_cast<size_t>(i)];
      if (s >= rows) {
        return Status::InvalidArgument("state slot " + std::to_string(s) + " of sequence " +
                                       std::to_string(i) + " >= rows " + std::to_string(rows));
      }
      if (s >= 0 && !seen.insert(s).second) {
        return Status::InvalidArgument("state slot " + std::to_string(s) +
                                       " is used by two sequences");
      }
    }
  }
  return Status::Ok();
}

Status chunked_gated_delta_rule(const GatedDeltaRuleParams& p, cudaStream_t stream) {
  return run(Algorithm::kChunked, p, nullptr, stream);
}

Status recurrent_gated_delta_rule(const GatedDeltaRuleParams& p, cudaStream_t stream) {
  return run(Algorithm::kRecurrent, p, nullptr, stream);
}

Status recurrent_decode(const RecurrentDecodeParams& p, cudaStream_t stream) {
  if (p.num_seqs < 0 || p.tokens_per_seq < 0)
    return Status::InvalidArgument("num_seqs and tokens_per_seq must be >= 0");
  if (!p.state) return Status::InvalidArgument("recurrent_decode: state is required");
  if (p.num_seqs == 0) return Status::Ok();
  GatedDeltaRuleParams r;
  r.batch = p.num_seqs;
  r.seq_len = p.tokens_per_seq;
  r.num_heads = p.num_heads;
  r.num_value_heads = p.num_value_heads;
  r.key_dim = p.key_dim;
  r.value_dim = p.value_dim;
  r.dtype = p.dtype;
  r.q = p.q;
  r.k = p.k;
  r.v = p.v;
  r.g = p.g;
  r.beta = p.beta;
  r.o = p.o;
  r.initial_state = p.state;
  r.final_state = p.state;
  r.state_slots = p.state_slots;
  r.num_state_rows = p.num_state_rows;
  r.scale = p.scale;
  r.use_qk_l2norm = p.use_qk_l2norm;
  if (!p.state_indices) return run(Algorithm::kRecurrent, r, p.token_states, stream);
  // The serving contracts: their tables checked on the host, as the CPU kernel checks them.
  if (p.token_states)
    return Status::InvalidArgument("recurrent_decode: token_states with state_indices");
  const int64_t n = p.num_seqs, T = p.tokens_per_seq;
  std::vector<int32_t> indices(static_cast<size_t>(n * T)), accepted, parents, slots;
  auto fetch = [&](std::vector<int32_t>& host, const int32_t* device, size_t count,
                   const char* what) {
    host.resize(count);
    return cuda_status(cudaMemcpyAsync(host.data(), device, count * sizeof(int32_t),
                                       cudaMemcpyDeviceToHost, stream),
                       what);
  };
  if (Status st = fetch(indices, p.state_indices, indices.size(), "copy of state_indices");
      !st.ok())
    return st;
  if (p.parents) {
    if (!p.state_slots) return Status::InvalidArgument("parents need state_slots (start rows)");
    if (Status st = fetch(parents, p.parents, indices.size(), "copy of parents"); !st.ok())
      return st;
    if (Status st = fetch(slots, p.state_slots, static_cast<size_t>(n), "copy of state_slots");
        !st.ok())
      return st;
  } else if (p.num_accepted_tokens) {
    if (Status st = fetch(accepted, p.num_accepted_tokens, static_cast<size_t>(n),
                          "copy of num_accepted_tokens");
        !st.ok())
      return st;
  }
  if (Status st = cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize"); !st.ok())
    return st;
  const int64_t rows = p.num_state_rows > 0 ? p.num_state_rows : n;
  if (Status st = check_serving_rows(indices.data(), accepted.empty() ? nullptr : accepted.data(),
                                     parents.empty() ? nullptr : parents.data(),
                                     slots.empty() ? nullptr : slots.data(), n, T, rows);
      !st.ok())
    return st;
  r.state_slots = p.parents ? p.state_slots : nullptr;
  r.num_state_rows = rows;
  return run(Algorithm::kRecurrent, r, nullptr, stream,
             {p.state_indices, p.parents ? nullptr : p.num_accepted_tokens, p.parents});
}

}  // namespace deltacheck::kernels::cuda
