// The gdr op on the panel's formulations: sequences out of the case's layout, states out of
// initial_state or a slot-addressed pool, results back into o, final_state, state_pool and
// token_states.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/right/panel.h"
#include "backends/right/rounding.h"
#include "backends/right/rule.h"
#include "ops/gdr/problem.h"
#include "ops/gdr/serving.h"

namespace deltacheck::backends::right {

std::vector<int64_t> sequence_offsets(const cases::TensorMap& in, int64_t rows,
                                      int64_t row_length) {
  std::vector<int64_t> offs;
  if (const cases::Tensor* cu = in.find("cu_seqlens")) {
    for (int64_t i = 0; i < cu->numel(); ++i) offs.push_back(static_cast<int64_t>(cu->get(i)));
    return offs;
  }
  for (int64_t b = 0; b <= rows; ++b) offs.push_back(b * row_length);
  return offs;
}

template <typename T>
void rule_sequence(Formulation f, cases::DType activations, const SequenceInputs<T>& in, T* state,
                   T* o, T* token_states) {
  const int64_t L = in.length, K = in.K, V = in.V, per = K * V, group = in.HV / in.H;
  std::vector<T> q(L * K), k(L * K), v(L * V), g(L), beta(L), out(L * V), ts;
  if (token_states) ts.resize(static_cast<size_t>(L * per));
  for (int64_t h = 0; h < in.HV; ++h) {
    const int64_t kh = h / group;
    for (int64_t t = 0; t < L; ++t) {
      std::copy_n(&in.q[(t * in.H + kh) * K], K, &q[t * K]);
      std::copy_n(&in.k[(t * in.H + kh) * K], K, &k[t * K]);
      std::copy_n(&in.v[(t * in.HV + h) * V], V, &v[t * V]);
      g[t] = in.g[t * in.HV + h];
      beta[t] = in.beta[t * in.HV + h];
      if (in.l2 && f == Formulation::kRecurrentL2MaxEps) {  // the planted bug
        for (T* x : {&q[t * K], &k[t * K]}) {
          T ss = 0;
          for (int64_t i = 0; i < K; ++i) ss += x[i] * x[i];
          const T inv = T(1) / std::max(std::sqrt(ss), T(1e-6));
          for (int64_t i = 0; i < K; ++i) x[i] *= inv;
        }
      } else if (in.l2 && f == Formulation::kChunkedNormAct && activations == cases::DType::kBF16) {
        // The L2 norm on bf16 tensors (Transformers 4.57). Not on fp16 ones: there x * x
        // overflows above |x| ~ 256 and underflows below ~2.4e-4 (the hugeqk and tinyqk regimes),
        // a form no correct fp16 kernel uses, which the fp16 ceiling rightly rejects.
        l2_normalize_in(&q[t * K], K, activations);
        l2_normalize_in(&k[t * K], K, activations);
      } else if (in.l2) {
        l2_normalize(&q[t * K], K);
        l2_normalize(&k[t * K], K);
      }
    }
    HeadSequence<T> s;
    s.length = L, s.K = K, s.V = V;
    s.q = q.data(), s.k = k.data(), s.v = v.data(), s.g = g.data(), s.beta = beta.data();
    s.scale = T(1) / std::sqrt(static_cast<T>(K));
    T* S = state + h * per;
    T* ts_head = token_states ? ts.data() : nullptr;
    if (f == Formulation::kRecurrent || f == Formulation::kRecurrentL2MaxEps)
      recurrent_rule(s, S, out.data(), ts_head);
    else
      chunked_rule(s, S, out.data(), ts_head,
                   f == Formulation::kChunkedLowp || f == Formulation::kChunkedLowpSolve
                       ? activations
                       : cases::DType::kF32,
                   {f == Formulation::kChunked128 ? 128 : kChunk, f == Formulation::kChunkedCumsum,
                    f == Formulation::kChunkedLowpSolve});
    for (int64_t t = 0; t < L; ++t) {
      std::copy_n(&out[t * V], V, &o[(t * in.HV + h) * V]);
      if (token_states) std::copy_n(&ts[t * per], per, &token_states[(t * in.HV + h) * per]);
    }
  }
}

namespace {

// Rows [begin, begin + n) of a token-major tensor with `width` elements per token, widened to T.
template <typename T>
std::vector<T> token_rows(const cases::Tensor& t, int64_t begin, int64_t n, int64_t width) {
  std::vector<T> x(static_cast<size_t>(n * width));
  for (int64_t i = 0; i < n * width; ++i) x[i] = static_cast<T>(t.get(begin * width + i));
  return x;
}

}  // namespace

template <typename T>
SequenceInputs<T> gdr_sequence(const cases::Case& c, const cases::TensorMap& in, int64_t begin,
                               int64_t length) {
  const ops::gdr::Params d = ops::gdr::decode(c);
  SequenceInputs<T> x;
  x.length = length, x.H = d.H, x.HV = d.HV, x.K = d.K, x.V = d.V, x.l2 = d.l2;
  x.q = token_rows<T>(in.at("q"), begin, length, d.H * d.K);
  x.k = token_rows<T>(in.at("k"), begin, length, d.H * d.K);
  x.v = token_rows<T>(in.at("v"), begin, length, d.HV * d.V);
  x.g = token_rows<T>(in.at("g"), begin, length, d.HV);
  x.beta = token_rows<T>(in.at("beta"), begin, length, d.HV);
  return x;
}

template void rule_sequence<float>(Formulation, cases::DType, const SequenceInputs<float>&, float*,
                                   float*, float*);
template void rule_sequence<double>(Formulation, cases::DType, const SequenceInputs<double>&,
                                    double*, double*, double*);
template SequenceInputs<float> gdr_sequence<float>(const cases::Case&, const cases::TensorMap&,
                                                   int64_t, int64_t);
template SequenceInputs<double> gdr_sequence<double>(const cases::Case&, const cases::TensorMap&,
                                                     int64_t, int64_t);

namespace {

// cache=tree (docs/serving.md): each token's root path (the start state, its ancestors, itself)
// run as one sequence of the formulation from the request's start row; the path's last output is
// the token's, its end state the token's row. No state is taken from another token's row.
Status run_gdr_tree(Formulation f, const cases::Case& c, const cases::TensorMap& in,
                    cases::TensorMap& out) {
  const ops::gdr::Params d = ops::gdr::decode(c);
  const int64_t per = d.HV * d.K * d.V, row = d.HV * d.V;
  cases::Tensor& o = out.at("o");
  cases::Tensor& pool = out.at("state_pool");
  std::memcpy(pool.data(), in.at("state_pool").data(), pool.nbytes());
  const float* before = in.at("state_pool").as<float>();
  const int32_t* parents = in.at("parents").as<int32_t>();
  const int32_t* idx = in.at("state_indices").as<int32_t>();
  const int32_t* start = in.at("state_slots").as<int32_t>();
  std::vector<float> state(static_cast<size_t>(per)), o_path;
  for (int64_t s = 0; s < d.N; ++s)
    for (int64_t t = 0; t < d.T; ++t) {
      std::vector<int64_t> path;  // tokens from the root down to t
      for (int64_t u = t; u >= 0; u = parents[s * d.T + u]) {
        if (parents[s * d.T + u] >= u) return Status::InvalidArgument("parents: a child first");
        path.insert(path.begin(), u);
      }
      SequenceInputs<float> x = gdr_sequence<float>(c, in, s * d.T + path[0], 1);
      for (size_t i = 1; i < path.size(); ++i) {
        const SequenceInputs<float> y = gdr_sequence<float>(c, in, s * d.T + path[i], 1);
        auto append = [](std::vector<float>& dst, const std::vector<float>& src) {
          dst.insert(dst.end(), src.begin(), src.end());
        };
        append(x.q, y.q), append(x.k, y.k), append(x.v, y.v), append(x.g, y.g);
        append(x.beta, y.beta);
      }
      x.length = static_cast<int64_t>(path.size());
      std::copy_n(before + start[s] * per, per, state.begin());
      o_path.assign(static_cast<size_t>(x.length * row), 0.0f);
      rule_sequence(f, d.dtype, x, state.data(), o_path.data(), static_cast<float*>(nullptr));
      for (int64_t i = 0; i < row; ++i)
        store(o, (s * d.T + t) * row + i, o_path[(x.length - 1) * row + i]);
      std::copy(state.begin(), state.end(), pool.as<float>() + idx[s * d.T + t] * per);
    }
  return Status::Ok();
}

// The serving modes (docs/serving.md). ckpt: each sequence block by block, the state after each
// block (or at the sequence's end) into the block's row. accept: from the accepted token's row,
// the state after every token into that token's row.
Status run_gdr_serving(Formulation f, const cases::Case& c, const cases::TensorMap& in,
                       cases::TensorMap& out) {
  const ops::gdr::Params d = ops::gdr::decode(c);
  if (d.cache == ops::gdr::Cache::kTree) return run_gdr_tree(f, c, in, out);
  const std::vector<int64_t> offs = sequence_offsets(in, d.B, d.T);
  const int64_t per = d.HV * d.K * d.V;
  cases::Tensor& o = out.at("o");
  cases::Tensor& pool = out.at("state_pool");
  std::memcpy(pool.data(), in.at("state_pool").data(), pool.nbytes());
  float* rows = pool.as<float>();
  const bool ckpt = d.cache == ops::gdr::Cache::kCkpt;
  const cases::Tensor& table = in.at(ckpt ? "block_slots" : "state_indices");
  const int64_t cols = table.shape()[1];
  const int32_t* slot = table.as<int32_t>();
  const cases::Tensor* initial = in.find("initial_state");
  std::vector<float> state(static_cast<size_t>(per)), o_seq, ts_seq;
  for (int64_t s = 0; s < d.N; ++s) {
    const int64_t begin = offs[s], len = offs[s + 1] - offs[s];
    if (ckpt && initial)
      std::copy_n(initial->as<float>() + s * per, per, state.begin());
    else if (ckpt)
      std::fill(state.begin(), state.end(), 0.0f);
    else
      std::copy_n(rows + slot[s * cols + in.at("num_accepted_tokens").as<int32_t>()[s] - 1] * per,
                  per, state.begin());
    // ckpt: one piece per block; accept: the T tokens, keeping each token's state.
    const int64_t piece = ckpt ? ops::gdr::ckpt_block_size(d) : len;
    for (int64_t at = 0, b = 0; at < len; at += piece, ++b) {
      const int64_t n = std::min(piece, len - at);
      const SequenceInputs<float> x = gdr_sequence<float>(c, in, begin + at, n);
      o_seq.assign(static_cast<size_t>(n * d.HV * d.V), 0.0f);
      ts_seq.assign(static_cast<size_t>(ckpt ? 0 : n * per), 0.0f);
      rule_sequence(f, d.dtype, x, state.data(), o_seq.data(), ckpt ? nullptr : ts_seq.data());
      for (int64_t i = 0; i < n * d.HV * d.V; ++i)
        store(o, (begin + at) * d.HV * d.V + i, o_seq[i]);
      if (ckpt)
        std::copy_n(state.begin(), per, rows + slot[s * cols + b] * per);
      else
        for (int64_t t = 0; t < n; ++t)
          std::copy_n(ts_seq.begin() + t * per, per, rows + slot[s * cols + t] * per);
    }
  }
  return Status::Ok();
}

}  // namespace

Status run_gdr(Formulation f, const cases::Case& c, const cases::TensorMap& in,
               cases::TensorMap& out) {
  const ops::gdr::Params d = ops::gdr::decode(c);
  if (d.serving()) return run_gdr_serving(f, c, in, out);
  const std::vector<int64_t> offs = sequence_offsets(in, d.B, d.T);
  const int64_t n = static_cast<int64_t>(offs.size()) - 1, per = d.HV * d.K * d.V;
  if (n != d.N) return Status::InvalidArgument("cu_seqlens does not match the layout");
  cases::Tensor& o = out.at("o");
  cases::Tensor* final_state = out.find("final_state");
  cases::Tensor* token_states = out.find("token_states");
  cases::Tensor* pool = out.find("state_pool");
  const cases::Tensor* initial = in.find("initial_state");
  const int32_t* slots = nullptr;
  if (pool) {
    const cases::Tensor& before = in.at("state_pool");
    if (before.nbytes() != pool->nbytes()) return Status::InvalidArgument("state_pool shape");
    std::memcpy(pool->data(), before.data(), pool->nbytes());  // rows nobody addresses stay
    slots = in.at("state_slots").as<int32_t>();
  }
  const int64_t rows = pool ? pool->shape()[0] : n;
  std::vector<float> state(static_cast<size_t>(per)), o_seq, ts_seq;
  for (int64_t s = 0; s < n; ++s) {
    const int64_t begin = offs[s], len = offs[s + 1] - offs[s];
    const int64_t row = slots ? slots[s] : s;
    if (row < 0) {  // a padding entry: nothing read, computed or written but its token states
      if (token_states)
        std::memset(token_states->as<float>() + s * d.T * per, 0, d.T * per * sizeof(float));
      continue;
    }
    if (row >= rows) return Status::InvalidArgument("state slot out of range");
    if (pool)
      std::copy_n(pool->as<float>() + row * per, per, state.begin());
    else if (initial)
      std::copy_n(initial->as<float>() + s * per, per, state.begin());
    else
      std::fill(state.begin(), state.end(), 0.0f);
    const SequenceInputs<float> x = gdr_sequence<float>(c, in, begin, len);
    o_seq.assign(static_cast<size_t>(len * d.HV * d.V), 0.0f);
    if (token_states) ts_seq.assign(static_cast<size_t>(len * per), 0.0f);
    rule_sequence(f, d.dtype, x, state.data(), o_seq.data(),
                  token_states ? ts_seq.data() : nullptr);
    for (int64_t i = 0; i < len * d.HV * d.V; ++i) store(o, begin * d.HV * d.V + i, o_seq[i]);
    if (final_state) std::copy_n(state.begin(), per, final_state->as<float>() + s * per);
    if (pool) std::copy_n(state.begin(), per, pool->as<float>() + row * per);
    if (token_states) {
      float* dst = token_states->as<float>() + s * d.T * per;
      std::copy_n(ts_seq.begin(), len * per, dst);
      std::fill(dst + len * per, dst + d.T * per, 0.0f);  // spec sequences fill their row
    }
  }
  return Status::Ok();
}

}  // namespace deltacheck::backends::right
