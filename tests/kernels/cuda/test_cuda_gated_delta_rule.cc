// The CUDA gated delta rule kernels (chunked and recurrent, prefill across calls, decode with
// token states, state pools) against the FP64 reference (cuda_kernels_testbed.h).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/gated_delta_rule.h"
#include "reference/gated_delta_rule.h"
#include "tests/kernels/cuda/cuda_kernels_testbed.h"

namespace deltacheck::kernels::cuda {
namespace {

using namespace testbed;  // NOLINT(build/namespaces): the testbed is these tests' own

// ---- gated delta rule ------------------------------------------------------------------------

// Relative RMS ceiling of a state against the oracle: states are fp32 whatever the input dtype.
constexpr double kStateCeiling = 5e-6;

// The floor of "at most twice the same-precision recurrence's error": about fp32 rounding of the
// outputs themselves. Low enough that accumulating the gates in fp32 (G_i - G_j cancelling at
// |G| ~ 600) fails the strong-decay case, which it does at about 8x the recurrence's error.
double comparison_floor(DType t) { return t == DType::kF32 ? 3e-7 : 0.1 * output_ceiling(t); }

struct GdrCase {
  std::vector<int64_t> lens;  // packed sequences (cu_seqlens); empty: batch x seq_len
  int64_t batch = 1, seq_len = 0;
  int64_t heads = 1, value_heads = 1, key_dim = 64, value_dim = 64;
  DType dtype = DType::kF32;
  bool l2norm = true;
  double g_lo = -1.0, g_hi = 0.0;
  bool initial_state = true;
  std::vector<int32_t> slots;  // empty: sequence i uses row i
  int64_t pool_rows = 0;       // with slots
  int64_t chunk_size = 64;
  uint64_t seed = 1;

  bool packed() const { return !lens.empty(); }
  int64_t num_seqs() const { return packed() ? static_cast<int64_t>(lens.size()) : batch; }
  int64_t tokens() const {
    int64_t total = 0;
    for (int64_t n : lens) total += n;
    return packed() ? total : batch * seq_len;
  }
  int64_t rows() const { return slots.empty() ? num_seqs() : pool_rows; }
  int32_t slot(int64_t i) const {
    return slots.empty() ? static_cast<int32_t>(i) : slots[static_cast<size_t>(i)];
  }
  int64_t state_size() const { return value_heads * key_dim * value_dim; }
};

// Inputs exactly as the device sees them (rounded to the dtype), host side.
struct GdrData {
  std::vector<int64_t> cu;  // packed only
  std::vector<float> q, k, v, g, beta, pool;
};

GdrData make_gdr_data(const GdrCase& c) {
  SplitMix64 rng(c.seed);
  const auto T = static_cast<size_t>(c.tokens());
  GdrData d;
  if (c.packed()) {
    d.cu.push_back(0);
    for (int64_t n : c.lens) d.cu.push_back(d.cu.back() + n);
  }
  // Without the in-kernel norm, keys get |k| near 1 so that the rule itself stays contractive.
  const double key_range = c.l2norm ? 1.0 : std::sqrt(3.0 / static_cast<double>(c.key_dim));
  const size_t qk = T * static_cast<size_t>(c.heads * c.key_dim);
  d.q = rounded(rng.uniform_vector(qk, -1.0, 1.0), c.dtype);
  d.k = rounded(rng.uniform_vector(qk, -key_range, key_range), c.dtype);
  d.v = rounded(rng.uniform_vector(T * static_cast<size_t>(c.value_heads * c.value_dim), -1.0, 1.0),
                c.dtype);
  d.g = rng.uniform_vector(T * static_cast<size_t>(c.value_heads), c.g_lo, c.g_hi);
  d.beta = rounded(rng.uniform_vector(T * static_cast<size_t>(c.value_heads), 0.05, 0.95), c.dtype);
  d.pool = rng.uniform_vector(static_cast<size_t>(c.rows() * c.state_size()), -0.5, 0.5);
  return d;
}

reference::GatedDeltaRuleResult gdr_reference(const GdrCase& c, const GdrData& d) {
  const std::vector<double> q = widen(d.q), k = widen(d.k), v = widen(d.v), g = widen(d.g),
                            beta = widen(d.beta);
  std::vector<double> initial(static_cast<size_t>(c.num_seqs() * c.state_size()), 0.0);
  if (c.initial_state) {
    for (int64_t i = 0; i < c.num_seqs(); ++i) {
      if (c.slot(i) < 0) continue;
      std::copy_n(d.pool.begin() + c.slot(i) * c.state_size(), c.state_size(),
                  initial.begin() + i * c.state_size());
    }
  }
  reference::GatedDeltaRuleArgs a;
  a.batch = c.packed() ? 1 : c.batch;
  a.seq_len = c.packed() ? c.tokens() : c.seq_len;
  a.num_heads = c.heads;
  a.num_value_heads = c.value_heads;
  a.key_dim = c.key_dim;
  a.value_dim = c.value_dim;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.g = g.data();
  a.beta = beta.data();
  a.cu_seqlens = d.cu;
  a.initial_state = initial.data();
  a.use_qk_l2norm = c.l2norm;
  return reference::gated_delta_rule(a);
}

struct GdrOutputs {
  std::vector<uint8_t> o;  // raw bytes in the dtype
  std::vector<float> pool;
};

enum class Kernel { kChunked, kRecurrent };

GdrOutputs gdr_run(const GdrCase& c, const GdrData& d, Kernel kernel) {
  DeviceBuffer q(encode(d.q, c.dtype)), k(encode(d.k, c.dtype)), v(encode(d.v, c.dtype));
  DeviceBuffer g(d.g), beta(encode(d.beta, c.dtype));
  DeviceBuffer o(static_cast<size_t>(c.tokens() * c.value_heads * c.value_dim) *
                 static_cast<size_t>(dtype_size(c.dtype)));
  o.fill(kPoison);
  DeviceBuffer cu(d.cu), slots(c.slots), pool(d.pool);

  GatedDeltaRuleParams p;
  p.batch = c.packed() ? 1 : c.batch;
  p.seq_len = c.packed() ? c.tokens() : c.seq_len;
  p.num_heads = c.heads;
  p.num_value_heads = c.value_heads;
  p.key_dim = c.key_dim;
  p.value_dim = c.value_dim;
  p.dtype = c.dtype;
  p.q = q.as<void>();
  p.k = k.as<void>();
  p.v = v.as<void>();
  p.g = g.as<float>();
  p.beta = beta.as<void>();
  p.o = o.as<void>();
  if (c.packed()) {
    p.cu_seqlens = cu.as<int64_t>();
    p.num_seqs = c.num_seqs();
  }
  // In place on the pool: rows nobody addresses must come back bit-identical.
  p.initial_state = c.initial_state ? pool.as<float>() : nullptr;
  p.final_state = pool.as<float>();
  p.state_slots = c.slots.empty() ? nullptr : slots.as<int32_t>();
  p.num_state_rows = c.rows();
  p.use_qk_l2norm = c.l2norm;
  p.chunk_size = c.chunk_size;
  const Status layout = validate_sequence_layout(p, nullptr);
  EXPECT_TRUE(layout.ok()) << layout.message();
  const Status st = kernel == Kernel::kChunked ? chunked_gated_delta_rule(p, nullptr)
                                               : recurrent_gated_delta_rule(p, nullptr);
  if (!st.ok()) throw std::runtime_error("gated delta rule: " + st.message());
  return {o.download<uint8_t>(), pool.download<float>()};
}

struct GdrErrors {
  Error o, state;
};

// Compares every active sequence with the oracle; padding entries' outputs and every row of the
// pool that no active sequence addresses must be untouched (checked here, failing the test).
GdrErrors gdr_compare(const GdrCase& c, const GdrData& d,
                      const reference::GatedDeltaRuleResult& ref, const GdrOutputs& out) {
  GdrErrors e;
  const std::vector<float> o = decode(out.o, c.dtype);
  const int64_t row = c.value_heads * c.value_dim;  // o elements per token
  const auto esize = static_cast<size_t>(dtype_size(c.dtype));
  std::vector<bool> row_written(static_cast<size_t>(c.rows()), false);
  for (int64_t i = 0; i < c.num_seqs(); ++i) {
    const int64_t begin = c.packed() ? d.cu[static_cast<size_t>(i)] : i * c.seq_len;
    const int64_t end = c.packed() ? d.cu[static_cast<size_t>(i + 1)] : begin + c.seq_len;
    if (c.slot(i) < 0) {
      EXPECT_TRUE(all_bytes(out.o, static_cast<size_t>(begin * row) * esize,
                            static_cast<size_t>(end * row) * esize, kPoison))
          << "output of padding entry " << i << " was written";
      continue;
    }
    for (int64_t x = begin * row; x < end * row; ++x) {
      e.o.add(ref.output[static_cast<size_t>(x)], o[static_cast<size_t>(x)]);
    }
    const int64_t s = c.slot(i);
    row_written[static_cast<size_t>(s)] = true;
    for (int64_t x = 0; x < c.state_size(); ++x) {
      e.state.add(ref.final_state[static_cast<size_t>(i * c.state_size() + x)],
                  out.pool[static_cast<size_t>(s * c.state_size() + x)]);
    }
  }
  for (int64_t r = 0; r < c.rows(); ++r) {
    if (row_written[static_cast<size_t>(r)]) continue;
    EXPECT_EQ(0,
              std::memcmp(out.pool.data() + r * c.state_size(), d.pool.data() + r * c.state_size(),
                          static_cast<size_t>(c.state_size()) * sizeof(float)))
        << "pool row " << r << " is addressed by no sequence but changed";
  }
  EXPECT_EQ(e.o.non_finite, 0) << describe("o", e.o);
  EXPECT_EQ(e.state.non_finite, 0) << describe("state", e.state);
  return e;
}

// Runs both kernels on c and holds them to the tolerance rule: within the dtype's ceiling, and the
// chunked kernel at most twice as far from the oracle as the recurrence in the same precision
// (plus a floor at the level of fp32 rounding).
void check_gdr_case(const GdrCase& c) {
  const GdrData d = make_gdr_data(c);
  const reference::GatedDeltaRuleResult ref = gdr_reference(c, d);
  const GdrErrors chunked = gdr_compare(c, d, ref, gdr_run(c, d, Kernel::kChunked));
  const GdrErrors recurrent = gdr_compare(c, d, ref, gdr_run(c, d, Kernel::kRecurrent));
  if (chunked.o.count > 0) {
    ASSERT_GT(chunked.o.ref_norm(), 0.0) << "degenerate reference output";
  }
  const double ceiling = output_ceiling(c.dtype);
  ::testing::Test::RecordProperty("chunked_o_rel_rms", sci(chunked.o.rel_rms()));
  ::testing::Test::RecordProperty("recurrent_o_rel_rms", sci(recurrent.o.rel_rms()));
  ::testing::Test::RecordProperty("chunked_state_rel_rms", sci(chunked.state.rel_rms()));
  ::testing::Test::RecordProperty("recurrent_state_rel_rms", sci(recurrent.state.rel_rms()));
  EXPECT_LE(chunked.o.rel_rms(), ceiling) << describe("chunked o", chunked.o);
  EXPECT_LE(recurrent.o.rel_rms(), ceiling) << describe("recurrent o", recurrent.o);
  EXPECT_LE(chunked.o.rel_rms(), 2.0 * recurrent.o.rel_rms() + comparison_floor(c.dtype))
      << describe("chunked o", chunked.o) << " vs " << describe("recurrent o", recurrent.o);
  EXPECT_LE(chunked.state.rel_rms(), kStateCeiling) << describe("chunked state", chunked.state);
  EXPECT_LE(recurrent.state.rel_rms(), kStateCeiling)
      << describe("recurrent state", recurrent.state);
}

TEST(CudaDevice, ReportsTheDevice) {
  DC_REQUIRE_DEVICE();
  const DeviceInfo info = current_device_info();
  ASSERT_TRUE(info.status.ok()) << info.status.message();
  EXPECT_FALSE(info.name.empty());
  EXPECT_GT(info.sm_count, 0);
  EXPECT_GE(info.compute_capability_major, 8) << "the kernels are built for sm_80 and sm_90";
}

TEST(CudaGatedDeltaRule, PackedWithZeroLengthSequencesAndGva) {
  DC_REQUIRE_DEVICE();
  GdrCase c;
  c.lens = {0, 1, 15, 64, 65, 0, 129, 2, 0};
  c.heads = 2;
  c.value_heads = 4;
  c.seed = 11;
  check_gdr_case(c);
}

TEST(CudaGatedDeltaRule, StrongDecayWithUnderflowingTailChunks) {
  DC_REQUIRE_DEVICE();
  GdrCase c;
  c.lens = {63, 127, 200};
  c.key_dim = c.value_dim = 128;
  c.g_lo = -20.0;
  c.g_hi = -1e-4;
  c.seed = 12;
  check_gdr_case(c);
}

TEST(CudaGatedDeltaRule, ZeroGateWithoutNormBatched) {
  DC_REQUIRE_DEVICE();
  GdrCase c;
  c.batch = 3;
  c.seq_len = 100;
  c.value_heads = 2;
  c.g_lo = c.g_hi = 0.0;
  c.l2norm = false;
  c.initial_state = false;
  c.seed = 13;
  check_gdr_case(c);
}

TEST(CudaGatedDeltaRule, OddHeadDimsGvaThreeAndSmallChunks) {
  DC_REQUIRE_DEVICE();
  GdrCase c;
  c.lens = {1, 33, 100, 17};
  c.value_heads = 3;
  c.key_dim = 60;
  c.value_dim = 100;
  c.chunk_size = 16;
  c.seed = 14;
  check_gdr_case(c);
}

TEST(CudaGatedDeltaRule, BFloat16) {
  DC_REQUIRE_DEVICE();
  GdrCase c;
  c.lens = {5, 64, 100, 0};
  c.heads = 1;
  c.value_heads = 2;
  c.key_dim = c.value_dim = 128;
  c.dtype = DType::kBF16;
  c.g_lo = -20.0;
  c.g_hi = -1e-4;
  c.seed = 15;
  check_gdr_case(c);
}

TEST(CudaGatedDeltaRule, Float16) {
  DC_REQUIRE_DEVICE();
  GdrCase c;
  c.lens = {70, 3};
  c.value_heads = 2;
  c.dtype = DType::kF16;
  c.seed = 16;
  check_gdr_case(c);
}

TEST(CudaGatedDeltaRule, StatePoolWithPaddingSlotsInPlace) {
  DC_REQUIRE_DEVICE();
  GdrCase c;
  c.lens = {9, 70, 0, 33, 5};
  c.slots = {4, -1, 0, 6, -1};
  c.pool_rows = 7;
  c.value_heads = 2;
  c.value_dim = 48;
  c.seed = 17;
  check_gdr_case(c);
}

// 2050 packed sequences x 32 value heads x 2 value blocks = 131200 CTAs: past a 65535 grid limit.
TEST(CudaGatedDeltaRule, ManySequencesPastTheGridLimit) {
  DC_REQUIRE_DEVICE();
  GdrCase c;
  for (int64_t i = 0; i < 2050; ++i) c.lens.push_back(1 + i % 3);
  c.heads = 8;
  c.value_heads = 32;
  c.key_dim = 32;
  c.value_dim = 64;
  c.seed = 18;
  check_gdr_case(c);
}

// Prefill split into two calls, one split mid-chunk, carrying the state: equals the one-shot
// oracle.
TEST(CudaGatedDeltaRule, ChunkedPrefillSplitAcrossCalls) {
  DC_REQUIRE_DEVICE();
  GdrCase full;
  full.lens = {177, 50};
  full.value_heads = 2;
  full.seed = 19;
  const GdrData d = make_gdr_data(full);
  const reference::GatedDeltaRuleResult ref = gdr_reference(full, d);

  // Token ranges of each call: sequence 0 splits at 100, sequence 1 at 37.
  const std::vector<std::vector<std::pair<int64_t, int64_t>>> calls = {{{0, 100}, {177, 214}},
                                                                       {{100, 177}, {214, 227}}};
  const int64_t qk_row = full.heads * full.key_dim, v_row = full.value_heads * full.value_dim;
  const int64_t hv = full.value_heads;
  std::vector<float> o_full(static_cast<size_t>(full.tokens() * v_row), NAN);
  DeviceBuffer pool(d.pool);
  for (size_t call = 0; call < calls.size(); ++call) {
    GdrData part;
    part.cu = {0};
    auto take = [](const std::vector<float>& x, int64_t width, int64_t b, int64_t e,
                   std::vector<float>& to) {
      to.insert(to.end(), x.begin() + b * width, x.begin() + e * width);
    };
    for (const auto& [b, e] : calls[call]) {
      part.cu.push_back(part.cu.back() + (e - b));
      take(d.q, qk_row, b, e, part.q);
      take(d.k, qk_row, b, e, part.k);
      take(d.v, v_row, b, e, part.v);
      take(d.g, hv, b, e, part.g);
      take(d.beta, hv, b, e, part.beta);
    }
    DeviceBuffer q(part.q), k(part.k), v(part.v), g(part.g), beta(part.beta), cu(part.cu);
    const int64_t tokens = part.cu.back();
    DeviceBuffer o(static_cast<size_t>(tokens * v_row) * sizeof(float));
    o.fill(kPoison);
    GatedDeltaRuleParams p;
    p.seq_len = tokens;
    p.num_heads = full.heads;
    p.num_value_heads = full.value_heads;
    p.key_dim = full.key_dim;
    p.value_dim = full.value_dim;
    p.q = q.as<void>();
    p.k = k.as<void>();
    p.v = v.as<void>();
    p.g = g.as<float>();
    p.beta = beta.as<void>();
    p.o = o.as<void>();
    p.cu_seqlens = cu.as<int64_t>();
    p.num_seqs = 2;
    p.initial_state = pool.as<float>();
    p.final_state = pool.as<float>();
    p.use_qk_l2norm = full.l2norm;
    DC_EXPECT_OK(chunked_gated_delta_rule(p, nullptr));
    const std::vector<float> o_part = o.download<float>();
    int64_t at = 0;
    for (const auto& [b, e] : calls[call]) {
      std::copy_n(o_part.begin() + at * v_row, (e - b) * v_row, o_full.begin() + b * v_row);
      at += e - b;
    }
  }
  Error eo, es;
  for (size_t i = 0; i < o_full.size(); ++i) eo.add(ref.output[i], o_full[i]);
  const std::vector<float> state = pool.download<float>();
  for (size_t i = 0; i < state.size(); ++i) es.add(ref.final_state[i], state[i]);
  ASSERT_GT(eo.ref_norm(), 0.0);
  EXPECT_EQ(eo.non_finite, 0);
  EXPECT_LE(eo.rel_rms(), output_ceiling(DType::kF32)) << describe("o", eo);
  EXPECT_LE(es.rel_rms(), kStateCeiling) << describe("state", es);
}

// Multi-token decode in place on a pool with padding slots, one state per draft token.
TEST(CudaGatedDeltaRule, RecurrentDecodeWithTokenStates) {
  DC_REQUIRE_DEVICE();
  GdrCase c;
  c.batch = 6;
  c.seq_len = 3;  // draft tokens per sequence
  c.heads = 2;
  c.value_heads = 4;
  c.slots = {3, -1, 0, 5, -1, 1};
  c.pool_rows = 7;
  c.seed = 20;
  const GdrData d = make_gdr_data(c);
  const int64_t N = c.batch, T = c.seq_len, S = c.state_size();

  DeviceBuffer q(d.q), k(d.k), v(d.v), g(d.g), beta(d.beta), slots(c.slots), pool(d.pool);
  DeviceBuffer o(d.v.size() * sizeof(float));
  DeviceBuffer token_states(static_cast<size_t>(N * T * S) * sizeof(float));
  o.fill(kPoison);
  token_states.fill(kPoison);
  RecurrentDecodeParams p;
  p.num_seqs = N;
  p.tokens_per_seq = T;
  p.num_heads = c.heads;
  p.num_value_heads = c.value_heads;
  p.key_dim = c.key_dim;
  p.value_dim = c.value_dim;
  p.q = q.as<void>();
  p.k = k.as<void>();
  p.v = v.as<void>();
  p.g = g.as<float>();
  p.beta = beta.as<void>();
  p.o = o.as<void>();
  p.state = pool.as<float>();
  p.state_slots = slots.as<int32_t>();
  p.num_state_rows = c.pool_rows;
  p.token_states = token_states.as<float>();
  p.use_qk_l2norm = true;
  DC_EXPECT_OK(recurrent_decode(p, nullptr));
  const std::vector<float> o_out = o.download<float>();
  const std::vector<float> pool_out = pool.download<float>();
  const std::vector<float> ts = token_states.download<float>();

  // The oracle for the first m tokens of every sequence gives token state m - 1.
  for (int64_t m = 1; m <= T; ++m) {
    GdrCase cm = c;
    cm.seq_len = m;
    GdrData dm = d;
    auto prefix = [&](const std::vector<float>& x) {
      const int64_t per_token = static_cast<int64_t>(x.size()) / (N * T);
      std::vector<float> y;
      for (int64_t i = 0; i < N; ++i) {
        y.insert(y.end(), x.begin() + i * T * per_token, x.begin() + (i * T + m) * per_token);
      }
      return y;
    };
    dm.q = prefix(d.q), dm.k = prefix(d.k), dm.v = prefix(d.v), dm.g = prefix(d.g);
    dm.beta = prefix(d.beta);
    const reference::GatedDeltaRuleResult ref = gdr_reference(cm, dm);
    Error es, eo;
    for (int64_t i = 0; i < N; ++i) {
      const float* got = ts.data() + (i * T + m - 1) * S;
      if (c.slot(i) < 0) {
        const auto* bytes = reinterpret_cast<const uint8_t*>(got);
        EXPECT_TRUE(std::all_of(bytes, bytes + S * 4, [](uint8_t b) { return b == kPoison; }))
            << "token state of padding entry " << i;
        continue;
      }
      for (int64_t x = 0; x < S; ++x)
        es.add(ref.final_state[static_cast<size_t>(i * S + x)], got[x]);
      if (m == T) {
        // The pool row holds exactly the state after the last token.
        EXPECT_EQ(0, std::memcmp(got, pool_out.data() + c.slot(i) * S, static_cast<size_t>(S) * 4));
        const int64_t row = c.value_heads * c.value_dim;
        for (int64_t x = 0; x < T * row; ++x) {
          eo.add(ref.output[static_cast<size_t>(i * T * row + x)],
                 o_out[static_cast<size_t>(i * T * row + x)]);
        }
      }
    }
    ASSERT_GT(es.ref_norm(), 0.0);
    EXPECT_EQ(es.non_finite, 0);
    EXPECT_LE(es.rel_rms(), kStateCeiling) << "after " << m << " tokens: " << describe("state", es);
    if (m == T) {
      EXPECT_EQ(eo.non_finite, 0);
      EXPECT_LE(eo.rel_rms(), output_ceiling(DType::kF32)) << describe("o", eo);
    }
  }
  for (int64_t r : {2, 4, 6}) {  // rows no sequence addresses
    EXPECT_EQ(
        0, std::memcmp(pool_out.data() + r * S, d.pool.data() + r * S, static_cast<size_t>(S) * 4))
        << "pool row " << r;
  }
}

// Host-side checks need no device: they must run (and can fail) everywhere.
TEST(CudaGatedDeltaRuleChecks, ReportsWhatItCannotRun) {
  GatedDeltaRuleParams p;
  int dummy = 0;
  p.seq_len = 4;
  p.key_dim = 256;
  p.value_dim = 64;
  p.q = p.k = p.v = p.beta = &dummy;
  p.g = reinterpret_cast<const float*>(&dummy);
  p.o = &dummy;
  EXPECT_EQ(gated_delta_rule_can_implement(p).code(), StatusCode::kUnsupported);
  p.key_dim = 128;
  EXPECT_TRUE(gated_delta_rule_can_implement(p).ok());
  p.chunk_size = 128;
  EXPECT_EQ(gated_delta_rule_can_implement(p).code(), StatusCode::kUnsupported);
  p.chunk_size = 64;
  p.num_heads = 3;
  p.num_value_heads = 4;
  EXPECT_EQ(gated_delta_rule_can_implement(p).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace deltacheck::kernels::cuda
