// Tests of the CUDA kernels (gated delta rule, causal conv1d, masks, segments) against the FP64
// reference. Every test that touches the device skips, with the reason, when there is none.
//
// Inputs are drawn in fp32, rounded to the kernel's dtype, and the reference sees exactly the
// rounded values, so the only differences left are the kernels' own arithmetic and output
// rounding. Outputs are poisoned (all bits set: NaN in fp32, bf16 and fp16) before each run, so an
// unwritten element fails, and elements the kernel must not touch are compared bit for bit.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/half.h"
#include "kernels/cuda/causal_conv1d.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/gated_delta_rule.h"
#include "kernels/cuda/mask.h"
#include "reference/causal_conv1d.h"
#include "reference/gated_delta_rule.h"
#include "reference/mask.h"

namespace deltacheck::kernels::cuda {
namespace {

#define DC_REQUIRE_DEVICE()                                                              \
  do {                                                                                   \
    const Status device_status = cuda_device_available();                                \
    if (!device_status.ok()) GTEST_SKIP() << "unsupported: " << device_status.message(); \
  } while (0)

#define DC_EXPECT_OK(expr)                                           \
  do {                                                               \
    const Status status_ = (expr);                                   \
    ASSERT_TRUE(status_.ok()) << #expr << ": " << status_.message(); \
  } while (0)

constexpr uint8_t kPoison = 0xff;

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(cuda_status(err, what).message());
}

// splitmix64: a fixed, tiny generator, so every run draws the same inputs.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi), from 24 random bits.
  float uniform(double lo, double hi) {
    return static_cast<float>(lo + (hi - lo) * static_cast<double>(next() >> 40) * 0x1.0p-24);
  }
  std::vector<float> uniform_vector(size_t n, double lo, double hi) {
    std::vector<float> x(n);
    for (float& e : x) e = uniform(lo, hi);
    return x;
  }

 private:
  uint64_t state_;
};

// Device memory owned by a test; every CUDA error throws, which fails the test with its message.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    check_cuda(cudaMalloc(&ptr_, bytes_ == 0 ? 1 : bytes_), "cudaMalloc");
  }
  template <typename T>
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size() * sizeof(T)) {
    check_cuda(cudaMemcpy(ptr_, host.data(), bytes_, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { (void)cudaFree(ptr_); }

  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  void fill(uint8_t byte) { check_cuda(cudaMemset(ptr_, byte, bytes_), "cudaMemset"); }
  template <typename T>
  std::vector<T> download() const {
    check_cuda(cudaDeviceSynchronize(), "kernel execution");
    std::vector<T> host(bytes_ / sizeof(T));
    check_cuda(cudaMemcpy(host.data(), ptr_, host.size() * sizeof(T), cudaMemcpyDeviceToHost),
               "cudaMemcpy D2H");
    return host;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// ---- values in a storage dtype ---------------------------------------------------------------

std::vector<uint8_t> encode(const std::vector<float>& x, DType t) {
  std::vector<uint8_t> bytes(x.size() * static_cast<size_t>(dtype_size(t)));
  for (size_t i = 0; i < x.size(); ++i)
    store_from_float(bytes.data(), t, static_cast<int64_t>(i), x[i]);
  return bytes;
}

std::vector<float> decode(const std::vector<uint8_t>& bytes, DType t) {
  std::vector<float> x(bytes.size() / static_cast<size_t>(dtype_size(t)));
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = load_as_float(bytes.data(), t, static_cast<int64_t>(i));
  return x;
}

std::vector<float> rounded(const std::vector<float>& x, DType t) { return decode(encode(x, t), t); }

std::vector<double> widen(const std::vector<float>& x) { return {x.begin(), x.end()}; }

std::string sci(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3e", x);
  return buf;
}

bool all_bytes(const std::vector<uint8_t>& bytes, size_t begin, size_t end, uint8_t value) {
  for (size_t i = begin; i < end; ++i) {
    if (bytes[i] != value) return false;
  }
  return true;
}

// Distance of a kernel result from the FP64 oracle over selected elements.
struct Error {
  double max_abs = 0.0;
  double ref_sq = 0.0;
  double diff_sq = 0.0;
  int64_t count = 0;
  int64_t non_finite = 0;
  double ref_norm() const { return std::sqrt(ref_sq); }
  double rel_rms() const { return ref_sq > 0.0 ? std::sqrt(diff_sq / ref_sq) : std::sqrt(diff_sq); }
  void add(double ref, double got) {
    ++count;
    if (!std::isfinite(got)) {
      ++non_finite;
      return;
    }
    const double d = got - ref;
    max_abs = std::max(max_abs, std::abs(d));
    diff_sq += d * d;
    ref_sq += ref * ref;
  }
};

std::string describe(const char* what, const Error& e) {
  return std::string(what) + ": rel_rms " + sci(e.rel_rms()) + ", max_abs " + sci(e.max_abs) +
         ", non-finite " + std::to_string(e.non_finite) + " of " + std::to_string(e.count);
}

// Relative RMS ceilings of one kernel output against the oracle, per dtype of o (docs/tolerance.md:
// about 5e-3 for bf16 / fp16; fp32 far tighter). States are fp32 whatever the input dtype.
double output_ceiling(DType t) {
  switch (t) {
    case DType::kF32:
      return 5e-6;
    case DType::kBF16:
      return 5e-3;
    case DType::kF16:
      return 1e-3;
    default:
      break;
  }
  return 0.0;
}
constexpr double kStateCeiling = 5e-6;

// The floor of "at most twice the same-precision recurrence's error": about fp32 rounding of the
// outputs themselves. Low enough that accumulating the gates in fp32 (G_i - G_j cancelling at
// |G| ~ 600) fails the strong-decay case, which it does at about 8x the recurrence's error.
double comparison_floor(DType t) { return t == DType::kF32 ? 3e-7 : 0.1 * output_ceiling(t); }

// ---- gated delta rule ------------------------------------------------------------------------

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

// ---- causal conv1d ---------------------------------------------------------------------------

struct ConvCase {
  std::vector<int64_t> lens;
  int64_t channels = 48, width = 4;
  DType dtype = DType::kF32;
  bool bias = true, silu = true;
  std::vector<int32_t> slots;
  std::vector<uint8_t> has_initial_state;  // empty: all
  int64_t pool_rows = 0;
  uint64_t seed = 1;
};

void check_conv_case(const ConvCase& c) {
  SplitMix64 rng(c.seed);
  const auto N = static_cast<int64_t>(c.lens.size());
  std::vector<int64_t> cu = {0};
  for (int64_t n : c.lens) cu.push_back(cu.back() + n);
  const int64_t T = cu.back(), D = c.channels, taps = c.width - 1;
  const int64_t rows = c.slots.empty() ? N : c.pool_rows;
  auto slot = [&](int64_t i) {
    return c.slots.empty() ? static_cast<int32_t>(i) : c.slots[static_cast<size_t>(i)];
  };
  const std::vector<float> x =
      rounded(rng.uniform_vector(static_cast<size_t>(T * D), -2.0, 2.0), c.dtype);
  const std::vector<float> weight = rng.uniform_vector(static_cast<size_t>(D * c.width), -0.7, 0.7);
  const std::vector<float> bias = rng.uniform_vector(static_cast<size_t>(D), -0.3, 0.3);
  const std::vector<float> pool =
      rng.uniform_vector(static_cast<size_t>(rows * D * taps), -2.0, 2.0);

  std::vector<double> initial(static_cast<size_t>(N * D * taps), 0.0);
  for (int64_t i = 0; i < N; ++i) {
    if (slot(i) >= 0)
      std::copy_n(pool.begin() + slot(i) * D * taps, D * taps, initial.begin() + i * D * taps);
  }
  const std::vector<double> xd = widen(x), wd = widen(weight), bd = widen(bias);
  reference::CausalConv1dArgs a;
  a.seq_len = T;
  a.channels = D;
  a.width = c.width;
  a.x = xd.data();
  a.weight = wd.data();
  a.bias = c.bias ? bd.data() : nullptr;
  a.silu = c.silu;
  a.cu_seqlens = cu;
  a.initial_state = initial.data();
  for (uint8_t h : c.has_initial_state) a.has_initial_state.push_back(h != 0);
  const reference::CausalConv1dResult ref = reference::causal_conv1d(a);

  DeviceBuffer dx(encode(x, c.dtype)), dw(weight), db(bias), dcu(cu), dslots(c.slots), dpool(pool),
      dhas(c.has_initial_state);
  DeviceBuffer dout(static_cast<size_t>(T * D) * static_cast<size_t>(dtype_size(c.dtype)));
  dout.fill(kPoison);
  CausalConv1dParams p;
  p.seq_len = T;
  p.channels = D;
  p.width = c.width;
  p.dtype = c.dtype;
  p.x = dx.as<void>();
  p.out = dout.as<void>();
  p.weight = dw.as<float>();
  p.bias = c.bias ? db.as<float>() : nullptr;
  p.silu = c.silu;
  p.cu_seqlens = dcu.as<int64_t>();
  p.num_seqs = N;
  p.initial_state = dpool.as<float>();
  p.final_state = dpool.as<float>();
  p.state_slots = c.slots.empty() ? nullptr : dslots.as<int32_t>();
  p.num_state_rows = rows;
  p.has_initial_state = c.has_initial_state.empty() ? nullptr : dhas.as<uint8_t>();
  DC_EXPECT_OK(causal_conv1d(p, nullptr));
  const std::vector<uint8_t> out_bytes = dout.download<uint8_t>();
  const std::vector<float> out = decode(out_bytes, c.dtype);
  const std::vector<float> pool_out = dpool.download<float>();

  Error e;
  std::vector<bool> written(static_cast<size_t>(rows), false);
  const auto esize = static_cast<size_t>(dtype_size(c.dtype));
  for (int64_t i = 0; i < N; ++i) {
    const int64_t b = cu[static_cast<size_t>(i)], end = cu[static_cast<size_t>(i + 1)];
    if (slot(i) < 0) {
      EXPECT_TRUE(all_bytes(out_bytes, static_cast<size_t>(b * D) * esize,
                            static_cast<size_t>(end * D) * esize, kPoison))
          << "output of padding entry " << i << " was written";
      continue;
    }
    for (int64_t t = b * D; t < end * D; ++t)
      e.add(ref.output[static_cast<size_t>(t)], out[static_cast<size_t>(t)]);
    written[static_cast<size_t>(slot(i))] = true;
    // The final state holds inputs: exact.
    for (int64_t s = 0; s < D * taps; ++s) {
      ASSERT_EQ(static_cast<float>(ref.final_state[static_cast<size_t>(i * D * taps + s)]),
                pool_out[static_cast<size_t>(slot(i) * D * taps + s)])
          << "final conv state of sequence " << i << ", element " << s;
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (written[static_cast<size_t>(r)]) continue;
    EXPECT_EQ(0, std::memcmp(pool_out.data() + r * D * taps, pool.data() + r * D * taps,
                             static_cast<size_t>(D * taps) * sizeof(float)))
        << "conv pool row " << r << " is addressed by no sequence but changed";
  }
  ASSERT_GT(e.ref_norm(), 0.0);
  EXPECT_EQ(e.non_finite, 0) << describe("out", e);
  EXPECT_LE(e.rel_rms(), c.dtype == DType::kF32 ? 1e-6 : output_ceiling(c.dtype))
      << describe("out", e);
}

TEST(CudaCausalConv1d, PackedWithStatesPoolAndPadding) {
  DC_REQUIRE_DEVICE();
  ConvCase c;
  c.lens = {0, 1, 2, 3, 7, 0, 20, 5};
  c.slots = {1, 5, 0, -1, 2, 3, 7, -1};
  c.has_initial_state = {1, 1, 0, 1, 1, 1, 0, 1};
  c.pool_rows = 9;
  c.seed = 31;
  check_conv_case(c);
}

TEST(CudaCausalConv1d, BFloat16WidthTwoNoBiasNoSilu) {
  DC_REQUIRE_DEVICE();
  ConvCase c;
  c.lens = {1, 40, 0, 3};
  c.width = 2;
  c.dtype = DType::kBF16;
  c.bias = false;
  c.silu = false;
  c.seed = 32;
  check_conv_case(c);
}

TEST(CudaCausalConv1d, UpdateInPlaceOnPool) {
  DC_REQUIRE_DEVICE();
  SplitMix64 rng(33);
  const int64_t N = 4, D = 40, W = 4, taps = W - 1, rows = 5;
  const std::vector<int32_t> slots = {2, -1, 0, 3};
  const std::vector<float> weight = rng.uniform_vector(static_cast<size_t>(D * W), -0.7, 0.7);
  const std::vector<float> bias = rng.uniform_vector(static_cast<size_t>(D), -0.3, 0.3);
  std::vector<float> pool = rng.uniform_vector(static_cast<size_t>(rows * D * taps), -2.0, 2.0);
  const std::vector<float> pool_before = pool;
  DeviceBuffer dw(weight), db(bias), dslots(slots), dpool(pool);
  const std::vector<double> wd = widen(weight), bd = widen(bias);
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> x = rng.uniform_vector(static_cast<size_t>(N * D), -2.0, 2.0);
    DeviceBuffer dx(x), dout(static_cast<size_t>(N * D) * sizeof(float));
    dout.fill(kPoison);
    CausalConv1dUpdateParams p;
    p.num_seqs = N;
    p.channels = D;
    p.width = W;
    p.x = dx.as<void>();
    p.out = dout.as<void>();
    p.weight = dw.as<float>();
    p.bias = db.as<float>();
    p.state = dpool.as<float>();
    p.state_slots = dslots.as<int32_t>();
    p.num_state_rows = rows;
    DC_EXPECT_OK(causal_conv1d_update(p, nullptr));
    const std::vector<float> out = dout.download<float>();
    const std::vector<float> pool_out = dpool.download<float>();

    std::vector<double> state(static_cast<size_t>(N * D * taps), 0.0);
    for (int64_t i = 0; i < N; ++i) {
      if (slots[static_cast<size_t>(i)] >= 0) {
        std::copy_n(pool.begin() + slots[static_cast<size_t>(i)] * D * taps, D * taps,
                    state.begin() + i * D * taps);
      }
    }
    const std::vector<double> xd = widen(x);
    reference::CausalConv1dUpdateArgs a;
    a.num_seqs = N;
    a.channels = D;
    a.width = W;
    a.x = xd.data();
    a.state = state.data();
    a.weight = wd.data();
    a.bias = bd.data();
    const reference::CausalConv1dResult ref = reference::causal_conv1d_update(a);
    Error e;
    for (int64_t i = 0; i < N; ++i) {
      const int32_t s = slots[static_cast<size_t>(i)];
      const auto* out_bytes = reinterpret_cast<const uint8_t*>(out.data() + i * D);
      if (s < 0) {
        EXPECT_TRUE(
            std::all_of(out_bytes, out_bytes + D * 4, [](uint8_t b) { return b == kPoison; }));
        continue;
      }
      for (int64_t d = 0; d < D; ++d)
        e.add(ref.output[static_cast<size_t>(i * D + d)], out[static_cast<size_t>(i * D + d)]);
      for (int64_t j = 0; j < D * taps; ++j) {
        ASSERT_EQ(static_cast<float>(ref.final_state[static_cast<size_t>(i * D * taps + j)]),
                  pool_out[static_cast<size_t>(s * D * taps + j)])
            << "step " << step << ", sequence " << i;
      }
    }
    ASSERT_GT(e.ref_norm(), 0.0);
    EXPECT_EQ(e.non_finite, 0);
    EXPECT_LE(e.rel_rms(), 1e-6) << "step " << step << ": " << describe("out", e);
    pool = pool_out;
  }
  for (int64_t r : {1, 4}) {
    EXPECT_EQ(0, std::memcmp(pool.data() + r * D * taps, pool_before.data() + r * D * taps,
                             static_cast<size_t>(D * taps) * sizeof(float)))
        << "conv pool row " << r;
  }
}

// ---- masks -----------------------------------------------------------------------------------

struct MaskCase {
  std::string name;
  reference::MaskSpec spec;
};

void PrintTo(const MaskCase& c, std::ostream* os) { *os << c.name; }

std::vector<int64_t> packed_positions(const std::vector<std::vector<int64_t>>& rows) {
  std::vector<int64_t> out;
  for (const auto& r : rows) out.insert(out.end(), r.begin(), r.end());
  return out;
}

// Positions that restart at 0 after each of `lens`.
std::vector<int64_t> restarts(const std::vector<int64_t>& lens) {
  std::vector<int64_t> p;
  for (int64_t n : lens) {
    for (int64_t i = 0; i < n; ++i) p.push_back(i);
  }
  return p;
}

std::vector<uint8_t> left_padded(int64_t batch, int64_t kv, const std::vector<int64_t>& zeros) {
  std::vector<uint8_t> m(static_cast<size_t>(batch * kv), 1);
  for (int64_t b = 0; b < batch; ++b) {
    std::fill_n(m.begin() + b * kv, zeros[static_cast<size_t>(b)], 0);
  }
  return m;
}

std::vector<MaskCase> mask_cases() {
  std::vector<MaskCase> cases;
  auto add = [&](const std::string& name, const reference::MaskSpec& s) {
    cases.push_back({name, s});
  };
  reference::MaskSpec s;
  s.batch = 2, s.q_len = 37, s.kv_length = 37;
  add("causal", s);

  s = {};
  s.batch = 2, s.q_len = 5, s.kv_length = 45, s.q_offset = {40}, s.sliding_window = 8;
  add("window_with_cache", s);

  s = {};
  s.batch = 2, s.q_len = 50, s.kv_length = 50, s.chunk_size = 16;
  s.padding_mask = left_padded(2, 50, {7, 0});
  add("chunked_left_padding", s);

  s = {};
  s.batch = 2, s.q_len = 6, s.kv_length = 64, s.q_offset = {10, 3}, s.static_cache = true;
  s.padding_mask = left_padded(2, 64, {2, 0});
  add("static_cache_per_row_offsets", s);

  s = {};
  s.batch = 2, s.q_len = 40, s.kv_length = 40;
  s.position_ids = packed_positions({restarts({13, 9, 18}), restarts({40})});
  s.position_ids[40 + 25] = s.position_ids[40 + 24];  // a repeated position starts a segment
  add("packed_segments", s);

  s = {};
  s.batch = 2, s.q_len = 12, s.kv_length = 40, s.q_offset = {5, 20};
  s.position_ids = packed_positions({restarts({4, 8}), restarts({12})});
  for (int64_t i = 0; i < 12; ++i) s.position_ids[static_cast<size_t>(12 + i)] += 20;
  add("segments_after_cache", s);

  s = {};
  s.batch = 1, s.q_len = 30, s.kv_length = 30, s.causal = false;
  s.padding_mask = left_padded(1, 30, {3});
  s.position_ids = restarts({10, 20});
  add("bidirectional_padding_segments", s);

  s = {};  // keys past the new tokens (unwritten static-cache slots) are in no segment
  s.batch = 1, s.q_len = 10, s.kv_length = 16, s.causal = false, s.static_cache = true;
  s.position_ids = restarts({4, 6});
  add("bidirectional_static_cache_segments", s);

  s = {};
  s.batch = 1, s.q_len = 20, s.kv_length = 20, s.position_id_rows = 3;
  s.position_ids = restarts({7, 13});  // row 0 decides packing
  for (int r = 1; r < 3; ++r) {
    for (int64_t i = 0; i < 20; ++i) s.position_ids.push_back((i * 7 + r) % 5);
  }
  add("multimodal_rows", s);

  s = {};
  s.batch = 2, s.q_len = 70, s.kv_length = 80, s.q_offset = {10}, s.sliding_window = 20;
  s.chunk_size = 32;
  s.padding_mask = left_padded(2, 80, {5, 12});
  s.position_ids = packed_positions({restarts({30, 40}), restarts({70})});
  add("everything", s);

  s = {};
  s.batch = 2, s.q_len = 1, s.kv_length = 3000, s.q_offset = {2999, 1500};
  s.padding_mask = left_padded(2, 3000, {0, 700});
  add("decode_long_static_cache", s);
  return cases;
}

class CudaMask : public ::testing::TestWithParam<MaskCase> {};

TEST_P(CudaMask, MatchesTheReferenceBitForBit) {
  DC_REQUIRE_DEVICE();
  const reference::MaskSpec& s = GetParam().spec;
  const std::vector<uint8_t> ref = reference::build_bool_mask(s);
  const auto allowed = std::count(ref.begin(), ref.end(), uint8_t{1});
  ASSERT_GT(allowed, 0) << "degenerate case: nothing allowed";
  ASSERT_LT(allowed, static_cast<int64_t>(ref.size())) << "degenerate case: nothing masked";

  std::vector<int64_t> offsets = s.q_offset;
  if (offsets.size() == 1) offsets.assign(static_cast<size_t>(s.batch), s.q_offset[0]);
  DeviceBuffer d_offsets(offsets), d_padding(s.padding_mask), d_positions(s.position_ids);
  DeviceBuffer d_out(ref.size());
  d_out.fill(kPoison);
  MaskParams p;
  p.batch = s.batch;
  p.q_len = s.q_len;
  p.kv_length = s.kv_length;
  p.q_offsets = offsets.empty() ? nullptr : d_offsets.as<int64_t>();
  p.causal = s.causal;
  p.sliding_window = s.sliding_window;
  p.chunk_size = s.chunk_size;
  p.padding_mask = s.padding_mask.empty() ? nullptr : d_padding.as<uint8_t>();
  p.position_ids = s.position_ids.empty() ? nullptr : d_positions.as<int64_t>();
  p.position_id_rows = s.position_id_rows;
  p.static_cache = s.static_cache;
  DC_EXPECT_OK(build_bool_mask(p, d_out.as<uint8_t>(), nullptr));
  const std::vector<uint8_t> got = d_out.download<uint8_t>();
  int64_t mismatches = 0;
  for (size_t i = 0; i < ref.size() && mismatches < 5; ++i) {
    if (got[i] == ref[i]) continue;
    ++mismatches;
    const int64_t kv = static_cast<int64_t>(i) % s.kv_length;
    const int64_t q = static_cast<int64_t>(i) / s.kv_length % s.q_len;
    const int64_t b = static_cast<int64_t>(i) / (s.kv_length * s.q_len);
    ADD_FAILURE() << "(b " << b << ", q " << q << ", kv " << kv << "): got " << int{got[i]}
                  << ", reference " << int{ref[i]} << " (" << reference::explain(s, b, q, kv).detail
                  << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaMask, ::testing::ValuesIn(mask_cases()),
                         [](const ::testing::TestParamInfo<MaskCase>& info) {
                           return info.param.name;
                         });

TEST(CudaSegments, FromPositionIdsAcrossScanTiles) {
  DC_REQUIRE_DEVICE();
  const int64_t batch = 2, len = 1500;  // 3000 tokens: several tiles of the block scan
  SplitMix64 rng(41);
  std::vector<int64_t> pos;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t p = static_cast<int64_t>(rng.next() % 5);  // rows need not start at 0
    for (int64_t t = 0; t < len; ++t) {
      const uint64_t r = rng.next() % 100;
      if (r < 3)
        p = 0;  // restart
      else if (r < 4)
        p += 2;  // a jump
      else if (r < 5)
        p = std::max<int64_t>(p - 1, 0);  // a repeat or a step back
      else
        p += 1;
      pos.push_back(p);
    }
  }
  const reference::PackedSegments ref = reference::segments_from_position_ids(pos, batch, len);
  ASSERT_GT(ref.cu_seqlens.size(), 40u) << "degenerate case: too few segments";

  DeviceBuffer d_pos(pos), d_cu(static_cast<size_t>(batch * len + 1) * sizeof(int64_t)),
      d_index(static_cast<size_t>(batch * len) * sizeof(int64_t)), d_count(sizeof(int64_t)),
      d_max(sizeof(int64_t));
  d_cu.fill(kPoison);
  SegmentParams p;
  p.position_ids = d_pos.as<int64_t>();
  p.batch = batch;
  p.len = len;
  p.cu_seqlens = d_cu.as<int64_t>();
  p.sequence_index = d_index.as<int64_t>();
  p.num_segments = d_count.as<int64_t>();
  p.max_seqlen = d_max.as<int64_t>();
  DC_EXPECT_OK(segments_from_position_ids(p, nullptr));
  const int64_t count = d_count.download<int64_t>()[0];
  ASSERT_EQ(count + 1, static_cast<int64_t>(ref.cu_seqlens.size()));
  std::vector<int64_t> cu = d_cu.download<int64_t>();
  cu.resize(static_cast<size_t>(count + 1));
  EXPECT_EQ(cu, ref.cu_seqlens);
  EXPECT_EQ(d_index.download<int64_t>(), ref.sequence_index);
  EXPECT_EQ(d_max.download<int64_t>()[0], ref.max_seqlen);

  // No tokens: one boundary, no segment.
  p.batch = 0;
  DC_EXPECT_OK(segments_from_position_ids(p, nullptr));
  EXPECT_EQ(d_count.download<int64_t>()[0], 0);
  EXPECT_EQ(d_cu.download<int64_t>()[0], 0);
  EXPECT_EQ(d_max.download<int64_t>()[0], 0);
}

}  // namespace
}  // namespace deltacheck::kernels::cuda
