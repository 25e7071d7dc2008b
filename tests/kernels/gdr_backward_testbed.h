// The backward kernels' test problems, shared by tests/kernels/cpu/test_gdr_backward_kernel.cc
// (the CPU kernels) and tests/kernels/cuda_host/ (the host emulation of the CUDA kernel): seeded
// inputs stored in a kernel dtype with the same values in FP64 for the reference backward
// (reference/gated_delta_rule_backward.h), gradient buffers poisoned with NaN, the kernel
// parameters on those host buffers, and the accuracy bound per storage type.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "core/half.h"
#include "kernels/common/gated_delta_rule_params.h"
#include "reference/gated_delta_rule_backward.h"
#include "tests/splitmix64.h"

namespace deltacheck::kernels::backward_testbed {

using Rng = test_support::SplitMix64;

// A tensor stored in `type` (as raw bytes) and the same values in FP64 for the reference.
struct Tensor {
  DType type;
  std::vector<uint16_t> half;
  std::vector<float> f32;
  std::vector<double> f64;
  Tensor(DType t, int64_t n) : type(t) {
    if (t == DType::kF32)
      f32.assign(static_cast<size_t>(n), NAN);
    else
      half.assign(static_cast<size_t>(n), 0x7fc0);  // NaN in bf16 and fp16 alike
  }
  void* data() { return type == DType::kF32 ? static_cast<void*>(f32.data()) : half.data(); }
  int64_t size() const {
    return static_cast<int64_t>(type == DType::kF32 ? f32.size() : half.size());
  }
  double at(int64_t i) const { return load_as_float(cdata(), type, i); }
  float* f() { return f32.data(); }
  const void* cdata() const {
    return type == DType::kF32 ? static_cast<const void*>(f32.data()) : half.data();
  }
  void fill(Rng& r, double lo, double hi) {
    f64.resize(static_cast<size_t>(size()));
    for (int64_t i = 0; i < size(); ++i) {
      store_from_float(data(), type, i, static_cast<float>(r.uniform(lo, hi)));
      f64[i] = at(i);  // the reference sees exactly the stored value
    }
  }
};

struct Case {
  std::string name;
  DType dt;
  std::vector<int64_t> cu;  // empty: B rows of T tokens
  int64_t T, H, HV, K, V;
  double g_lo;
  int64_t B = 1;
  bool l2 = true, h0 = true, dht = true;
};

struct Problem {
  Case c;
  DType dt;
  int64_t B, T, H, HV, K, V;
  std::vector<int64_t> cu;
  Tensor q, k, v, g, beta, dout, h0, dht;  // g, h0, dht: fp32
  explicit Problem(const Case& c_)
      : c(c_),
        dt(c.dt),
        B(c.B),
        T(c.T),
        H(c.H),
        HV(c.HV),
        K(c.K),
        V(c.V),
        cu(c.cu),
        q(dt, B * T * H * K),
        k(dt, B * T * H * K),
        v(dt, B * T * HV * V),
        g(DType::kF32, B * T * HV),
        beta(dt, B * T * HV),
        dout(dt, B * T * HV * V),
        h0(DType::kF32, n() * HV * K * V),
        dht(DType::kF32, n() * HV * K * V) {
    Rng r{7 + static_cast<uint64_t>(T)};
    q.fill(r, -1, 1), k.fill(r, -1, 1), v.fill(r, -1, 1), g.fill(r, c.g_lo, 0);
    beta.fill(r, 0.05, 1.0), dout.fill(r, -1, 1), h0.fill(r, -0.5, 0.5), dht.fill(r, -1, 1);
  }
  int64_t n() const { return cu.empty() ? B : static_cast<int64_t>(cu.size()) - 1; }

  reference::GatedDeltaRuleGradients oracle() const {
    reference::GatedDeltaRuleArgs a;
    a.batch = B, a.seq_len = T, a.num_heads = H, a.num_value_heads = HV, a.key_dim = K;
    a.value_dim = V;
    a.q = q.f64.data(), a.k = k.f64.data(), a.v = v.f64.data(), a.g = g.f64.data();
    a.beta = beta.f64.data(), a.cu_seqlens = cu;
    a.initial_state = c.h0 ? h0.f64.data() : nullptr;
    a.use_qk_l2norm = c.l2;
    return reference::gated_delta_rule_backward(a, dout.f64.data(),
                                                c.dht ? dht.f64.data() : nullptr);
  }
};

// The kernel's outputs, poisoned with NaN before the run.
struct Grads {
  Tensor dq, dk, dv, dg, dbeta, dh0;
  explicit Grads(const Problem& p)
      : dq(p.dt, p.B * p.T * p.H * p.K),
        dk(p.dt, p.B * p.T * p.H * p.K),
        dv(p.dt, p.B * p.T * p.HV * p.V),
        dg(DType::kF32, p.B * p.T * p.HV),
        dbeta(p.dt, p.B * p.T * p.HV),
        dh0(DType::kF32, p.n() * p.HV * p.K * p.V) {}
};

inline GatedDeltaRuleBackwardParams params(Problem& p, Grads& d) {
  GatedDeltaRuleBackwardParams b;
  GatedDeltaRuleParams& f = b.forward;
  f.batch = p.B, f.seq_len = p.T, f.num_heads = p.H, f.num_value_heads = p.HV;
  f.key_dim = p.K, f.value_dim = p.V, f.dtype = p.dt;
  f.q = p.q.data(), f.k = p.k.data(), f.v = p.v.data(), f.g = p.g.f32.data();
  f.beta = p.beta.data();
  if (!p.cu.empty()) f.cu_seqlens = p.cu.data(), f.num_seqs = p.n();
  f.initial_state = p.c.h0 ? p.h0.f32.data() : nullptr, f.use_qk_l2norm = p.c.l2;
  b.d_output = p.dout.data(), b.d_final_state = p.c.dht ? p.dht.f32.data() : nullptr;
  b.dq = d.dq.data(), b.dk = d.dk.data(), b.dv = d.dv.data(), b.dg = d.dg.f32.data();
  b.dbeta = d.dbeta.data(), b.dh0 = d.dh0.f32.data();
  return b;
}

inline double rel_rms(const Tensor& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < got.size(); ++i) {
    const double e = got.at(i) - want[i];
    num += e * e;
    den += want[i] * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Bounds on the relative RMS error per tensor. A tensor stored in bf16 / fp16 carries its final
// rounding, at most the unit roundoff u = 2^-8 (bf16) / 2^-11 (fp16) of each element, hence of
// the RMS (measured 1.5e-3 to 1.8e-3 in bf16, 2.0e-4 to 2.4e-4 in fp16); the fp32 arithmetic
// before it adds about 1e-7. Bound: 2u for narrow storage. For fp32 storage (every tensor in
// fp32, and dg, dh0 always) 2e-6, ten times the largest error measured here (1.9e-7, dbeta),
// which leaves room for other compilers' FMA contraction while a lost term or a wrong sign of
// any one token's contribution is orders of magnitude above it.
inline double bound(DType stored) {
  switch (stored) {
    case DType::kBF16:
      return 2 * 0x1p-8;
    case DType::kF16:
      return 2 * 0x1p-11;
    case DType::kF32:
      break;
    default:
      break;
  }
  return 2e-6;
}

// gtest's name for a Case parameter (in test listings): its name.
inline void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// The problems every backward kernel is checked on (the CPU kernels, the CUDA kernel on a device
// and in the host emulation).
inline const std::vector<Case>& kernel_cases() {
  static const std::vector<Case> cases = {
      // Empty sequences first, inside and last; a tail past cu_seqlens[-1]; a sequence longer than
      // one 64-token block.
      {"fp32_packed_gva", DType::kF32, {0, 0, 37, 37, 150, 160}, 170, 2, 4, 32, 24, -3},
      {"fp32_odd_dims_strong_decay", DType::kF32, {0, 65, 65, 129}, 129, 1, 2, 13, 7, -20},
      {"bf16_packed_gva", DType::kBF16, {0, 0, 37, 37, 150, 160}, 170, 2, 4, 32, 24, -3},
      {"fp16_packed_gva", DType::kF16, {0, 0, 37, 37, 150, 160}, 170, 2, 4, 32, 24, -3},
      // Chunk-edge lengths 63, 64, 65, 1 and an empty last sequence, a tail of 7; weak and strong
      // gates (g down to -20: decays of 2e-9 per token).
      {"fp32_chunk_edges_gva", DType::kF32, {0, 63, 127, 192, 193, 193}, 200, 2, 4, 32, 24, -3},
      {"fp32_chunk_edges_strong_decay",
       DType::kF32,
       {0, 63, 127, 192, 193, 193},
       200,
       2,
       2,
       16,
       16,
       -20},
      {"bf16_chunk_edges", DType::kBF16, {0, 63, 127, 192, 193, 193}, 200, 2, 4, 32, 24, -3},
      {"fp16_chunk_edges_strong_decay",
       DType::kF16,
       {0, 63, 127, 192, 193, 193},
       200,
       2,
       2,
       16,
       16,
       -20},
      // B rows without cu_seqlens (the "rows past the first" bug class), GVA 4, without the norm,
      // initial states or dht.
      {"fp32_batch_rows_bare", DType::kF32, {}, 90, 1, 4, 16, 16, -1, 3, false, false, false},
      {"bf16_batch_rows_l2_dht", DType::kBF16, {}, 70, 2, 2, 16, 8, -1, 2, true, false, true},
      // Without GVA the chunked kernel finishes dq and dk in the lane: without the norm too.
      {"fp32_batch_rows_no_gva_no_l2",
       DType::kF32,
       {},
       130,
       2,
       2,
       16,
       16,
       -1,
       2,
       false,
       false,
       true},
  };
  return cases;
}

// Prints "[ measured ] <label>: dq e dk e ..." (each gradient's relative RMS error against the
// oracle) and, with `expect`, expects each within bound() (NaN, i.e. unwritten, fails too).
// Returns whether all were within.
inline bool within_bounds(const std::string& label, const Grads& d,
                          const reference::GatedDeltaRuleGradients& ref, bool expect = true) {
  const struct {
    const char* name;
    const Tensor& got;
    const std::vector<double>& want;
  } rows[] = {{"dq", d.dq, ref.dq}, {"dk", d.dk, ref.dk},          {"dv", d.dv, ref.dv},
              {"dg", d.dg, ref.dg}, {"dbeta", d.dbeta, ref.dbeta}, {"dh0", d.dh0, ref.dh0}};
  std::printf("[ measured ] %s:", label.c_str());
  bool all = true;
  for (const auto& r : rows) {
    const double e = rel_rms(r.got, r.want);
    std::printf(" %s %.1e", r.name, e);
    const bool ok = e < bound(r.got.type);
    all = all && ok;
    if (expect) {
      EXPECT_TRUE(ok) << label << " " << r.name << ": relative RMS " << e;
    }
  }
  std::printf("\n");
  return all;
}

// Every gradient's bytes, dh0 first, for bit-for-bit comparisons of two runs.
inline std::vector<uint8_t> bytes_of(const Grads& d) {
  std::vector<uint8_t> all;
  for (const Tensor* x : {&d.dh0, &d.dq, &d.dk, &d.dv, &d.dg, &d.dbeta}) {
    const auto* b = static_cast<const uint8_t*>(x->cdata());
    all.insert(all.end(), b, b + x->size() * dtype_size(x->type));
  }
  return all;
}

// The contract's edges on one fp32 problem: sequences of 20, 30 and 10 tokens and a tail of 10
// (T = 70), on pool rows {2, -1, 0} of a 4-row pool (the second a padding entry; rows 1 and 3
// nobody's), h0 and dht rows for the whole pool, dh0 (grads()) filled with -7 before the run.
struct PoolProblem {
  Problem p{Case{"", DType::kF32, {0, 20, 50, 60}, 70, 1, 2, 8, 5, -2}};
  int64_t row = p.HV * p.K * p.V;
  std::vector<int32_t> slots{2, -1, 0};

  PoolProblem() {
    p.h0 = Tensor(DType::kF32, 4 * row), p.dht = Tensor(DType::kF32, 4 * row);
    for (int64_t i = 0; i < 4 * row; ++i) {
      p.h0.f32[i] = static_cast<float>(std::sin(0.3 * i));
      p.dht.f32[i] = static_cast<float>(std::cos(0.7 * i));
    }
  }
  Grads grads() const {
    Grads d(p);
    d.dh0 = Tensor(DType::kF32, 4 * row);
    std::fill(d.dh0.f32.begin(), d.dh0.f32.end(), -7.0f);
    return d;
  }
  // The parameters on d with the pool; `state_slots` where the kernel reads the slots from.
  GatedDeltaRuleBackwardParams params(Grads& d, const int32_t* state_slots, int64_t chunk) {
    GatedDeltaRuleBackwardParams b = backward_testbed::params(p, d);
    b.forward.state_slots = state_slots, b.forward.num_state_rows = 4;
    b.forward.chunk_size = chunk;
    return b;
  }
  // Rows 1 and 3 of dh0 untouched; tokens 20 .. 49 (the padding entry) and 60 .. 69 (the tail):
  // every gradient exactly zero.
  void expect_contract(const Grads& d, const std::string& label) const {
    for (int64_t e = 0; e < row; ++e) {
      ASSERT_EQ(d.dh0.f32[1 * row + e], -7.0f) << label;
      ASSERT_EQ(d.dh0.f32[3 * row + e], -7.0f) << label;
    }
    for (int64_t t = 20; t < 70; ++t) {
      if (t >= 50 && t < 60) continue;
      for (int64_t e = 0; e < p.H * p.K; ++e) {
        ASSERT_EQ(d.dq.f32[t * p.H * p.K + e], 0.0f) << label << ", token " << t;
        ASSERT_EQ(d.dk.f32[t * p.H * p.K + e], 0.0f) << label << ", token " << t;
      }
      for (int64_t e = 0; e < p.HV * p.V; ++e)
        ASSERT_EQ(d.dv.f32[t * p.HV * p.V + e], 0.0f) << label << ", token " << t;
      for (int64_t e = 0; e < p.HV; ++e) {
        ASSERT_EQ(d.dg.f32[t * p.HV + e], 0.0f) << label << ", token " << t;
        ASSERT_EQ(d.dbeta.f32[t * p.HV + e], 0.0f) << label << ", token " << t;
      }
    }
  }
};

}  // namespace deltacheck::kernels::backward_testbed
