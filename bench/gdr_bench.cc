// Gated delta rule benchmarks, CPU kernels and (when built with LibTorch) the ATen kernels on the
// same shapes: prefill at T = 512 / 4096 / 16384 with H = 16, HV = 16 and 32, K = V = 128; many
// short packed sequences (256 x 16 tokens); decode of 64 sequences on a pool of 256 state slots;
// the whole linear-attention layer. Names are "<figure>/<backend>/<args>", so the summary can pair
// a CPU figure with the LibTorch figure of the same shape.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/cpu/gated_delta_rule.h"
#include "kernels/cpu/gated_delta_rule_backward.h"
#include "kernels/cpu/linear_attention_layer.h"
#include "kernels/cpu/recurrent_decode.h"

#ifdef DELTACHECK_BENCH_TORCH
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include "kernels/torch/gated_delta_rule.h"
#include "kernels/torch/linear_attention_layer.h"
#endif

namespace deltacheck::bench {
namespace {

constexpr int64_t kH = 16, kK = 128, kV = 128;

void fail_unless_ok(benchmark::State& st, const Status& s) {
  if (!s.ok()) st.SkipWithError(s.message().c_str());
}

// ---- prefill ------------------------------------------------------------------------------------

kernels::GatedDeltaRuleParams prefill_params(const GdrInputs& in, int64_t T, int64_t HV,
                                             std::vector<float>& o, std::vector<float>& state) {
  kernels::GatedDeltaRuleParams p;
  p.seq_len = T;
  p.num_heads = kH;
  p.num_value_heads = HV;
  p.key_dim = kK;
  p.value_dim = kV;
  p.q = in.q.data();
  p.k = in.k.data();
  p.v = in.v.data();
  p.g = in.g.data();
  p.beta = in.beta.data();
  p.o = o.data();
  p.initial_state = state.data();
  p.final_state = state.data();  // in place, as a chunked prefill carries it
  p.use_qk_l2norm = true;
  return p;
}

void BM_prefill_cpu(benchmark::State& st) {
  const int64_t T = st.range(0), HV = st.range(1);
  const GdrInputs in(T, kH, HV, kK, kV);
  std::vector<float> o(static_cast<size_t>(T * HV * kV));
  std::vector<float> state = uniform(HV * kK * kV, -0.1f, 0.1f, 6);
  const kernels::GatedDeltaRuleParams p = prefill_params(in, T, HV, o, state);
  for (auto _ : st) {
    fail_unless_ok(st, kernels::cpu::chunked_gated_delta_rule(p));
    benchmark::DoNotOptimize(o.data());
  }
  set_counters(st, T, gdr_nominal_flops(T, HV, kK, kV));
}

// The same prefill writing a block checkpoint every 100 tokens (docs/serving.md: chunks are also
// cut at block ends, so this costs more chunks; the call without checkpoints above is unchanged).
void BM_prefill_cpu_ckpt(benchmark::State& st) {
  const int64_t T = st.range(0), HV = st.range(1), block = 100;
  const GdrInputs in(T, kH, HV, kK, kV);
  std::vector<float> o(static_cast<size_t>(T * HV * kV));
  std::vector<float> state = uniform(HV * kK * kV, -0.1f, 0.1f, 6);
  const kernels::GatedDeltaRuleParams p = prefill_params(in, T, HV, o, state);
  const int64_t blocks = (T + block - 1) / block;
  std::vector<int32_t> slots(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) slots[b] = static_cast<int32_t>(b);
  std::vector<float> pool(static_cast<size_t>(blocks * HV * kK * kV));
  const kernels::cpu::StateCheckpoints ck{block, slots.data(), blocks, pool.data(), blocks};
  for (auto _ : st) {
    fail_unless_ok(st, kernels::cpu::chunked_gated_delta_rule(p, ck));
    benchmark::DoNotOptimize(pool.data());
  }
  set_counters(st, T, gdr_nominal_flops(T, HV, kK, kV));
}

// The plain fp32 recurrence on the same shapes: the same-precision baseline every case of the
// harness runs once, so its speed is part of the harness cost.
void BM_prefill_recurrent(benchmark::State& st) {
  const int64_t T = st.range(0), HV = st.range(1);
  const GdrInputs in(T, kH, HV, kK, kV);
  std::vector<float> o(static_cast<size_t>(T * HV * kV));
  std::vector<float> state = uniform(HV * kK * kV, -0.1f, 0.1f, 6);
  const kernels::GatedDeltaRuleParams p = prefill_params(in, T, HV, o, state);
  for (auto _ : st) {
    fail_unless_ok(st, kernels::cpu::recurrent_gated_delta_rule(p));
    benchmark::DoNotOptimize(o.data());
  }
  set_counters(st, T, gdr_nominal_flops(T, HV, kK, kV));
}

void prefill_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"T", "HV"});
  for (int64_t T : {512, 4096, 16384})
    for (int64_t HV : {16, 32}) b->Args({T, HV});
  b->MeasureProcessCPUTime()->UseRealTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_prefill_cpu)->Name("gdr_prefill/cpu")->Apply(prefill_shapes);
BENCHMARK(BM_prefill_cpu_ckpt)->Name("gdr_prefill/cpu_ckpt100")->Apply(prefill_shapes);
BENCHMARK(BM_prefill_recurrent)
    ->Name("gdr_prefill/cpu_recurrent")
    ->ArgNames({"T", "HV"})
    ->Args({4096, 16})
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// ---- backward: the same prefill shape, do and dht in, every input gradient out ---------------

// Nominal operations of the backward: twice the forward's (8 T HV K V), as for any product (the
// gradient of y = A x costs one product for dA and one for dx).
struct BackwardInputs {
  GdrInputs in;
  std::vector<float> o, state, d_out, d_ht, dq, dk, dv, dg, dbeta, dh0;
  kernels::GatedDeltaRuleBackwardParams b;
  BackwardInputs(int64_t T, int64_t HV)
      : in(T, kH, HV, kK, kV),
        o(static_cast<size_t>(T * HV * kV)),
        state(uniform(HV * kK * kV, -0.1f, 0.1f, 6)),
        d_out(uniform(T * HV * kV, -1.0f, 1.0f, 8)),
        d_ht(uniform(HV * kK * kV, -1.0f, 1.0f, 9)),
        dq(in.q.size()),
        dk(in.k.size()),
        dv(in.v.size()),
        dg(in.g.size()),
        dbeta(in.beta.size()),
        dh0(d_ht.size()) {
    b.forward = prefill_params(in, T, HV, o, state);
    b.forward.final_state = nullptr;
    b.d_output = d_out.data(), b.d_final_state = d_ht.data();
    b.dq = dq.data(), b.dk = dk.data(), b.dv = dv.data(), b.dg = dg.data();
    b.dbeta = dbeta.data(), b.dh0 = dh0.data();
  }
};

void BM_backward_cpu(benchmark::State& st, bool chunked) {
  const int64_t T = st.range(0), HV = st.range(1);
  BackwardInputs x(T, HV);
  x.b.chunked = chunked;
  for (auto _ : st) {
    fail_unless_ok(st, kernels::cpu::gated_delta_rule_backward(x.b));
    benchmark::DoNotOptimize(x.dq.data());
  }
  set_counters(st, T, 2 * gdr_nominal_flops(T, HV, kK, kV));
}

void backward_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"T", "HV"})->Args({512, 16})->Args({4096, 16});
  b->MeasureProcessCPUTime()->UseRealTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK_CAPTURE(BM_backward_cpu, chunked, true)
    ->Name("gdr_backward/cpu_chunked")
    ->Apply(backward_shapes);
BENCHMARK_CAPTURE(BM_backward_cpu, recurrent, false)
    ->Name("gdr_backward/cpu_recurrent")
    ->Apply(backward_shapes);

// ---- many short sequences: 256 x 16 tokens packed, zero initial state, final states out --------

void BM_short_cpu(benchmark::State& st) {
  const int64_t N = st.range(0), L = st.range(1), HV = st.range(2), T = N * L;
  const GdrInputs in(T, kH, HV, kK, kV);
  std::vector<float> o(static_cast<size_t>(T * HV * kV));
  std::vector<float> final_state(static_cast<size_t>(N * HV * kK * kV));
  std::vector<int64_t> cu(static_cast<size_t>(N + 1));
  for (int64_t i = 0; i <= N; ++i) cu[i] = i * L;
  std::vector<float> no_state;
  kernels::GatedDeltaRuleParams p = prefill_params(in, T, HV, o, no_state);
  p.initial_state = nullptr;
  p.final_state = final_state.data();
  p.cu_seqlens = cu.data();
  p.num_seqs = N;
  for (auto _ : st) {
    fail_unless_ok(st, kernels::cpu::chunked_gated_delta_rule(p));
    benchmark::DoNotOptimize(final_state.data());
  }
  // Memory-bound part: the final states written, N HV K V fp32.
  set_counters(st, T, gdr_nominal_flops(T, HV, kK, kV), 4.0 * N * HV * kK * kV);
}

BENCHMARK(BM_short_cpu)
    ->Name("gdr_short/cpu")
    ->ArgNames({"N", "L", "HV"})
    ->Args({256, 16, 16})
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// ---- decode: 64 sequences, one token each, in place on a pool of 256 slots
// -----------------------

constexpr int64_t kDecodeSeqs = 64, kPoolSlots = 256;

// Slots spread over the pool (every 4th), as continuous batching leaves them.
std::vector<int32_t> decode_slots() {
  std::vector<int32_t> s(kDecodeSeqs);
  for (int64_t i = 0; i < kDecodeSeqs; ++i) s[i] = static_cast<int32_t>((i * 4 + i / 16) % 256);
  return s;
}

// The state traffic decode must move: every addressed state read once and written once.
double decode_state_bytes(int64_t HV) { return 2.0 * 4.0 * kDecodeSeqs * HV * kK * kV; }

void BM_decode_cpu(benchmark::State& st) {
  const int64_t HV = st.range(0);
  const GdrInputs in(kDecodeSeqs, kH, HV, kK, kV);
  std::vector<float> o(static_cast<size_t>(kDecodeSeqs * HV * kV));
  std::vector<float> pool = uniform(kPoolSlots * HV * kK * kV, -0.1f, 0.1f, 7);
  const std::vector<int32_t> slots = decode_slots();
  kernels::cpu::RecurrentDecodeParams p;
  p.num_seqs = kDecodeSeqs;
  p.num_heads = kH;
  p.num_value_heads = HV;
  p.key_dim = kK;
  p.value_dim = kV;
  p.q = in.q.data();
  p.k = in.k.data();
  p.v = in.v.data();
  p.g = in.g.data();
  p.beta = in.beta.data();
  p.o = o.data();
  p.state = pool.data();
  p.state_slots = slots.data();
  p.num_state_rows = kPoolSlots;
  p.use_qk_l2norm = true;
  for (auto _ : st) {
    fail_unless_ok(st, kernels::cpu::recurrent_decode(p));
    benchmark::DoNotOptimize(pool.data());
  }
  set_counters(st, kDecodeSeqs, 0.0, decode_state_bytes(HV));
}

BENCHMARK(BM_decode_cpu)
    ->Name("gdr_decode/cpu")
    ->ArgNames({"HV"})
    ->Arg(16)
    ->Arg(32)
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// ---- the linear-attention layer (conv, gates, rule, norm), Qwen3-Next shapes
// ----------------------

struct LayerInputs {
  int64_t T, HV, D;
  std::vector<float> qkv, z, a, b, conv_weight, conv_bias, A_log, dt_bias, norm_weight;
  LayerInputs(int64_t T_, int64_t HV_)
      : T(T_),
        HV(HV_),
        D(2 * kH * kK + HV_ * kV),
        qkv(uniform(T * D, -1.0f, 1.0f, 11)),
        z(uniform(T * HV * kV, -1.0f, 1.0f, 12)),
        a(uniform(T * HV, -1.0f, 1.0f, 13)),
        b(uniform(T * HV, -1.0f, 1.0f, 14)),
        conv_weight(uniform(D * 4, -0.5f, 0.5f, 15)),
        conv_bias(uniform(D, -0.1f, 0.1f, 16)),
        A_log(uniform(HV, -3.0f, -1.0f, 17)),
        dt_bias(uniform(HV, -1.0f, 0.0f, 18)),
        norm_weight(uniform(kV, 0.5f, 1.5f, 19)) {}
};

void BM_layer_cpu(benchmark::State& st) {
  const int64_t T = st.range(0), HV = st.range(1);
  const LayerInputs in(T, HV);
  std::vector<float> out(static_cast<size_t>(T * HV * kV));
  std::vector<float> state(static_cast<size_t>(HV * kK * kV));
  std::vector<float> conv_state(static_cast<size_t>(in.D * 3));
  kernels::cpu::LinearAttentionLayerParams p;
  p.seq_len = T;
  p.num_heads = kH;
  p.num_value_heads = HV;
  p.key_dim = kK;
  p.value_dim = kV;
  p.qkv = in.qkv.data();
  p.z = in.z.data();
  p.a = in.a.data();
  p.b = in.b.data();
  p.conv_weight = in.conv_weight.data();
  p.conv_bias = in.conv_bias.data();
  p.A_log = in.A_log.data();
  p.dt_bias = in.dt_bias.data();
  p.norm_weight = in.norm_weight.data();
  p.out = out.data();
  p.final_state = state.data();
  p.final_conv_state = conv_state.data();
  for (auto _ : st) {
    fail_unless_ok(st, kernels::cpu::linear_attention_layer(p));
    benchmark::DoNotOptimize(out.data());
  }
  set_counters(st, T, gdr_nominal_flops(T, HV, kK, kV));
}

BENCHMARK(BM_layer_cpu)
    ->Name("layer_prefill/cpu")
    ->ArgNames({"T", "HV"})
    ->Args({4096, 32})
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

#ifdef DELTACHECK_BENCH_TORCH
// ---- the same figures through the LibTorch (ATen tensor-op) kernels
// ------------------------------

at::Tensor tensor_of(const std::vector<float>& x, std::vector<int64_t> shape) {
  return at::from_blob(const_cast<float*>(x.data()), shape, at::kFloat).clone();
}

void BM_prefill_torch(benchmark::State& st) {
  const int64_t T = st.range(0), HV = st.range(1);
  const GdrInputs in(T, kH, HV, kK, kV);
  const at::Tensor q = tensor_of(in.q, {1, T, kH, kK}), k = tensor_of(in.k, {1, T, kH, kK});
  const at::Tensor v = tensor_of(in.v, {1, T, HV, kV});
  const at::Tensor g = tensor_of(in.g, {1, T, HV}), beta = tensor_of(in.beta, {1, T, HV});
  const at::Tensor s0 = tensor_of(uniform(HV * kK * kV, -0.1f, 0.1f, 6), {1, HV, kK, kV});
  for (auto _ : st) {
    auto r =
        kernels::torch::chunked_gated_delta_rule(q, k, v, g, beta, std::nullopt, s0, 0.0, true);
    benchmark::DoNotOptimize(r.output.data_ptr());
  }
  set_counters(st, T, gdr_nominal_flops(T, HV, kK, kV));
}

BENCHMARK(BM_prefill_torch)->Name("gdr_prefill/torch")->Apply(prefill_shapes);

// LibTorch autograd of the ATen chunked forward on requires_grad tensors: the forward recorded,
// then torch::autograd::grad with do and dht, every input gradient (q, k, v, g, beta, h0) out.
void BM_backward_torch_autograd(benchmark::State& st) {
  const int64_t T = st.range(0), HV = st.range(1);
  const BackwardInputs x(T, HV);
  at::Tensor q = tensor_of(x.in.q, {1, T, kH, kK}), k = tensor_of(x.in.k, {1, T, kH, kK});
  at::Tensor v = tensor_of(x.in.v, {1, T, HV, kV});
  at::Tensor g = tensor_of(x.in.g, {1, T, HV}), beta = tensor_of(x.in.beta, {1, T, HV});
  at::Tensor s0 = tensor_of(x.state, {1, HV, kK, kV});
  const at::Tensor d_out = tensor_of(x.d_out, {1, T, HV, kV});
  const at::Tensor d_ht = tensor_of(x.d_ht, {1, HV, kK, kV});
  const std::vector<at::Tensor> inputs{q.requires_grad_(),    k.requires_grad_(),
                                       v.requires_grad_(),    g.requires_grad_(),
                                       beta.requires_grad_(), s0.requires_grad_()};
  for (auto _ : st) {
    auto r =
        kernels::torch::chunked_gated_delta_rule(q, k, v, g, beta, std::nullopt, s0, 0.0, true);
    const auto grads = ::torch::autograd::grad({r.output, r.final_state}, inputs, {d_out, d_ht});
    benchmark::DoNotOptimize(grads[0].data_ptr());
  }
  set_counters(st, T, 2 * gdr_nominal_flops(T, HV, kK, kV));
}

BENCHMARK(BM_backward_torch_autograd)->Name("gdr_backward/torch_autograd")->Apply(backward_shapes);

void BM_short_torch(benchmark::State& st) {
  const int64_t N = st.range(0), L = st.range(1), HV = st.range(2), T = N * L;
  const GdrInputs in(T, kH, HV, kK, kV);
  const at::Tensor q = tensor_of(in.q, {1, T, kH, kK}), k = tensor_of(in.k, {1, T, kH, kK});
  const at::Tensor v = tensor_of(in.v, {1, T, HV, kV});
  const at::Tensor g = tensor_of(in.g, {1, T, HV}), beta = tensor_of(in.beta, {1, T, HV});
  const at::Tensor cu = at::arange(0, T + 1, L, at::kLong);
  for (auto _ : st) {
    auto r =
        kernels::torch::chunked_gated_delta_rule(q, k, v, g, beta, cu, std::nullopt, 0.0, true);
    benchmark::DoNotOptimize(r.final_state.data_ptr());
  }
  set_counters(st, T, gdr_nominal_flops(T, HV, kK, kV), 4.0 * N * HV * kK * kV);
}

BENCHMARK(BM_short_torch)
    ->Name("gdr_short/torch")
    ->ArgNames({"N", "L", "HV"})
    ->Args({256, 16, 16})
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Decode through the recurrent ATen kernel: the pool rows gathered, updated and scattered back,
// as a framework without a pooled kernel does it.
void BM_decode_torch(benchmark::State& st) {
  const int64_t HV = st.range(0);
  const GdrInputs in(kDecodeSeqs, kH, HV, kK, kV);
  const at::Tensor q = tensor_of(in.q, {kDecodeSeqs, 1, kH, kK});
  const at::Tensor k = tensor_of(in.k, {kDecodeSeqs, 1, kH, kK});
  const at::Tensor v = tensor_of(in.v, {kDecodeSeqs, 1, HV, kV});
  const at::Tensor g = tensor_of(in.g, {kDecodeSeqs, 1, HV});
  const at::Tensor beta = tensor_of(in.beta, {kDecodeSeqs, 1, HV});
  at::Tensor pool =
      tensor_of(uniform(kPoolSlots * HV * kK * kV, -0.1f, 0.1f, 7), {kPoolSlots, HV, kK, kV});
  const std::vector<int32_t> s = decode_slots();
  const at::Tensor slots = at::tensor(std::vector<int64_t>(s.begin(), s.end()), at::kLong);
  for (auto _ : st) {
    auto r = kernels::torch::recurrent_gated_delta_rule(q, k, v, g, beta, std::nullopt,
                                                        pool.index_select(0, slots), 0.0, true);
    pool.index_copy_(0, slots, r.final_state);
    benchmark::DoNotOptimize(pool.data_ptr());
  }
  set_counters(st, kDecodeSeqs, 0.0, decode_state_bytes(HV));
}

BENCHMARK(BM_decode_torch)
    ->Name("gdr_decode/torch")
    ->ArgNames({"HV"})
    ->Arg(16)
    ->Arg(32)
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

void BM_layer_torch(benchmark::State& st) {
  const int64_t T = st.range(0), HV = st.range(1);
  const LayerInputs in(T, HV);
  kernels::torch::LinearAttentionWeights w;
  w.num_heads = kH;
  w.num_value_heads = HV;
  w.key_dim = kK;
  w.value_dim = kV;
  w.conv_weight = tensor_of(in.conv_weight, {in.D, 4});
  w.conv_bias = tensor_of(in.conv_bias, {in.D});
  w.A_log = tensor_of(in.A_log, {HV});
  w.dt_bias = tensor_of(in.dt_bias, {HV});
  w.norm_weight = tensor_of(in.norm_weight, {kV});
  const at::Tensor qkv = tensor_of(in.qkv, {T, in.D}), z = tensor_of(in.z, {T, HV, kV});
  const at::Tensor a = tensor_of(in.a, {T, HV}), b = tensor_of(in.b, {T, HV});
  for (auto _ : st) {
    auto r = kernels::torch::linear_attention_layer(qkv, z, a, b, w);
    benchmark::DoNotOptimize(r.output.data_ptr());
  }
  set_counters(st, T, gdr_nominal_flops(T, HV, kK, kV));
}

BENCHMARK(BM_layer_torch)
    ->Name("layer_prefill/torch")
    ->ArgNames({"T", "HV"})
    ->Args({4096, 32})
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
#endif  // DELTACHECK_BENCH_TORCH

}  // namespace
}  // namespace deltacheck::bench
