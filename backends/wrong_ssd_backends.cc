// Deliberately wrong Mamba2 SSD implementations (wrong:ssd-*), each a bug real ones shipped, around
// the CPU SSD kernels (tests/ssd/test_ssd_verdicts.cc asserts each one's verdict):
//   wrong:ssd-chunk-axis    the inter-chunk state passing reduced over the wrong axis of the
//                           chunk-decay matrix (transformers#47246, NemotronH/Zamba2 torch_forward)
//   wrong:ssd-single-step   a multi-token call with a cache goes through the single-step path:
//                           every token is one step from the cached state (transformers PR #46741)
//   wrong:ssd-chunk-grid    the chunk-state grid is laid over the flattened batch but indexed per
//                           request: request 0 exact, later ones read its states (sglang#31833)
//   wrong:ssd-state-leak    the state is not reset between packed sequences
//   wrong:ssd-no-skip       D x dropped
//   wrong:ssd-no-gate       the z gate dropped
//   wrong:ssd-no-dt-bias    dt_bias not added
//   wrong:ssd-no-softplus   dt + dt_bias used without the softplus (then clamped at 0)
//   wrong:ssd-no-dt-limit   the dt_limit clamp ignored
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/ssd_backends.h"
#include "core/half.h"
#include "kernels/cpu/ssd.h"
#include "ops/ssd/problem.h"

namespace deltacheck::backends {
namespace {

using kernels::SsdParams;

enum class Bug {
  kChunkAxis,
  kSingleStep,
  kChunkGrid,
  kStateLeak,
  kNoSkip,
  kNoGate,
  kNoDtBias,
  kNoSoftplus,
  kNoDtLimit
};

// The chunk the transformers and sglang code paths use (mamba_ssm's and vLLM's default).
constexpr int64_t kChunk = 256;

// Tokens [begin, begin + len) of the flat token order as a one-sequence problem.
SsdParams piece(const SsdParams& p, int64_t begin, int64_t len, const float* s0, float* fs) {
  SsdParams s = p;
  s.batch = 1;
  s.seq_len = len;
  s.cu_seqlens = nullptr;
  s.num_seqs = 0;
  const int64_t es = dtype_size(p.dtype), hp = p.num_heads * p.head_dim,
                gn = p.num_groups * p.state_dim;
  auto off = [&](const void* base, int64_t per) -> const void* {
    return base ? static_cast<const char*>(base) + begin * per * es : nullptr;
  };
  s.x = off(p.x, hp);
  s.dt = off(p.dt, p.num_heads);
  s.B = off(p.B, gn);
  s.C = off(p.C, gn);
  s.z = off(p.z, hp);
  s.y = static_cast<char*>(p.y) + begin * hp * es;
  s.initial_state = s0;
  s.final_state = fs;
  return s;
}

struct Seq {
  int64_t begin, len;
};
std::vector<Seq> sequences(const SsdParams& p) {
  std::vector<Seq> v;
  const int64_t n = p.cu_seqlens ? p.num_seqs : p.batch;
  for (int64_t i = 0; i < n; ++i)
    v.push_back(p.cu_seqlens ? Seq{p.cu_seqlens[i], p.cu_seqlens[i + 1] - p.cu_seqlens[i]}
                             : Seq{i * p.seq_len, p.seq_len});
  return v;
}

// log of the decay a chunk applies to the state, per head: sum over its tokens of dt A.
std::vector<double> chunk_log_decay(const SsdParams& p, int64_t begin, int64_t len) {
  std::vector<double> a(p.num_heads, 0.0);
  for (int64_t t = begin; t < begin + len; ++t)
    for (int64_t h = 0; h < p.num_heads; ++h)
      a[h] +=
          kernels::cpu::ssd_dt(p, load_as_float(p.dt, p.dtype, t * p.num_heads + h), h) * p.A[h];
  return a;
}

// Transformers' torch_forward passes states between chunks through the chunk-decay matrix
// decay[z][c] = exp(Acum_z - Acum_c) (z >= c) over [initial, chunk states...]: the state entering
// chunk z is sum_c decay[z][c] states[c]. The bug sums over z instead: state c scaled by
// sum_z decay[z][c].
Status chunk_axis(const SsdParams& p) {
  const int64_t per_head = p.head_dim * p.state_dim, per = p.num_heads * per_head;
  const std::vector<Seq> seqs = sequences(p);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const Seq s = seqs[i];
    const int64_t K = (s.len + kChunk - 1) / kChunk;
    std::vector<std::vector<float>> states(K + 1, std::vector<float>(per, 0.0f));
    if (p.initial_state)
      std::memcpy(states[0].data(), p.initial_state + i * per, per * sizeof(float));
    std::vector<std::vector<double>> acum(K + 1, std::vector<double>(p.num_heads, 0.0));
    for (int64_t k = 0; k < K; ++k) {
      const int64_t b = s.begin + k * kChunk, len = std::min(kChunk, s.len - k * kChunk);
      if (Status st = kernels::cpu::chunked_ssd(piece(p, b, len, nullptr, states[k + 1].data()));
          !st.ok())
        return st;
      const std::vector<double> a = chunk_log_decay(p, b, len);
      for (int64_t h = 0; h < p.num_heads; ++h) acum[k + 1][h] = acum[k][h] + a[h];
    }
    std::vector<std::vector<float>> passed(K + 1, std::vector<float>(per));
    for (int64_t c = 0; c <= K; ++c)
      for (int64_t h = 0; h < p.num_heads; ++h) {
        double f = 0.0;
        for (int64_t z = c; z <= K; ++z) f += std::exp(acum[z][h] - acum[c][h]);
        for (int64_t j = 0; j < per_head; ++j)
          passed[c][h * per_head + j] = static_cast<float>(f * states[c][h * per_head + j]);
      }
    std::vector<float> scratch(per);
    for (int64_t k = 0; k < K; ++k) {
      const int64_t b = s.begin + k * kChunk, len = std::min(kChunk, s.len - k * kChunk);
      if (Status st = kernels::cpu::chunked_ssd(piece(p, b, len, passed[k].data(), scratch.data()));
          !st.ok())
        return st;
    }
    if (p.final_state) std::memcpy(p.final_state + i * per, passed[K].data(), per * sizeof(float));
  }
  return Status::Ok();
}

// With a cache (an initial state), every token of the call is one step from that cached state.
Status single_step(const SsdParams& p) {
  if (!p.initial_state) return kernels::cpu::chunked_ssd(p);
  const int64_t per = p.num_heads * p.head_dim * p.state_dim;
  const std::vector<Seq> seqs = sequences(p);
  std::vector<float> scratch(per);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const float* cached = p.initial_state + i * per;
    std::memcpy(scratch.data(), cached, per * sizeof(float));
    for (int64_t t = 0; t < seqs[i].len; ++t)
      if (Status st = kernels::cpu::ssd_state_update(
              piece(p, seqs[i].begin + t, 1, cached, scratch.data()));
          !st.ok())
        return st;
    if (p.final_state) std::memcpy(p.final_state + i * per, scratch.data(), per * sizeof(float));
  }
  return Status::Ok();
}

// Runs every sequence chunk by chunk from the state `entering(i, k, carried)` returns.
template <typename Entering>
Status by_chunks(const SsdParams& p, Entering entering) {
  const int64_t per = p.num_heads * p.head_dim * p.state_dim;
  const std::vector<Seq> seqs = sequences(p);
  std::vector<float> carried(per), next(per);
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (p.initial_state)
      std::memcpy(carried.data(), p.initial_state + i * per, per * sizeof(float));
    else
      std::fill(carried.begin(), carried.end(), 0.0f);
    for (int64_t k = 0; k * kChunk < seqs[i].len; ++k) {
      const int64_t b = seqs[i].begin + k * kChunk,
                    len = std::min(kChunk, seqs[i].len - k * kChunk);
      const float* s0 = entering(i, k, carried.data());
      if (Status st = kernels::cpu::chunked_ssd(piece(p, b, len, s0, next.data())); !st.ok())
        return st;
      carried.swap(next);
    }
    if (p.final_state) std::memcpy(p.final_state + i * per, carried.data(), per * sizeof(float));
  }
  return Status::Ok();
}

// The grid of chunk-entering states, one per chunk of the flattened batch (request after
// request), filled right; request r's chunk k then reads grid[k] instead of grid[first_r + k].
Status chunk_grid(const SsdParams& p) {
  const int64_t per = p.num_heads * p.head_dim * p.state_dim;
  std::vector<std::vector<float>> grid;
  if (Status st = by_chunks(p,
                            [&](size_t, int64_t, const float* carried) {
                              grid.emplace_back(carried, carried + per);
                              return carried;
                            });
      !st.ok())
    return st;
  return by_chunks(p, [&](size_t, int64_t k, const float* carried) {
    return k < static_cast<int64_t>(grid.size()) ? grid[k].data() : carried;
  });
}

// Sequence i > 0 starts from sequence i - 1's final state instead of its own.
Status state_leak(const SsdParams& p) {
  if (!p.cu_seqlens) return kernels::cpu::chunked_ssd(p);  // batch rows are separate calls
  const int64_t per = p.num_heads * p.head_dim * p.state_dim;
  std::vector<float> carried(per, 0.0f), next(per);
  const std::vector<Seq> seqs = sequences(p);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const float* own = p.initial_state ? p.initial_state + i * per : nullptr;
    if (Status st = kernels::cpu::chunked_ssd(
            piece(p, seqs[i].begin, seqs[i].len, i == 0 ? own : carried.data(), next.data()));
        !st.ok())
      return st;
    carried.swap(next);
    if (p.final_state) std::memcpy(p.final_state + i * per, carried.data(), per * sizeof(float));
  }
  return Status::Ok();
}

class WrongSsd : public Backend {
 public:
  WrongSsd(std::string name, std::string description, Bug bug)
      : name_(std::move(name)), description_(std::move(description)), bug_(bug) {}
  std::string name() const override { return name_; }
  std::string description() const override { return "deliberately wrong: " + description_; }
  bool deliberately_wrong() const override { return true; }
  Support supports(const cases::Case& c) const override {
    if (c.op() == "ssd") return Support::Yes();
    return Support::No(name_ + " implements only ssd");
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    const ops::ssd::Params d = ops::ssd::decode(c);
    SsdParams p = ops::ssd::kernel_params(d, in, out);
    switch (bug_) {
      case Bug::kChunkAxis:
        return chunk_axis(p);
      case Bug::kSingleStep:
        return single_step(p);
      case Bug::kChunkGrid:
        return chunk_grid(p);
      case Bug::kStateLeak:
        return state_leak(p);
      case Bug::kNoSkip:
        p.D = nullptr;
        break;
      case Bug::kNoGate:
        p.z = nullptr;
        break;
      case Bug::kNoDtBias:
        p.dt_bias = nullptr;
        break;
      case Bug::kNoSoftplus:
        p.dt_softplus = false;
        break;
      case Bug::kNoDtLimit:
        p.dt_min = 0.0f;
        p.dt_max = INFINITY;
        break;
    }
    if (d.cache == ops::ssd::Cache::kDecode) return kernels::cpu::ssd_state_update(p);
    return kernels::cpu::chunked_ssd(p);
  }

 private:
  std::string name_, description_;
  Bug bug_;
};

}  // namespace

std::vector<std::unique_ptr<Backend>> make_wrong_ssd_backends() {
  std::vector<std::unique_ptr<Backend>> v;
  auto add = [&](const char* name, const char* what, Bug bug) {
    v.push_back(std::make_unique<WrongSsd>(name, what, bug));
  };
  add("wrong:ssd-chunk-axis",
      "inter-chunk SSD state passing reduced over the wrong axis (transformers#47246)",
      Bug::kChunkAxis);
  add("wrong:ssd-single-step",
      "multi-token SSD calls with a cache through the single-step path (transformers PR #46741)",
      Bug::kSingleStep);
  add("wrong:ssd-chunk-grid",
      "SSD chunk-state grid over the flattened batch indexed per request (sglang#31833)",
      Bug::kChunkGrid);
  add("wrong:ssd-state-leak", "SSD state not reset between packed sequences", Bug::kStateLeak);
  add("wrong:ssd-no-skip", "SSD without the D x skip", Bug::kNoSkip);
  add("wrong:ssd-no-gate", "SSD without the z gate", Bug::kNoGate);
  add("wrong:ssd-no-dt-bias", "SSD dt without dt_bias", Bug::kNoDtBias);
  add("wrong:ssd-no-softplus", "SSD dt + dt_bias without the softplus", Bug::kNoSoftplus);
  add("wrong:ssd-no-dt-limit", "SSD dt_limit clamp ignored", Bug::kNoDtLimit);
  return v;
}

}  // namespace deltacheck::backends
