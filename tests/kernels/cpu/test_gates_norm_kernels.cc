// The CPU gates and gated RMS norm kernels against the FP64 reference, in fp32, bf16 and fp16
// (layer_kernels_testbed.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/gated_rms_norm.h"
#include "kernels/cpu/gates.h"
#include "reference/gated_rms_norm.h"
#include "reference/gates.h"
#include "tests/kernels/cpu/layer_kernels_testbed.h"

namespace deltacheck::kernels::cpu {
namespace {

namespace ref = deltacheck::reference;
using namespace layer_testbed;  // NOLINT(build/namespaces): the testbed is these tests' own

// ---------------------------------------------------------------------------------------------
// gates and gated RMS norm

class GatesKernel : public ::testing::TestWithParam<DType> {};

TEST_P(GatesKernel, MatchesReference) {
  const DType dt = GetParam();
  const int64_t T = 300, HV = 6;
  const TokenSource src(400);
  std::vector<TokenRef> toks;
  for (int64_t t = 0; t < T; ++t) toks.push_back({0, t});
  std::vector<double> a = gather(src, kA, toks, HV, -8.0, 8.0, dt);
  std::vector<double> b = gather(src, kB, toks, HV, -8.0, 8.0, dt);
  // Far tails, where naive softplus / sigmoid overflow or lose everything.
  const double tails[6] = {-100.0, -30.0, 30.0, 100.0, 0.0, -1e-3};
  for (int i = 0; i < 6; ++i) a[i] = round_to(tails[i], dt), b[i] = round_to(tails[i], dt);
  const std::vector<double> A_log = weights(8, HV, -2.0, 2.0), dt_bias = weights(9, HV, -1.0, 1.0);
  ref::GatesArgs ra;
  ra.num_tokens = T;
  ra.num_value_heads = HV;
  ra.a = a.data();
  ra.b = b.data();
  ra.A_log = A_log.data();
  ra.dt_bias = dt_bias.data();
  const ref::GatesResult want = ref::gates(ra);

  const Buffer ab = Buffer::of(a, dt), bb = Buffer::of(b, dt);
  const std::vector<float> A_logf = to_float(A_log), dt_biasf = to_float(dt_bias);
  std::vector<float> g(static_cast<size_t>(T * HV), std::nanf(""));
  Buffer beta = Buffer::poisoned(T * HV, dt);
  GatesParams p;
  p.num_tokens = T;
  p.num_value_heads = HV;
  p.dtype = dt;
  p.a = ab.data();
  p.b = bb.data();
  p.A_log = A_logf.data();
  p.dt_bias = dt_biasf.data();
  p.g = g.data();
  p.beta = beta.data();
  ASSERT_TRUE(gates(p).ok());
  EXPECT_TRUE(close("g", read(g, 0, T * HV), want.g, 1e-30, 1e-5));
  // 1e-30: far in the tail sigmoid is below what fp32 exp reaches, whatever the storage.
  EXPECT_TRUE(
      close("beta", read(beta, 0, T * HV), want.beta, 1e-30 + underflow(dt), 1e-6 + roundoff(dt)));
}

INSTANTIATE_TEST_SUITE_P(Types, GatesKernel, kAllTypes, dtype_name);

class GatedRmsNormKernel : public ::testing::TestWithParam<DType> {};

TEST_P(GatedRmsNormKernel, MatchesReference) {
  const DType dt = GetParam();
  const int64_t T = 37, HV = 3, V = 100;
  const TokenSource src(500);
  std::vector<TokenRef> toks;
  for (int64_t t = 0; t < T; ++t) toks.push_back({0, t});
  const std::vector<double> x = gather(src, kV, toks, HV * V, -3.0, 3.0, dt);
  const std::vector<double> z = gather(src, kZ, toks, HV * V, -4.0, 4.0, dt);
  const std::vector<double> w = weights(10, V, 0.5, 1.5);
  ref::GatedRmsNormArgs ra;
  ra.num_tokens = T;
  ra.num_heads = HV;
  ra.dim = V;
  ra.x = x.data();
  ra.z = z.data();
  ra.weight = w.data();
  const std::vector<double> want = ref::gated_rms_norm(ra);

  const Buffer xb = Buffer::of(x, dt), zb = Buffer::of(z, dt);
  const std::vector<float> wf = to_float(w);
  Buffer y = Buffer::poisoned(T * HV * V, dt);
  GatedRmsNormParams p;
  p.num_tokens = T;
  p.num_heads = HV;
  p.dim = V;
  p.dtype = dt;
  p.x = xb.data();
  p.z = zb.data();
  p.weight = wf.data();
  p.y = y.data();
  ASSERT_TRUE(gated_rms_norm(p).ok());
  EXPECT_TRUE(close("y", read(y, 0, T * HV * V), want, 1e-5, 1e-5 + roundoff(dt)));
}

INSTANTIATE_TEST_SUITE_P(Types, GatedRmsNormKernel, kAllTypes, dtype_name);

}  // namespace
}  // namespace deltacheck::kernels::cpu
