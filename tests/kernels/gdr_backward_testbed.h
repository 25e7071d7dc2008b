// The backward kernels' test problems, shared by tests/kernels/cpu/test_gdr_backward_kernel.cc
// (the CPU kernels) and tests/kernels/cuda_host/ (the host emulation of the CUDA kernel): seeded
// inputs stored in a kernel dtype with the same values in FP64 for the reference backward
// (reference/gated_delta_rule_backward.h), gradient buffers poisoned with NaN, the kernel
// parameters on those host buffers, and the accuracy bound per storage type.
#pragma once

#include <cmath>
#include <cstdint>
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
  return std::sqrt(num / den);
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

}  // namespace deltacheck::kernels::backward_testbed
