// The CPU kernels of the linear-attention layer (causal conv1d, gates, gated RMS norm, recurrent
// decode, the composed layer) against the FP64 reference, on packed inputs with zero-length
// sequences, state pools addressed through slots with padding entries, and fp32 / bf16 / fp16
// activations. Outputs start as NaN, so anything a kernel fails to write (or writes for a padding
// entry) shows; pool rows nobody addresses must stay bit-identical.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/half.h"
#include "kernels/cpu/causal_conv1d.h"
#include "kernels/cpu/gated_rms_norm.h"
#include "kernels/cpu/gates.h"
#include "kernels/cpu/linear_attention_layer.h"
#include "kernels/cpu/recurrent_decode.h"
#include "reference/causal_conv1d.h"
#include "reference/gated_delta_rule.h"
#include "reference/gated_rms_norm.h"
#include "reference/gates.h"
#include "reference/linear_attention_layer.h"

namespace deltacheck::kernels::cpu {
namespace {

namespace ref = deltacheck::reference;

// ---------------------------------------------------------------------------------------------
// test data

uint64_t mix(uint64_t z) {  // splitmix64 finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The value `x` takes once stored in `t`.
double round_to(double x, DType t) {
  const float f = static_cast<float>(x);
  switch (t) {
    case DType::kF32:
      return f;
    case DType::kBF16:
      return bf16_to_float(float_to_bf16(f));
    case DType::kF16:
      return fp16_to_float(float_to_fp16(f));
    default:
      break;
  }
  return f;
}

// Unit roundoff of a storage type: the relative error one rounding to it may add.
double roundoff(DType t) {
  switch (t) {
    case DType::kF32:
      return 0x1.0p-24;
    case DType::kBF16:
      return 0x1.0p-8;
    case DType::kF16:
      return 0x1.0p-11;
    default:
      break;
  }
  return 0.0;
}

// Half the smallest positive value of a storage type: what a value may lose by rounding to 0.
double underflow(DType t) {
  switch (t) {
    case DType::kF32:
      return 0x1.0p-150;
    case DType::kBF16:
      return 0x1.0p-134;
    case DType::kF16:
      return 0x1.0p-25;
    default:
      break;
  }
  return 0.0;
}

// Deterministic data addressed by (tensor, sequence, position, element), so that every layout of
// the same tokens (one packed prefill, a prefix then decode steps) sees the same values. Values
// are rounded to the type the kernel will store them in, so the reference sees exactly those.
class TokenSource {
 public:
  explicit TokenSource(uint64_t seed) : seed_(seed) {}
  double value(uint64_t tensor, int64_t seq, int64_t pos, int64_t elem, double lo,
               double hi) const {
    uint64_t h = mix(seed_ ^ (tensor * 0x9e3779b97f4a7c15ull));
    h = mix(h ^ static_cast<uint64_t>(seq));
    h = mix(h ^ static_cast<uint64_t>(pos));
    h = mix(h ^ static_cast<uint64_t>(elem));
    return lo + (hi - lo) * static_cast<double>(h >> 11) * 0x1.0p-53;
  }

 private:
  uint64_t seed_;
};

struct TokenRef {
  int64_t seq, pos;
};

// [tokens.size(), width] values of one tensor, rounded to `t`.
std::vector<double> gather(const TokenSource& src, uint64_t tensor,
                           const std::vector<TokenRef>& tokens, int64_t width, double lo, double hi,
                           DType t) {
  std::vector<double> x;
  x.reserve(tokens.size() * static_cast<size_t>(width));
  for (const TokenRef& r : tokens)
    for (int64_t e = 0; e < width; ++e)
      x.push_back(round_to(src.value(tensor, r.seq, r.pos, e, lo, hi), t));
  return x;
}

// Tokens [begin_i, end_i) of every sequence i, packed in sequence order, and their cu_seqlens.
struct Packing {
  std::vector<TokenRef> tokens;
  std::vector<int64_t> cu{0};
};
Packing pack(const std::vector<int64_t>& begin, const std::vector<int64_t>& end) {
  Packing p;
  for (size_t i = 0; i < begin.size(); ++i) {
    for (int64_t t = begin[i]; t < end[i]; ++t) p.tokens.push_back({static_cast<int64_t>(i), t});
    p.cu.push_back(static_cast<int64_t>(p.tokens.size()));
  }
  return p;
}

// Parameters that are not per token (weights), fp32 as the kernels take them.
std::vector<double> weights(uint64_t seed, int64_t n, double lo, double hi) {
  std::vector<double> w(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    w[i] = static_cast<float>(lo + (hi - lo) * static_cast<double>(mix(seed * 7919 + i) >> 11) *
                                       0x1.0p-53);
  return w;
}

std::vector<float> to_float(const std::vector<double>& x) { return {x.begin(), x.end()}; }

// An activation buffer in a given storage type.
class Buffer {
 public:
  // Every element NaN, so unwritten elements show.
  static Buffer poisoned(int64_t n, DType t) {
    Buffer b(t);
    if (t == DType::kF32)
      b.f32_.assign(static_cast<size_t>(n), std::numeric_limits<float>::quiet_NaN());
    else
      b.f16_.assign(static_cast<size_t>(n), t == DType::kBF16 ? 0x7fc0 : 0x7e00);
    return b;
  }
  static Buffer of(const std::vector<double>& x, DType t) {
    Buffer b = poisoned(static_cast<int64_t>(x.size()), t);
    for (size_t i = 0; i < x.size(); ++i)
      store_from_float(b.data(), t, i, static_cast<float>(x[i]));
    return b;
  }
  void* data() { return f32_.empty() ? static_cast<void*>(f16_.data()) : f32_.data(); }
  const void* data() const {
    return f32_.empty() ? static_cast<const void*>(f16_.data()) : f32_.data();
  }
  double at(int64_t i) const { return load_as_float(data(), type_, i); }
  int64_t size() const { return static_cast<int64_t>(f32_.empty() ? f16_.size() : f32_.size()); }

 private:
  explicit Buffer(DType t) : type_(t) {}
  DType type_;
  std::vector<float> f32_;
  std::vector<uint16_t> f16_;
};

// ---------------------------------------------------------------------------------------------
// comparison

// Every got[i] within atol + rtol * |want[i]| of want[i] (NaN fails).
::testing::AssertionResult close(const char* what, const std::vector<double>& got,
                                 const std::vector<double>& want, double atol, double rtol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << what << ": size " << got.size() << " != " << want.size();
  double worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::abs(got[i] - want[i]);
    const double err = diff == 0.0 ? 0.0 : diff / (atol + rtol * std::abs(want[i]));
    if (!(err <= worst)) worst = err, at = i;  // NaN sticks
    if (std::isnan(err)) break;
  }
  if (worst <= 1.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": element " << at << " is " << got[at] << ", want " << want[at] << " (atol "
         << atol << ", rtol " << rtol << ")";
}

double max_abs(const std::vector<double>& x) {
  double m = 0.0;
  for (double v : x) m = std::max(m, std::abs(v));
  return m;
}

std::vector<double> read(const Buffer& b, int64_t begin, int64_t end) {
  std::vector<double> x;
  for (int64_t i = begin; i < end; ++i) x.push_back(b.at(i));
  return x;
}

std::vector<double> read(const std::vector<float>& b, int64_t begin, int64_t end) {
  return {b.begin() + begin, b.begin() + end};
}

std::vector<double> slice(const std::vector<double>& x, int64_t begin, int64_t end) {
  return {x.begin() + begin, x.begin() + end};
}

bool all_nan(const Buffer& b, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i)
    if (!std::isnan(b.at(i))) return false;
  return true;
}

// A pool of fp32 state rows filled with recognizable garbage, and the reference's view of it.
struct Pool {
  int64_t rows, row_size;
  std::vector<float> data;
  Pool(int64_t rows_, int64_t row_size_, uint64_t seed) : rows(rows_), row_size(row_size_) {
    data = to_float(weights(seed, rows * row_size, -1.0, 1.0));
  }
  // Rows of `slots` as [N, row_size] doubles; padding entries get zeros.
  std::vector<double> gather(const std::vector<int32_t>& slots) const {
    std::vector<double> x(slots.size() * static_cast<size_t>(row_size), 0.0);
    for (size_t i = 0; i < slots.size(); ++i)
      if (slots[i] >= 0)
        for (int64_t e = 0; e < row_size; ++e) x[i * row_size + e] = data[slots[i] * row_size + e];
    return x;
  }
  bool row_equal(const Pool& other, int64_t row) const {
    return std::memcmp(&data[row * row_size], &other.data[row * row_size],
                       static_cast<size_t>(row_size) * sizeof(float)) == 0;
  }
};

// Rows of the pool that no slot addresses must be bit-identical to before.
void expect_untouched_rows(const Pool& before, const Pool& after,
                           const std::vector<int32_t>& slots) {
  for (int64_t r = 0; r < before.rows; ++r)
    if (std::find(slots.begin(), slots.end(), r) == slots.end()) {
      EXPECT_TRUE(before.row_equal(after, r))
          << "pool row " << r << " was not addressed but changed";
    }
}

std::string dtype_name(const ::testing::TestParamInfo<DType>& i) { return dtype_name(i.param); }

const auto kAllTypes = ::testing::Values(DType::kF32, DType::kBF16, DType::kF16);

// ---------------------------------------------------------------------------------------------
// causal conv1d

enum Tensor : uint64_t { kQkv, kZ, kA, kB, kQ, kK, kV, kG, kBeta };

struct ConvCase {
  DType dtype;
  int64_t width;
};

// One conv setup (weights, bias, a conv-state pool with slots) shared by the kernel and the
// reference runs of a test.
struct PooledConv {
  DType dt;
  int64_t D, W;
  std::vector<int32_t> slots;
  std::vector<double> weight = weights(1, D*W, -1.0, 1.0), bias = weights(2, D, -0.5, 0.5);
  std::vector<float> weight_f = to_float(weight), bias_f = to_float(bias);
  Pool before{static_cast<int64_t>(slots.size()) + 2, D*(W - 1), 3};  // two rows nobody uses
  Pool pool = before;

  int64_t state_size() const { return D * (W - 1); }

  // The reference over packed x from the pool's rows as they were before any kernel ran.
  ref::CausalConv1dResult reference(const std::vector<double>& x, const std::vector<int64_t>& cu,
                                    const std::vector<uint8_t>& has) const {
    const std::vector<double> init = before.gather(slots);
    ref::CausalConv1dArgs a;
    a.seq_len = cu.back();
    a.channels = D;
    a.width = W;
    a.x = x.data();
    a.weight = weight.data();
    a.bias = bias.data();
    a.cu_seqlens = cu;
    a.initial_state = init.data();
    a.has_initial_state.assign(has.begin(), has.end());
    return ref::causal_conv1d(a);
  }

  // The kernel's packed prefill, in place on the pool.
  Status prefill(const Buffer& x, Buffer& out, const std::vector<int64_t>& cu,
                 const std::vector<uint8_t>& has) {
    CausalConv1dParams p;
    p.seq_len = cu.back();
    p.channels = D;
    p.width = W;
    p.dtype = dt;
    p.x = x.data();
    p.out = out.data();
    p.weight = weight_f.data();
    p.bias = bias_f.data();
    p.cu_seqlens = cu.data();
    p.num_seqs = static_cast<int64_t>(cu.size()) - 1;
    p.initial_state = p.final_state = pool.data.data();
    p.state_slots = slots.data();
    p.num_state_rows = pool.rows;
    p.has_initial_state = has.empty() ? nullptr : has.data();
    p.num_threads = 2;
    return causal_conv1d(p);
  }

  // The kernel's decode step, in place on the pool.
  Status update(const Buffer& x, Buffer& out) {
    CausalConv1dUpdateParams u;
    u.num_seqs = static_cast<int64_t>(slots.size());
    u.channels = D;
    u.width = W;
    u.dtype = dt;
    u.x = x.data();
    u.out = out.data();
    u.weight = weight_f.data();
    u.bias = bias_f.data();
    u.state = pool.data.data();
    u.state_slots = slots.data();
    u.num_state_rows = pool.rows;
    u.num_threads = 2;
    return causal_conv1d_update(u);
  }

  // Each addressed pool row holds the reference's final state (exactly: states are copies of
  // inputs); rows nobody addresses are untouched.
  void expect_final_states(const ref::CausalConv1dResult& want) const {
    const int64_t S = state_size();
    for (size_t n = 0; n < slots.size(); ++n) {
      if (slots[n] < 0) continue;
      EXPECT_TRUE(close("conv state", read(pool.data, slots[n] * S, (slots[n] + 1) * S),
                        slice(want.final_state, n * S, (n + 1) * S), 0.0, 0.0))
          << "sequence " << n;
    }
    expect_untouched_rows(before, pool, slots);
  }
};

class CausalConv1dKernel : public ::testing::TestWithParam<ConvCase> {};

// Packed prefill, in place on a conv-state pool: zero-length sequences at the start, middle and
// end, lengths across the 32-token tiles, D across the 256-channel tiles, per-sequence
// has_initial_state flags, one padding entry.
TEST_P(CausalConv1dKernel, PackedPrefillMatchesReference) {
  PooledConv c{GetParam().dtype, 300, GetParam().width, {3, 0, 9, 5, 6, -1, 1, 7}};
  const std::vector<int64_t> lens = {0, 1, 2, 70, 0, 33, 5, 0};
  const std::vector<uint8_t> has = {1, 0, 1, 1, 1, 1, 0, 1};
  const Packing pk = pack(std::vector<int64_t>(lens.size(), 0), lens);
  const int64_t D = c.D, T = pk.cu.back();
  const std::vector<double> x = gather(TokenSource(100 + c.W), kQkv, pk.tokens, D, -2.0, 2.0, c.dt);
  const ref::CausalConv1dResult want = c.reference(x, pk.cu, has);
  ASSERT_GT(max_abs(want.output), 0.1);

  Buffer out = Buffer::poisoned(T * D, c.dt);
  ASSERT_TRUE(c.prefill(Buffer::of(x, c.dt), out, pk.cu, has).ok());
  for (size_t n = 0; n < lens.size(); ++n) {
    const int64_t b = pk.cu[n] * D, e = pk.cu[n + 1] * D;
    if (c.slots[n] < 0) {
      EXPECT_TRUE(all_nan(out, b, e)) << "padding entry " << n << " wrote output";
      continue;
    }
    EXPECT_TRUE(close("output", read(out, b, e), slice(want.output, b, e), 1e-5, roundoff(c.dt)))
        << "sequence " << n;
  }
  c.expect_final_states(want);
}

// The batched [B, T, D] layout, no states in, final states to a separate buffer, no slots.
TEST_P(CausalConv1dKernel, BatchedMatchesReference) {
  const DType dt = GetParam().dtype;
  const int64_t W = GetParam().width, D = 40, B = 3, T = 37, S = W - 1;
  const TokenSource src(200 + W);
  std::vector<TokenRef> toks;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) toks.push_back({b, t});
  const std::vector<double> x = gather(src, kQkv, toks, D, -2.0, 2.0, dt);
  const std::vector<double> w = weights(4, D * W, -1.0, 1.0);
  const std::vector<float> wf = to_float(w);
  ref::CausalConv1dArgs ra;
  ra.batch = B;
  ra.seq_len = T;
  ra.channels = D;
  ra.width = W;
  ra.x = x.data();
  ra.weight = w.data();
  ra.silu = false;
  const ref::CausalConv1dResult want = ref::causal_conv1d(ra);

  const Buffer xb = Buffer::of(x, dt);
  Buffer out = Buffer::poisoned(B * T * D, dt);
  std::vector<float> final_state(static_cast<size_t>(B * D * S), std::nanf(""));
  CausalConv1dParams p;
  p.batch = B;
  p.seq_len = T;
  p.channels = D;
  p.width = W;
  p.dtype = dt;
  p.x = xb.data();
  p.out = out.data();
  p.weight = wf.data();
  p.silu = false;
  p.final_state = final_state.data();
  ASSERT_TRUE(causal_conv1d(p).ok());
  EXPECT_TRUE(close("output", read(out, 0, B * T * D), want.output, 1e-5, roundoff(dt)));
  EXPECT_TRUE(close("conv state", read(final_state, 0, B * D * S), want.final_state, 0.0, 0.0));
}

// Prefill of a prefix, then decode steps through causal_conv1d_update in place on the pool ==
// one reference prefill of the concatenation.
TEST_P(CausalConv1dKernel, DecodeStepsEqualPrefillOfConcatenation) {
  PooledConv c{GetParam().dtype, 270, GetParam().width, {2, -1, 0, 4}};
  const std::vector<int64_t> prefix = {0, 1, 6, 3};
  const int64_t N = static_cast<int64_t>(prefix.size()), D = c.D, steps = 4;
  const TokenSource src(300 + c.W);
  std::vector<int64_t> full(N);
  for (int64_t n = 0; n < N; ++n) full[n] = prefix[n] + steps;
  const Packing all = pack(std::vector<int64_t>(N, 0), full);
  const ref::CausalConv1dResult want =
      c.reference(gather(src, kQkv, all.tokens, D, -2.0, 2.0, c.dt), all.cu, {});

  const Packing pre = pack(std::vector<int64_t>(N, 0), prefix);
  Buffer out_pre = Buffer::poisoned(pre.cu.back() * D, c.dt);
  ASSERT_TRUE(c.prefill(Buffer::of(gather(src, kQkv, pre.tokens, D, -2.0, 2.0, c.dt), c.dt),
                        out_pre, pre.cu, {})
                  .ok());
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<TokenRef> step;
    for (int64_t n = 0; n < N; ++n) step.push_back({n, prefix[n] + s});
    Buffer out = Buffer::poisoned(N * D, c.dt);
    ASSERT_TRUE(c.update(Buffer::of(gather(src, kQkv, step, D, -2.0, 2.0, c.dt), c.dt), out).ok());
    for (int64_t n = 0; n < N; ++n) {
      if (c.slots[n] < 0) {
        EXPECT_TRUE(all_nan(out, n * D, (n + 1) * D)) << "padding entry wrote output";
        continue;
      }
      const int64_t at = (all.cu[n] + prefix[n] + s) * D;
      EXPECT_TRUE(close("decode output", read(out, n * D, (n + 1) * D),
                        slice(want.output, at, at + D), 1e-5, roundoff(c.dt)))
          << "sequence " << n << " step " << s;
    }
  }
  c.expect_final_states(want);
}

INSTANTIATE_TEST_SUITE_P(TypesAndWidths, CausalConv1dKernel,
                         ::testing::Values(ConvCase{DType::kF32, 2}, ConvCase{DType::kF32, 3},
                                           ConvCase{DType::kF32, 4}, ConvCase{DType::kBF16, 4},
                                           ConvCase{DType::kF16, 3}),
                         [](const ::testing::TestParamInfo<ConvCase>& i) {
                           return std::string(dtype_name(i.param.dtype)) + "_W" +
                                  std::to_string(i.param.width);
                         });

TEST(CausalConv1dKernelArgs, RejectsWhatItCannotRun) {
  const float x[8] = {}, w[8] = {};
  float out[8] = {}, state[8] = {};
  CausalConv1dParams p;
  p.seq_len = 2;
  p.channels = 1;
  p.width = 5;
  p.x = x;
  p.out = out;
  p.weight = w;
  EXPECT_EQ(causal_conv1d(p).code(), StatusCode::kUnsupported);
  p.width = 4;
  const int64_t cu[3] = {0, 1, 2};
  const int32_t slots[2] = {1, 1};  // two sequences writing one row would race
  p.cu_seqlens = cu;
  p.num_seqs = 2;
  p.final_state = state;
  p.state_slots = slots;
  p.num_state_rows = 2;
  EXPECT_EQ(causal_conv1d(p).code(), StatusCode::kInvalidArgument);
  const int32_t out_of_range[2] = {0, 2};
  p.state_slots = out_of_range;
  EXPECT_EQ(causal_conv1d(p).code(), StatusCode::kInvalidArgument);
}

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

// ---------------------------------------------------------------------------------------------
// recurrent decode

// A gated-delta-rule problem whose tokens are addressed by (sequence, position).
struct RuleProblem {
  int64_t H = 2, HV = 4, K = 20, V = 12;  // GVA 2, dims off the vector width
  DType dt;
  TokenSource src{600};
  bool l2norm = true;
  double qk_range = 1.0;  // q, k in [-qk_range, qk_range]
  double scale = 0.0;     // <= 0: the default K^-0.5

  std::vector<double> q(const std::vector<TokenRef>& t) const {
    return gather(src, kQ, t, H * K, -qk_range, qk_range, dt);
  }
  std::vector<double> k(const std::vector<TokenRef>& t) const {
    return gather(src, kK, t, H * K, -qk_range, qk_range, dt);
  }
  std::vector<double> v(const std::vector<TokenRef>& t) const {
    return gather(src, kV, t, HV * V, -1.0, 1.0, dt);
  }
  std::vector<double> g(const std::vector<TokenRef>& t) const {
    return gather(src, kG, t, HV, -1.5, -0.01, DType::kF32);
  }
  std::vector<double> beta(const std::vector<TokenRef>& t) const {
    return gather(src, kBeta, t, HV, 0.05, 0.95, dt);
  }
  int64_t state_size() const { return HV * K * V; }

  // The reference over tokens [0, end_i) of every sequence i, from the given initial states.
  ref::GatedDeltaRuleResult reference(const std::vector<int64_t>& end,
                                      const std::vector<double>* initial) const {
    const Packing pk = pack(std::vector<int64_t>(end.size(), 0), end);
    const std::vector<double> qv = q(pk.tokens), kv = k(pk.tokens), vv = v(pk.tokens),
                              gv = g(pk.tokens), bv = beta(pk.tokens);
    ref::GatedDeltaRuleArgs a;
    a.seq_len = pk.cu.back();
    a.num_heads = H;
    a.num_value_heads = HV;
    a.key_dim = K;
    a.value_dim = V;
    // Non-null even when there are no tokens at all.
    const double none = 0.0;
    a.q = qv.empty() ? &none : qv.data();
    a.k = kv.empty() ? &none : kv.data();
    a.v = vv.empty() ? &none : vv.data();
    a.g = gv.empty() ? &none : gv.data();
    a.beta = bv.empty() ? &none : bv.data();
    a.cu_seqlens = pk.cu;
    a.initial_state = initial ? initial->data() : nullptr;
    a.use_qk_l2norm = l2norm;
    if (scale > 0.0) a.scale = scale;
    return ref::gated_delta_rule(a);
  }
};

struct DecodeBuffers {
  Buffer q, k, v, beta, o;
  std::vector<float> g;
  DecodeBuffers(const RuleProblem& pr, const std::vector<TokenRef>& toks)
      : q(Buffer::of(pr.q(toks), pr.dt)),
        k(Buffer::of(pr.k(toks), pr.dt)),
        v(Buffer::of(pr.v(toks), pr.dt)),
        beta(Buffer::of(pr.beta(toks), pr.dt)),
        o(Buffer::poisoned(static_cast<int64_t>(toks.size()) * pr.HV * pr.V, pr.dt)),
        g(to_float(pr.g(toks))) {}
  RecurrentDecodeParams params(const RuleProblem& pr, int64_t n, int64_t tokens) {
    RecurrentDecodeParams p;
    p.num_seqs = n;
    p.tokens_per_seq = tokens;
    p.num_heads = pr.H;
    p.num_value_heads = pr.HV;
    p.key_dim = pr.K;
    p.value_dim = pr.V;
    p.dtype = pr.dt;
    p.q = q.data();
    p.k = k.data();
    p.v = v.data();
    p.g = g.data();
    p.beta = beta.data();
    p.o = o.data();
    p.use_qk_l2norm = pr.l2norm;
    p.scale = static_cast<float>(pr.scale);
    p.num_threads = 2;
    return p;
  }
};

// Output tolerance of the fp32 recurrence plus one rounding of the output to the dtype.
double decode_rtol(DType dt) { return 1e-4 + roundoff(dt); }

class RecurrentDecodeKernel : public ::testing::TestWithParam<DType> {};

// The pool holds the reference state after each sequence's prefix; decode steps of one token
// each, in place, then match the reference prefill of prefix + steps.
TEST_P(RecurrentDecodeKernel, StepsEqualPrefillOfConcatenation) {
  RuleProblem pr;
  pr.dt = GetParam();
  const std::vector<int64_t> prefix = {0, 3, 17, 1, 9};
  const std::vector<int32_t> slots = {4, -1, 0, 6, 2};
  const int64_t N = static_cast<int64_t>(prefix.size()), steps = 4, SS = pr.state_size();
  Pool before(8, SS, 11);
  const ref::GatedDeltaRuleResult pre = pr.reference(prefix, nullptr);
  for (int64_t n = 0; n < N; ++n)
    if (slots[n] >= 0)
      for (int64_t e = 0; e < SS; ++e)
        before.data[slots[n] * SS + e] = static_cast<float>(pre.final_state[n * SS + e]);
  Pool pool = before;

  std::vector<int64_t> full(N);
  for (int64_t n = 0; n < N; ++n) full[n] = prefix[n] + steps;
  const ref::GatedDeltaRuleResult want = pr.reference(full, nullptr);
  const std::vector<int64_t> cu = pack(std::vector<int64_t>(N, 0), full).cu;
  const double scale = std::max(1.0, max_abs(want.output));
  const int64_t row = pr.HV * pr.V;

  for (int64_t s = 0; s < steps; ++s) {
    std::vector<TokenRef> step;
    for (int64_t n = 0; n < N; ++n) step.push_back({n, prefix[n] + s});
    DecodeBuffers b(pr, step);
    RecurrentDecodeParams p = b.params(pr, N, 1);
    p.state = pool.data.data();
    p.state_slots = slots.data();
    p.num_state_rows = pool.rows;
    ASSERT_TRUE(recurrent_decode(p).ok());
    for (int64_t n = 0; n < N; ++n) {
      if (slots[n] < 0) {
        EXPECT_TRUE(all_nan(b.o, n * row, (n + 1) * row)) << "padding entry wrote output";
        continue;
      }
      const int64_t at = (cu[n] + prefix[n] + s) * row;
      EXPECT_TRUE(close("o", read(b.o, n * row, (n + 1) * row), slice(want.output, at, at + row),
                        1e-5 * scale, decode_rtol(pr.dt)))
          << "sequence " << n << " step " << s;
    }
  }
  for (int64_t n = 0; n < N; ++n)
    if (slots[n] >= 0) {
      EXPECT_TRUE(close("state", read(pool.data, slots[n] * SS, (slots[n] + 1) * SS),
                        slice(want.final_state, n * SS, (n + 1) * SS), 1e-5, 1e-4))
          << "sequence " << n;
    }
  expect_untouched_rows(before, pool, slots);
}

// Multi-token (speculative) decode: the state after every draft token comes out, and resuming
// from an accepted one continues the sequence as if the rejected tokens had never been seen.
TEST_P(RecurrentDecodeKernel, MultiTokenWritesStatePerToken) {
  RuleProblem pr;
  pr.dt = GetParam();
  pr.l2norm = false;  // q and k as given, kept small so that beta |k|^2 < 2 (stable)
  pr.qk_range = 0.5;
  pr.scale = 0.3;
  pr.K = 8;
  const std::vector<int64_t> prefix = {5, 0, 2};
  const std::vector<int32_t> slots = {1, 3, -1};
  const int64_t N = static_cast<int64_t>(prefix.size()), drafts = 3, SS = pr.state_size();
  const int64_t row = pr.HV * pr.V;
  Pool before(5, SS, 12);
  const ref::GatedDeltaRuleResult pre = pr.reference(prefix, nullptr);
  for (int64_t n = 0; n < N; ++n)
    if (slots[n] >= 0)
      for (int64_t e = 0; e < SS; ++e)
        before.data[slots[n] * SS + e] = static_cast<float>(pre.final_state[n * SS + e]);
  Pool pool = before;

  std::vector<TokenRef> toks;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t t = 0; t < drafts; ++t) toks.push_back({n, prefix[n] + t});
  DecodeBuffers b(pr, toks);
  std::vector<float> token_states(static_cast<size_t>(N * drafts * SS), std::nanf(""));
  RecurrentDecodeParams p = b.params(pr, N, drafts);
  p.state = pool.data.data();
  p.state_slots = slots.data();
  p.num_state_rows = pool.rows;
  p.token_states = token_states.data();
  ASSERT_TRUE(recurrent_decode(p).ok());

  for (int64_t t = 0; t < drafts; ++t) {
    std::vector<int64_t> end(N);
    for (int64_t n = 0; n < N; ++n) end[n] = prefix[n] + t + 1;
    const ref::GatedDeltaRuleResult want = pr.reference(end, nullptr);
    const std::vector<int64_t> cu = pack(std::vector<int64_t>(N, 0), end).cu;
    ASSERT_GT(max_abs(want.final_state), 0.01);
    for (int64_t n = 0; n < N; ++n) {
      const int64_t at = (n * drafts + t) * SS;
      if (slots[n] < 0) {
        for (int64_t e = 0; e < SS; ++e) ASSERT_TRUE(std::isnan(token_states[at + e]));
        EXPECT_TRUE(all_nan(b.o, (n * drafts + t) * row, (n * drafts + t + 1) * row));
        continue;
      }
      EXPECT_TRUE(close("token state", read(token_states, at, at + SS),
                        slice(want.final_state, n * SS, (n + 1) * SS), 1e-5, 1e-4))
          << "sequence " << n << " token " << t;
      const int64_t o_at = (cu[n + 1] - 1) * row;
      EXPECT_TRUE(close("o", read(b.o, (n * drafts + t) * row, (n * drafts + t + 1) * row),
                        slice(want.output, o_at, o_at + row), 1e-5, decode_rtol(pr.dt)))
          << "sequence " << n << " token " << t;
    }
  }
  // The pool holds the state after the last draft token.
  for (int64_t n = 0; n < N; ++n)
    if (slots[n] >= 0) {
      EXPECT_EQ(
          std::memcmp(&pool.data[slots[n] * SS], &token_states[(n * drafts + drafts - 1) * SS],
                      static_cast<size_t>(SS) * sizeof(float)),
          0)
          << "sequence " << n;
    }
  expect_untouched_rows(before, pool, slots);

  // Sequence 0 accepts 2 of its 3 drafts: resume from token_states[0, 1] with the next token.
  const int64_t accepted = 2;
  std::copy_n(&token_states[(0 * drafts + accepted - 1) * SS], SS, &pool.data[slots[0] * SS]);
  const TokenRef next{0, 1000};  // a token the sequence has not seen, placed after the accepted
  DecodeBuffers nb(pr, {next});
  RecurrentDecodeParams np = nb.params(pr, 1, 1);
  np.state = pool.data.data();
  np.state_slots = &slots[0];
  np.num_state_rows = pool.rows;
  ASSERT_TRUE(recurrent_decode(np).ok());
  // Reference: prefix + accepted drafts, then `next`; built as one sequence of explicit tokens.
  std::vector<TokenRef> seq;
  for (int64_t t = 0; t < prefix[0] + accepted; ++t) seq.push_back({0, t});
  seq.push_back(next);
  const std::vector<double> qv = pr.q(seq), kv = pr.k(seq), vv = pr.v(seq), gv = pr.g(seq),
                            bv = pr.beta(seq);
  ref::GatedDeltaRuleArgs a;
  a.seq_len = static_cast<int64_t>(seq.size());
  a.num_heads = pr.H;
  a.num_value_heads = pr.HV;
  a.key_dim = pr.K;
  a.value_dim = pr.V;
  a.q = qv.data();
  a.k = kv.data();
  a.v = vv.data();
  a.g = gv.data();
  a.beta = bv.data();
  a.use_qk_l2norm = pr.l2norm;
  a.scale = pr.scale;
  const ref::GatedDeltaRuleResult resumed = ref::gated_delta_rule(a);
  EXPECT_TRUE(close("resumed o", read(nb.o, 0, row),
                    slice(resumed.output, (a.seq_len - 1) * row, a.seq_len * row), 1e-5,
                    decode_rtol(pr.dt)));
  EXPECT_TRUE(close("resumed state", read(pool.data, slots[0] * SS, (slots[0] + 1) * SS),
                    resumed.final_state, 1e-5, 1e-4));
}

INSTANTIATE_TEST_SUITE_P(Types, RecurrentDecodeKernel, kAllTypes, dtype_name);

TEST(RecurrentDecodeKernelArgs, RejectsSharedOrOutOfRangeSlots) {
  const float in[64] = {};
  float o[64], state[2 * 4] = {};
  RecurrentDecodeParams p;
  p.num_seqs = 2;
  p.key_dim = 2;
  p.value_dim = 2;
  p.q = p.k = p.v = p.beta = in;
  p.g = in;
  p.o = o;
  p.state = state;
  p.num_state_rows = 2;
  const int32_t shared[2] = {1, 1}, out_of_range[2] = {0, 2}, fine[2] = {1, -1};
  p.state_slots = shared;
  EXPECT_EQ(recurrent_decode(p).code(), StatusCode::kInvalidArgument);
  p.state_slots = out_of_range;
  EXPECT_EQ(recurrent_decode(p).code(), StatusCode::kInvalidArgument);
  p.state_slots = fine;
  EXPECT_TRUE(recurrent_decode(p).ok());
}

// ---------------------------------------------------------------------------------------------
// the layer

struct LayerProblem {
  int64_t H = 2, HV = 4, K = 16, V = 12, W = 4;
  int64_t D() const { return 2 * H * K + HV * V; }
  DType dt;
  TokenSource src{700};
  std::vector<double> conv_weight = weights(20, D() * W, -0.8, 0.8),
                      conv_bias = weights(21, D(), -0.2, 0.2), A_log = weights(22, HV, -1.5, 0.5),
                      dt_bias = weights(23, HV, -1.0, 1.0), norm_weight = weights(24, V, 0.5, 1.5);
  std::vector<float> conv_weight_f = to_float(conv_weight), conv_bias_f = to_float(conv_bias),
                     A_log_f = to_float(A_log), dt_bias_f = to_float(dt_bias),
                     norm_weight_f = to_float(norm_weight);

  struct Inputs {
    std::vector<double> qkv, z, a, b;
  };
  Inputs inputs(const std::vector<TokenRef>& t) const {
    return {gather(src, kQkv, t, D(), -2.0, 2.0, dt), gather(src, kZ, t, HV * V, -2.0, 2.0, dt),
            gather(src, kA, t, HV, -3.0, 3.0, dt), gather(src, kB, t, HV, -3.0, 3.0, dt)};
  }

  ref::LinearAttentionLayerResult reference(const Inputs& in, const std::vector<int64_t>& cu,
                                            const std::vector<double>& state,
                                            const std::vector<double>& conv_state) const {
    ref::LinearAttentionLayerArgs a;
    a.seq_len = cu.back();
    a.num_heads = H;
    a.num_value_heads = HV;
    a.key_dim = K;
    a.value_dim = V;
    a.conv_width = W;
    a.qkv = in.qkv.data();
    a.z = in.z.data();
    a.a = in.a.data();
    a.b = in.b.data();
    a.conv_weight = conv_weight.data();
    a.conv_bias = conv_bias.data();
    a.A_log = A_log.data();
    a.dt_bias = dt_bias.data();
    a.norm_weight = norm_weight.data();
    a.cu_seqlens = cu;
    a.initial_state = state.data();
    a.initial_conv_state = conv_state.data();
    return ref::linear_attention_layer(a);
  }

  // Runs the kernel in place on the two pools; returns the output buffer.
  Buffer run(const Inputs& in, const std::vector<int64_t>& cu, const std::vector<int32_t>& slots,
             Pool& states, Pool& conv_states, int64_t chunk_size, bool decode = false) const {
    Status st;
    Buffer out = call(in, cu, slots, states, conv_states, chunk_size, decode, st);
    EXPECT_TRUE(st.ok()) << st.message();
    return out;
  }

  Buffer call(const Inputs& in, const std::vector<int64_t>& cu, const std::vector<int32_t>& slots,
              Pool& states, Pool& conv_states, int64_t chunk_size, bool decode, Status& st) const {
    const int64_t T = cu.back();
    const Buffer qkv = Buffer::of(in.qkv, dt), z = Buffer::of(in.z, dt), a = Buffer::of(in.a, dt),
                 b = Buffer::of(in.b, dt);
    Buffer out = Buffer::poisoned(T * HV * V, dt);
    LinearAttentionLayerParams p;
    p.seq_len = T;
    p.num_heads = H;
    p.num_value_heads = HV;
    p.key_dim = K;
    p.value_dim = V;
    p.conv_width = W;
    p.dtype = dt;
    p.qkv = qkv.data();
    p.z = z.data();
    p.a = a.data();
    p.b = b.data();
    p.conv_weight = conv_weight_f.data();
    p.conv_bias = conv_bias_f.data();
    p.A_log = A_log_f.data();
    p.dt_bias = dt_bias_f.data();
    p.norm_weight = norm_weight_f.data();
    p.out = out.data();
    p.cu_seqlens = cu.data();
    p.num_seqs = static_cast<int64_t>(cu.size()) - 1;
    p.initial_state = p.final_state = states.data.data();
    p.initial_conv_state = p.final_conv_state = conv_states.data.data();
    p.state_slots = slots.data();
    p.num_state_rows = states.rows;
    p.chunk_size = chunk_size;
    p.decode = decode;
    p.num_threads = 2;
    st = linear_attention_layer(p);
    return out;
  }
};

// Tolerance of the composed layer, relative to the largest reference value of each tensor. Its
// intermediates are rounded to the activation dtype between steps (as the model does), so for
// bf16 / fp16 the error is several roundings deep (measured: about 6e-3 and 7e-4 of the largest
// value, 3e-7 for fp32); the bounds are still far below what a leak or a lost state gives.
double layer_rtol(DType dt) {
  switch (dt) {
    case DType::kF32:
      return 1e-5;
    case DType::kBF16:
      return 2.5e-2;
    case DType::kF16:
      return 3e-3;
    default:
      break;
  }
  return 0.0;
}

// Each real sequence's output and pool rows against the reference (the conv state exactly);
// padding entries' outputs unwritten.
void expect_pools_match(const LayerProblem& pr, const ref::LinearAttentionLayerResult& want,
                        const Buffer& out, const std::vector<int64_t>& cu,
                        const std::vector<int32_t>& slots, const Pool& states, const Pool& conv) {
  const int64_t SS = pr.HV * pr.K * pr.V, CS = pr.D() * (pr.W - 1), row = pr.HV * pr.V;
  const double rtol = layer_rtol(pr.dt);
  const double scale = max_abs(want.output), state_scale = max_abs(want.final_state);
  ASSERT_GT(scale, 0.05);
  ASSERT_GT(state_scale, 0.05);
  for (size_t n = 0; n < slots.size(); ++n) {
    const int64_t b = cu[n] * row, e = cu[n + 1] * row;
    if (slots[n] < 0) {
      EXPECT_TRUE(all_nan(out, b, e)) << "padding entry " << n << " wrote output";
      continue;
    }
    EXPECT_TRUE(close("output", read(out, b, e), slice(want.output, b, e), rtol * scale, rtol))
        << "sequence " << n;
    EXPECT_TRUE(close("state", read(states.data, slots[n] * SS, (slots[n] + 1) * SS),
                      slice(want.final_state, n * SS, (n + 1) * SS), rtol * state_scale, rtol))
        << "sequence " << n;
    EXPECT_TRUE(close("conv state", read(conv.data, slots[n] * CS, (slots[n] + 1) * CS),
                      slice(want.final_conv_state, n * CS, (n + 1) * CS), 0.0, 0.0))
        << "sequence " << n;
  }
}

// One call in place on the two pools with padding entries equals the reference (the conv state
// exactly); padding entries and rows nobody addresses are not touched.
void expect_pooled_call_matches(DType dt, const std::vector<int64_t>& lens,
                                const std::vector<int32_t>& slots, int64_t rows, int64_t chunk_size,
                                bool decode) {
  LayerProblem pr;
  pr.dt = dt;
  const int64_t N = static_cast<int64_t>(lens.size());
  const Packing pk = pack(std::vector<int64_t>(N, 0), lens);
  const LayerProblem::Inputs in = pr.inputs(pk.tokens);
  // Recurrent states of a realistic size: the rule's own fixed points are O(1).
  Pool states_before(rows, pr.HV * pr.K * pr.V, 30), conv_before(rows, pr.D() * (pr.W - 1), 31);
  for (float& x : states_before.data) x *= 0.5f;
  for (float& x : conv_before.data) x = static_cast<float>(round_to(2.0 * x, pr.dt));
  Pool states = states_before, conv = conv_before;
  const ref::LinearAttentionLayerResult want =
      pr.reference(in, pk.cu, states_before.gather(slots), conv_before.gather(slots));
  const Buffer out = pr.run(in, pk.cu, slots, states, conv, chunk_size, decode);
  expect_pools_match(pr, want, out, pk.cu, slots, states, conv);
  expect_untouched_rows(states_before, states, slots);
  expect_untouched_rows(conv_before, conv, slots);
}

class LinearAttentionLayerKernel : public ::testing::TestWithParam<DType> {};

TEST_P(LinearAttentionLayerKernel, PackedWithPoolsMatchesReference) {
  expect_pooled_call_matches(GetParam(), {0, 40, 1, 0, 17, 5, 23, 0}, {0, 5, 2, 7, -1, 3, 1, 6},
                             /*rows=*/9, /*chunk_size=*/16, /*decode=*/false);
}

// Chunked prefill through the pools: two calls split mid-chunk (and inside the conv window) ==
// the reference in one call.
TEST_P(LinearAttentionLayerKernel, TwoCallsThroughPoolsEqualOneCall) {
  LayerProblem pr;
  pr.dt = GetParam();
  const std::vector<int64_t> lens = {29, 2, 0}, split = {11, 1, 0};
  const std::vector<int32_t> slots = {2, 0, 1};
  const int64_t N = static_cast<int64_t>(lens.size());
  const int64_t SS = pr.HV * pr.K * pr.V, CS = pr.D() * (pr.W - 1), row = pr.HV * pr.V;
  Pool states(3, SS, 40), conv(3, CS, 41);
  std::fill(states.data.begin(), states.data.end(), 0.0f);
  std::fill(conv.data.begin(), conv.data.end(), 0.0f);

  const Packing whole = pack(std::vector<int64_t>(N, 0), lens);
  const ref::LinearAttentionLayerResult want =
      pr.reference(pr.inputs(whole.tokens), whole.cu, std::vector<double>(N * SS, 0.0),
                   std::vector<double>(N * CS, 0.0));
  const Packing first = pack(std::vector<int64_t>(N, 0), split), second = pack(split, lens);
  const Buffer out1 = pr.run(pr.inputs(first.tokens), first.cu, slots, states, conv, 8);
  const Buffer out2 = pr.run(pr.inputs(second.tokens), second.cu, slots, states, conv, 8);

  const double rtol = layer_rtol(pr.dt);
  const double scale = max_abs(want.output), state_scale = max_abs(want.final_state);
  ASSERT_GT(scale, 0.05);
  ASSERT_GT(state_scale, 0.05);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t at = whole.cu[n] * row;
    const int64_t n1 = (first.cu[n + 1] - first.cu[n]) * row;
    const int64_t n2 = (second.cu[n + 1] - second.cu[n]) * row;
    EXPECT_TRUE(close("first call", read(out1, first.cu[n] * row, first.cu[n] * row + n1),
                      slice(want.output, at, at + n1), rtol * scale, rtol))
        << "sequence " << n;
    EXPECT_TRUE(close("second call", read(out2, second.cu[n] * row, second.cu[n] * row + n2),
                      slice(want.output, at + n1, at + n1 + n2), rtol * scale, rtol))
        << "sequence " << n;
    EXPECT_TRUE(close("state", read(states.data, slots[n] * SS, (slots[n] + 1) * SS),
                      slice(want.final_state, n * SS, (n + 1) * SS), rtol * state_scale, rtol))
        << "sequence " << n;
    EXPECT_TRUE(close("conv state", read(conv.data, slots[n] * CS, (slots[n] + 1) * CS),
                      slice(want.final_conv_state, n * CS, (n + 1) * CS), 0.0, 0.0))
        << "sequence " << n;
  }
}

// A decode step (one token per sequence: causal_conv1d_update and recurrent_decode) in place on
// the pools, with padding entries.
TEST_P(LinearAttentionLayerKernel, DecodeStepThroughPoolsMatchesReference) {
  expect_pooled_call_matches(GetParam(), {1, 1, 1, 1, 1, 1}, {4, -1, 0, 6, -1, 2}, /*rows=*/7,
                             /*chunk_size=*/64, /*decode=*/true);
}

INSTANTIATE_TEST_SUITE_P(Types, LinearAttentionLayerKernel, kAllTypes, dtype_name);

// decode takes one token per sequence: a call with a longer (or empty) sequence is rejected
// before any state is touched.
TEST(LinearAttentionLayerKernelArgs, DecodeRejectsSequencesOfOtherLengths) {
  LayerProblem pr;
  pr.dt = DType::kF32;
  for (const std::vector<int64_t>& lens : std::vector<std::vector<int64_t>>{{1, 2}, {1, 0, 1}}) {
    const std::vector<int32_t> slots = {0, 1, 2};
    const Packing pk = pack(std::vector<int64_t>(lens.size(), 0), lens);
    const Pool states_before(3, pr.HV * pr.K * pr.V, 70), conv_before(3, pr.D() * (pr.W - 1), 71);
    Pool states = states_before, conv = conv_before;
    Status st;
    pr.call(pr.inputs(pk.tokens), pk.cu, slots, states, conv, 64, /*decode=*/true, st);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    for (int64_t r = 0; r < 3; ++r) {
      EXPECT_TRUE(states.row_equal(states_before, r));
      EXPECT_TRUE(conv.row_equal(conv_before, r));
    }
  }
}

// A call the layer rejects changes nothing, not even the conv states its first step would write.
TEST(LinearAttentionLayerKernelArgs, RejectedCallWritesNothing) {
  LayerProblem pr;
  pr.dt = DType::kF32;
  pr.HV = 3;  // HV % H != 0: only the rule step would notice
  const std::vector<int64_t> cu = {0, 4};
  const std::vector<int32_t> slots = {0};
  std::vector<TokenRef> toks;
  for (int64_t t = 0; t < 4; ++t) toks.push_back({0, t});
  const LayerProblem::Inputs in = pr.inputs(toks);
  const Pool states_before(1, pr.HV * pr.K * pr.V, 50), conv_before(1, pr.D() * (pr.W - 1), 51);
  Pool states = states_before, conv = conv_before;
  const Buffer qkv = Buffer::of(in.qkv, pr.dt), z = Buffer::of(in.z, pr.dt),
               a = Buffer::of(in.a, pr.dt), b = Buffer::of(in.b, pr.dt);
  Buffer out = Buffer::poisoned(4 * pr.HV * pr.V, pr.dt);
  LinearAttentionLayerParams p;
  p.seq_len = 4;
  p.num_heads = pr.H;
  p.num_value_heads = pr.HV;
  p.key_dim = pr.K;
  p.value_dim = pr.V;
  p.qkv = qkv.data();
  p.z = z.data();
  p.a = a.data();
  p.b = b.data();
  p.conv_weight = pr.conv_weight_f.data();
  p.A_log = pr.A_log_f.data();
  p.dt_bias = pr.dt_bias_f.data();
  p.norm_weight = pr.norm_weight_f.data();
  p.out = out.data();
  p.cu_seqlens = cu.data();
  p.num_seqs = 1;
  p.initial_state = p.final_state = states.data.data();
  p.initial_conv_state = p.final_conv_state = conv.data.data();
  p.state_slots = slots.data();
  EXPECT_EQ(linear_attention_layer(p).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(states.row_equal(states_before, 0));
  EXPECT_TRUE(conv.row_equal(conv_before, 0));
  EXPECT_TRUE(all_nan(out, 0, out.size()));
}

}  // namespace
}  // namespace deltacheck::kernels::cpu
