// The gated delta rule in ATen tensor ops: the chunked WY / UT-transform form and the token
// recurrence, both varlen-correct and device-agnostic.
//
// Within a chunk starting from state S0, with G_i the cumulative log decay up to token i (inside
// the chunk) and D_ij = exp(G_i - G_j) for j <= i, the per-token rule unrolls to
//   (I + L) U = diag(beta) V - diag(beta * exp(G)) K S0,   L_ij = beta_i D_ij k_i.k_j  (j < i)
//   O = diag(exp(G)) Q S0 + (Q K^T o D) U
//   S_end = exp(G_last) S0 + (K o exp(G_last - G))^T U.
// Solving the unit-lower-triangular system once per chunk for both right-hand sides gives
// U = U~ - W S0, so every chunk is an affine map of its incoming state: S_end = M S0 + R and
// O = O~ + P S0. M, R, P, O~ are computed for all chunks of all sequences at once (one batched
// pass per padded chunk length); the scan over chunk index then only applies the maps, batched
// over the sequences still running. Pairwise decays are only ever formed as
// exp(g_{j+1} + ... + g_i) for j <= i (the exponent is masked to -inf above the diagonal before
// exp), never as exp(G_i) * exp(-G_j), which overflows to inf * 0 = NaN when a tail chunk decays
// strongly.
#include "kernels/torch/gated_delta_rule.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "kernels/torch/varlen.h"

namespace deltacheck::kernels::torch {
namespace {

// The problem flattened to tokens: [B * T, HV, ...] in fp32, q/k already normalized, q scaled and
// both broadcast to the value heads.
struct Problem {
  int64_t batch = 0, seq_len = 0, heads = 0, value_heads = 0, key_dim = 0, value_dim = 0;
  std::vector<int64_t> bounds;  // [N + 1] over the flattened tokens
  at::Tensor q, k;              // [BT, HV, K]
  at::Tensor v;                 // [BT, HV, V]
  at::Tensor g, beta;           // [BT, HV]
  at::Tensor state;             // [N, HV, K, V] fp32, a private copy of the initial state
  at::ScalarType out_dtype = at::kFloat;
  int64_t num_seqs() const { return static_cast<int64_t>(bounds.size()) - 1; }
};

void check_float(const char* who, const char* name, const at::Tensor& t) {
  if (!t.defined()) fail(who, std::string(name) + " is undefined");
  if (!at::isFloatingType(t.scalar_type())) {
    fail(who, std::string(name) + " must be a floating-point tensor");
  }
}

void check_shape(const char* who, const char* name, const at::Tensor& t,
                 const std::vector<int64_t>& expected, const char* layout) {
  if (t.sizes() != at::IntArrayRef(expected)) {
    std::string want = "[";
    for (size_t i = 0; i < expected.size(); ++i) {
      want += (i ? ", " : "") + std::to_string(expected[i]);
    }
    fail(who, std::string(name) + " has shape " + shape_string(t) + ", expected " + want + "] " +
                  layout);
  }
}

Problem prepare(const char* who, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                const at::Tensor& g, const at::Tensor& beta,
                const std::optional<at::Tensor>& cu_seqlens,
                const std::optional<at::Tensor>& initial_state, double scale, bool use_qk_l2norm) {
  check_float(who, "q", q);
  check_float(who, "k", k);
  check_float(who, "v", v);
  check_float(who, "g", g);
  check_float(who, "beta", beta);
  if (q.dim() != 4) fail(who, "q must be [B, T, H, K], got " + shape_string(q));
  if (v.dim() != 4) fail(who, "v must be [B, T, HV, V], got " + shape_string(v));
  Problem p;
  p.batch = q.size(0);
  p.seq_len = q.size(1);
  p.heads = q.size(2);
  p.key_dim = q.size(3);
  p.value_heads = v.size(2);
  p.value_dim = v.size(3);
  const int64_t B = p.batch, T = p.seq_len, H = p.heads, HV = p.value_heads;
  const int64_t K = p.key_dim, V = p.value_dim;
  check_shape(who, "k", k, {B, T, H, K}, "(q's shape)");
  check_shape(who, "v", v, {B, T, HV, V}, "[B, T, HV, V]");
  check_shape(who, "g", g, {B, T, HV}, "[B, T, HV]");
  check_shape(who, "beta", beta, {B, T, HV}, "[B, T, HV]");
  if (H <= 0 || HV % H != 0) {
    fail(who, "value heads HV=" + std::to_string(HV) +
                  " must be a multiple of heads H=" + std::to_string(H));
  }
  if (K <= 0 || V <= 0) fail(who, "key and value dims must be positive");
  const at::Device device = q.device();
  for (const at::Tensor* t : {&k, &v, &g, &beta}) {
    if (t->device() != device) fail(who, "all tensors must be on q's device");
  }
  const bool packed = cu_seqlens.has_value() && cu_seqlens->defined();
  if (packed && B != 1) fail(who, "cu_seqlens requires B == 1, got B=" + std::to_string(B));
  p.bounds = sequence_bounds(cu_seqlens, B, B * T, who);
  const int64_t N = p.num_seqs();

  at::Tensor init = value_or_undefined(initial_state);
  if (init.defined()) {
    check_float(who, "initial_state", init);
    check_shape(who, "initial_state", init, {N, HV, K, V}, "[N, HV, K, V]");
    if (init.device() != device) fail(who, "initial_state must be on q's device");
    p.state = init.to(at::kFloat).clone(at::MemoryFormat::Contiguous);
  } else {
    p.state = at::zeros({N, HV, K, V}, q.options().dtype(at::kFloat));
  }

  at::Tensor qf = q.to(at::kFloat).reshape({B * T, H, K});
  at::Tensor kf = k.to(at::kFloat).reshape({B * T, H, K});
  if (use_qk_l2norm) {
    qf = l2_normalize(qf);
    kf = l2_normalize(kf);
  }
  const double s = scale > 0 ? scale : 1.0 / std::sqrt(static_cast<double>(K));
  qf = qf * s;
  // Blocked GVA mapping: value head i reads q/k head i / (HV / H).
  const int64_t group = HV / H;
  p.q = qf.unsqueeze(2).expand({B * T, H, group, K}).reshape({B * T, HV, K});
  p.k = kf.unsqueeze(2).expand({B * T, H, group, K}).reshape({B * T, HV, K});
  p.v = v.to(at::kFloat).reshape({B * T, HV, V});
  p.g = g.to(at::kFloat).reshape({B * T, HV});
  p.beta = beta.to(at::kFloat).reshape({B * T, HV});
  p.out_dtype = v.scalar_type();
  return p;
}

at::Tensor index_tensor(const std::vector<int64_t>& values, at::Device device) {
  at::Tensor host = at::empty({static_cast<int64_t>(values.size())}, at::kLong);
  std::copy(values.begin(), values.end(), host.data_ptr<int64_t>());
  return host.to(device);
}

// Sequences that have work, longest first, so that at step m the sequences still running are a
// prefix of this order. `steps[n]` is sequence n's number of chunks (or tokens).
std::vector<int64_t> longest_first(const std::vector<int64_t>& steps) {
  std::vector<int64_t> order;
  for (int64_t n = 0; n < static_cast<int64_t>(steps.size()); ++n) {
    if (steps[n] > 0) order.push_back(n);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return steps[a] > steps[b]; });
  return order;
}

// active[m]: how many sequences (a prefix of `order`) run step m.
std::vector<int64_t> active_counts(const std::vector<int64_t>& order,
                                   const std::vector<int64_t>& steps) {
  const int64_t num_steps = order.empty() ? 0 : steps[order.front()];
  std::vector<int64_t> active(num_steps, 0);
  for (int64_t n : order) {
    for (int64_t m = 0; m < steps[n]; ++m) ++active[m];
  }
  return active;
}

TorchGdrResult finish(const Problem& p, at::Tensor output_tokens, const at::Tensor& running,
                      const std::vector<int64_t>& order, bool output_final_state) {
  TorchGdrResult r;
  r.output =
      output_tokens.reshape({p.batch, p.seq_len, p.value_heads, p.value_dim}).to(p.out_dtype);
  if (output_final_state) {
    // Sequences without tokens keep their initial state.
    r.final_state = p.state;
    if (!order.empty()) r.final_state.index_copy_(0, index_tensor(order, p.q.device()), running);
  }
  return r;
}

// The affine map of a batch of chunks, all padded to the same length C:
// S_end = M S0 + R and O = O_intra + P S0 (see the top of this file).
struct ChunkMaps {
  at::Tensor M;        // [n, HV, K, K]
  at::Tensor R;        // [n, HV, K, V]
  at::Tensor P;        // [n, HV, C, K]
  at::Tensor O_intra;  // [n, HV, C, V]
};

// slot_to_token: [n * C] token index of each chunk slot, or BT for padding. Padding reads a zero
// row: k = v = 0 and beta = g = 0 there, so it neither contributes nor decays.
ChunkMaps chunk_maps(const Problem& p, const std::vector<int64_t>& slot_to_token, int64_t C) {
  const int64_t n = static_cast<int64_t>(slot_to_token.size()) / C;
  const int64_t HV = p.value_heads, K = p.key_dim, V = p.value_dim;
  const at::TensorOptions f32 = p.q.options();
  const at::Tensor gather_idx = index_tensor(slot_to_token, p.q.device());
  // [BT, HV, X...] -> [n, HV, C, X...]
  auto to_chunks = [&](const at::Tensor& x) {
    std::vector<int64_t> zero_row = x.sizes().vec();
    zero_row[0] = 1;
    std::vector<int64_t> shape = {n, C};
    for (int64_t d = 1; d < x.dim(); ++d) shape.push_back(x.size(d));
    at::Tensor c = at::cat({x, at::zeros(zero_row, x.options())}).index_select(0, gather_idx);
    c = c.view(shape);
    return x.dim() == 3 ? c.permute({0, 2, 1, 3}).contiguous() : c.permute({0, 2, 1}).contiguous();
  };
  const at::Tensor qc = to_chunks(p.q), kc = to_chunks(p.k), vc = to_chunks(p.v);
  const at::Tensor gc = to_chunks(p.g), bc = to_chunks(p.beta);  // [n, HV, C]

  const at::Tensor lower = at::ones({C, C}, f32.dtype(at::kBool)).tril();             // j <= i
  const at::Tensor strictly_lower = at::ones({C, C}, f32.dtype(at::kBool)).tril(-1);  // j < i
  // seg_ij = g_{j+1} + ... + g_i (j <= i), summed directly rather than as G_i - G_j: with strong
  // decay G reaches hundreds within a chunk and the difference would lose ~1e-5 absolute in the
  // exponent. Above the diagonal the exponent is -inf before exp, so nothing overflows there.
  const at::Tensor seg =
      gc.unsqueeze(-1)
          .expand({n, HV, C, C})
          .masked_fill(strictly_lower.logical_not(), 0.0f)
          .cumsum(-2)
          .masked_fill(lower.logical_not(), -std::numeric_limits<float>::infinity());
  const at::Tensor decay = seg.exp();            // exp(G_i - G_j), zero above the diagonal
  const at::Tensor gamma = gc.cumsum(-1).exp();  // exp(G_i), decay from the chunk start
  const at::Tensor kt = kc.transpose(-1, -2);
  const at::Tensor L =
      (kc.matmul(kt) * decay * bc.unsqueeze(-1)).masked_fill(strictly_lower.logical_not(), 0.0f);
  const at::Tensor rhs = at::cat({kc * (bc * gamma).unsqueeze(-1), vc * bc.unsqueeze(-1)}, -1);
  const at::Tensor sol = at::linalg_solve_triangular(L + at::eye(C, f32), rhs, /*upper=*/false,
                                                     /*left=*/true, /*unitriangular=*/true);
  const at::Tensor W = sol.narrow(-1, 0, K);   // [n, HV, C, K]
  const at::Tensor Ut = sol.narrow(-1, K, V);  // [n, HV, C, V]

  ChunkMaps maps;
  const at::Tensor qk = qc.matmul(kt) * decay;  // zero above the diagonal
  maps.P = qc * gamma.unsqueeze(-1) - qk.matmul(W);
  maps.O_intra = qk.matmul(Ut);
  // Decay from token j to the chunk end, exp(G_last - G_j): the last row of `decay`.
  const at::Tensor k_end_t = (kc * decay.select(-2, C - 1).unsqueeze(-1)).transpose(-1, -2);
  const at::Tensor gamma_last = gamma.narrow(-1, C - 1, 1).unsqueeze(-1);  // [n, HV, 1, 1]
  maps.M = gamma_last * at::eye(K, f32) - k_end_t.matmul(W);
  maps.R = k_end_t.matmul(Ut);
  return maps;
}

}  // namespace

at::Tensor l2_normalize(const at::Tensor& x) {
  at::Tensor xf = x.to(at::kFloat);
  return xf * at::rsqrt(xf.square().sum(-1, /*keepdim=*/true) + 1e-6);
}

TorchGdrResult chunked_gated_delta_rule(const at::Tensor& q, const at::Tensor& k,
                                        const at::Tensor& v, const at::Tensor& g,
                                        const at::Tensor& beta,
                                        const std::optional<at::Tensor>& cu_seqlens,
                                        const std::optional<at::Tensor>& initial_state,
                                        double scale, bool use_qk_l2norm, int64_t chunk_size,
                                        bool output_final_state) {
  constexpr const char* kWho = "chunked_gated_delta_rule";
  if (chunk_size <= 0) fail(kWho, "chunk_size must be positive");
  // Recorded for autograd only when an input asks for gradients (the LibTorch backward, issue
  // #21): the state scan then builds new states instead of writing them in place.
  const bool record = records_gradients({q, k, v, g, beta, value_or_undefined(initial_state)});
  std::optional<at::NoGradGuard> no_grad;
  if (!record) no_grad.emplace();
  Problem p = prepare(kWho, q, k, v, g, beta, cu_seqlens, initial_state, scale, use_qk_l2norm);
  const int64_t C = chunk_size, HV = p.value_heads, K = p.key_dim, V = p.value_dim;
  const int64_t N = p.num_seqs(), BT = p.batch * p.seq_len;
  const at::Device device = p.q.device();
  const at::TensorOptions f32 = p.q.options();

  // Chunk ids are step-major, so the chunks of scan step m are one contiguous range
  // [first[m], first[m] + active[m]), ordered like the running states.
  std::vector<int64_t> chunks(N);
  for (int64_t n = 0; n < N; ++n) chunks[n] = (p.bounds[n + 1] - p.bounds[n] + C - 1) / C;
  const std::vector<int64_t> order = longest_first(chunks);
  const std::vector<int64_t> active = active_counts(order, chunks);
  std::vector<int64_t> first(active.size() + 1, 0);
  std::partial_sum(active.begin(), active.end(), first.begin() + 1);
  const int64_t NC = first.back();

  at::Tensor running = p.state.index_select(0, index_tensor(order, device));
  if (NC == 0) return finish(p, at::zeros({BT, HV, V}, f32), running, order, output_final_state);

  // Short chunks (tails, short sequences) are padded only to the next power of two (capped at
  // C), not to C: 2000 packed sequences of 3 tokens must not cost 2000 full chunks. Each padding
  // class is prepared as one batch.
  std::vector<int64_t> classes;
  for (int64_t c = 1; c < C; c *= 2) classes.push_back(c);
  classes.push_back(C);
  struct ClassPlan {
    std::vector<int64_t> ids, slot_to_token, valid_slots, valid_tokens;
  };
  std::vector<ClassPlan> plans(classes.size());
  for (size_t m = 0; m < active.size(); ++m) {
    for (int64_t j = 0; j < active[m]; ++j) {
      const int64_t start = p.bounds[order[j]] + static_cast<int64_t>(m) * C;
      const int64_t len = std::min(C, p.bounds[order[j] + 1] - start);
      const size_t cls = std::lower_bound(classes.begin(), classes.end(), len) - classes.begin();
      ClassPlan& plan = plans[cls];
      const int64_t base = static_cast<int64_t>(plan.ids.size()) * classes[cls];
      plan.ids.push_back(first[m] + j);
      plan.slot_to_token.resize(base + classes[cls], BT);
      for (int64_t i = 0; i < len; ++i) {
        plan.slot_to_token[base + i] = start + i;
        plan.valid_slots.push_back(base + i);
        plan.valid_tokens.push_back(start + i);
      }
    }
  }
  at::Tensor M = at::empty({NC, HV, K, K}, f32), R = at::empty({NC, HV, K, V}, f32);
  std::vector<ChunkMaps> maps(classes.size());
  std::vector<at::Tensor> ids(classes.size());
  for (size_t c = 0; c < classes.size(); ++c) {
    if (plans[c].ids.empty()) continue;
    ids[c] = index_tensor(plans[c].ids, device);
    maps[c] = chunk_maps(p, plans[c].slot_to_token, classes[c]);
    M.index_copy_(0, ids[c], maps[c].M);
    R.index_copy_(0, ids[c], maps[c].R);
    maps[c].M = maps[c].R = at::Tensor();
  }

  at::Tensor state_in = at::empty({NC, HV, K, V}, f32);
  std::vector<at::Tensor> recorded_in;
  for (size_t m = 0; m < active.size(); ++m) {
    at::Tensor s = running.narrow(0, 0, active[m]);
    const int64_t c0 = first[m], a = active[m];
    at::Tensor next =
        at::baddbmm(R.narrow(0, c0, a).reshape({a * HV, K, V}),
                    M.narrow(0, c0, a).reshape({a * HV, K, K}), s.reshape({a * HV, K, V}))
            .view({a, HV, K, V});
    if (!record) {
      state_in.narrow(0, c0, a).copy_(s);
      s.copy_(next);
      continue;
    }
    recorded_in.push_back(s);
    const int64_t rest = running.size(0) - a;
    running = rest == 0 ? next : at::cat({next, running.narrow(0, a, rest)});
  }
  if (record) state_in = at::cat(recorded_in);

  at::Tensor output = at::empty({BT, HV, V}, f32);  // every token is written by exactly one class
  for (size_t c = 0; c < classes.size(); ++c) {
    if (plans[c].ids.empty()) continue;
    const at::Tensor O = (maps[c].O_intra + maps[c].P.matmul(state_in.index_select(0, ids[c])))
                             .permute({0, 2, 1, 3})
                             .reshape({-1, HV, V});
    output.index_copy_(0, index_tensor(plans[c].valid_tokens, device),
                       O.index_select(0, index_tensor(plans[c].valid_slots, device)));
  }
  return finish(p, output, running, order, output_final_state);
}

TorchGdrResult recurrent_gated_delta_rule(const at::Tensor& q, const at::Tensor& k,
                                          const at::Tensor& v, const at::Tensor& g,
                                          const at::Tensor& beta,
                                          const std::optional<at::Tensor>& cu_seqlens,
                                          const std::optional<at::Tensor>& initial_state,
                                          double scale, bool use_qk_l2norm,
                                          bool output_final_state) {
  constexpr const char* kWho = "recurrent_gated_delta_rule";
  at::NoGradGuard no_grad;
  Problem p = prepare(kWho, q, k, v, g, beta, cu_seqlens, initial_state, scale, use_qk_l2norm);
  const int64_t HV = p.value_heads, V = p.value_dim;
  const int64_t N = p.num_seqs(), BT = p.batch * p.seq_len;
  const at::Device device = p.q.device();

  // Tokens in step-major order: step t holds token t of every sequence still running.
  std::vector<int64_t> lengths(N);
  for (int64_t n = 0; n < N; ++n) lengths[n] = p.bounds[n + 1] - p.bounds[n];
  const std::vector<int64_t> order = longest_first(lengths);
  const std::vector<int64_t> active = active_counts(order, lengths);
  std::vector<int64_t> step_tokens;
  step_tokens.reserve(BT);
  for (size_t t = 0; t < active.size(); ++t) {
    for (int64_t j = 0; j < active[t]; ++j) step_tokens.push_back(p.bounds[order[j]] + t);
  }
  const at::Tensor idx = index_tensor(step_tokens, device);
  const at::Tensor qs = p.q.index_select(0, idx), ks = p.k.index_select(0, idx);
  const at::Tensor vs = p.v.index_select(0, idx);
  const at::Tensor decay = p.g.index_select(0, idx).exp(), bs = p.beta.index_select(0, idx);
  at::Tensor out_steps = at::empty({BT, HV, V}, p.q.options());

  at::Tensor running = p.state.index_select(0, index_tensor(order, device));
  int64_t offset = 0;
  for (int64_t a : active) {
    at::Tensor s = running.narrow(0, 0, a);                       // [a, HV, K, V]
    const at::Tensor kt = ks.narrow(0, offset, a).unsqueeze(-2);  // [a, HV, 1, K]
    s.mul_(decay.narrow(0, offset, a).unsqueeze(-1).unsqueeze(-1));
    const at::Tensor u = bs.narrow(0, offset, a).unsqueeze(-1).unsqueeze(-1) *
                         (vs.narrow(0, offset, a).unsqueeze(-2) - kt.matmul(s));  // [a, HV, 1, V]
    s.add_(kt.transpose(-1, -2).matmul(u));
    out_steps.narrow(0, offset, a)
        .copy_(qs.narrow(0, offset, a).unsqueeze(-2).matmul(s).squeeze(-2));
    offset += a;
  }
  at::Tensor output = at::empty({BT, HV, V}, p.q.options());
  output.index_copy_(0, idx, out_steps);
  return finish(p, output, running, order, output_final_state);
}

at::Tensor recurrent_decode_pooled(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& g, const at::Tensor& beta,
                                   at::Tensor& state_pool, const at::Tensor& state_slots,
                                   double scale, bool use_qk_l2norm) {
  constexpr const char* kWho = "recurrent_decode_pooled";
  at::NoGradGuard no_grad;
  check_float(kWho, "v", v);
  if (q.dim() != 4 || q.size(1) != 1) fail(kWho, "q must be [N, 1, H, K], got " + shape_string(q));
  if (v.dim() != 4) fail(kWho, "v must be [N, 1, HV, V], got " + shape_string(v));
  const int64_t N = q.size(0), HV = v.size(2), K = q.size(3), V = v.size(3);
  if (!state_pool.defined() || state_pool.scalar_type() != at::kFloat || state_pool.dim() != 4 ||
      state_pool.size(1) != HV || state_pool.size(2) != K || state_pool.size(3) != V ||
      state_pool.device() != q.device()) {
    fail(kWho, "state_pool must be fp32 [rows, " + std::to_string(HV) + ", " + std::to_string(K) +
                   ", " + std::to_string(V) + "] on q's device, got " + shape_string(state_pool));
  }
  const PoolEntries live = pool_entries(state_slots, N, state_pool.size(0), kWho);
  at::Tensor o = at::zeros({N, 1, HV, V}, v.options());
  if (live.entries.numel() == 0) return o;
  auto entries = [&](const at::Tensor& x) { return x.index_select(0, live.entries); };
  const TorchGdrResult r = recurrent_gated_delta_rule(
      entries(q), entries(k), entries(v), entries(g), entries(beta), std::nullopt,
      state_pool.index_select(0, live.rows), scale, use_qk_l2norm, /*output_final_state=*/true);
  state_pool.index_copy_(0, live.rows, r.final_state);
  o.index_copy_(0, live.entries, r.output);
  return o;
}

}  // namespace deltacheck::kernels::torch
