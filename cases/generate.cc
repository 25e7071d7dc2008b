// Input generators, one per operation.
#include "cases/generate.h"

#include <cmath>
#include <string>

#include "cases/det_math.h"
#include "cases/rng.h"

namespace deltacheck::cases {
namespace {

struct GdrDims {
  Layout layout;
  int64_t B, T, H, HV, K, V, N;
  DType dtype;
};

DType parse_dtype(const std::string& s) {
  if (s == "bf16") return DType::kBF16;
  if (s == "fp16") return DType::kF16;
  return DType::kF32;
}

GdrDims gdr_dims(const Case& c) {
  GdrDims d;
  d.layout = Layout::parse(c.get("layout"));
  d.B = d.layout.batch();
  d.T = d.layout.row_length();
  d.H = c.get_int("H");
  d.HV = c.get_int("HV");
  d.K = c.get_int("K");
  d.V = c.get_int("V");
  d.N = d.layout.num_seqs();
  d.dtype = parse_dtype(c.get("dtype"));
  return d;
}

// Position of sequence s's first token in the flat [B*T] token order.
int64_t flat_begin(const GdrDims& d, int64_t s) {
  if (d.layout.kind == Layout::Kind::kBatch) return s * d.T;
  return d.layout.cu_seqlens()[s];
}

// A stream for one tensor of one sequence, with the sequence's salt.
Stream seq_stream(const Case& c, const GenOptions& o, const std::string& tensor, int64_t s) {
  auto it = o.sequence_salt.find(s);
  const uint64_t salt = it == o.sequence_salt.end() ? 0 : it->second * 0x9E3779B97F4A7C15ull;
  return Stream(c.seed() ^ salt, tensor + "/" + std::to_string(s));
}

// q or k: N(0,1) (or |N(0,1)| for ill-conditioned keys); pre-normalized when the kernel is not
// asked to normalize, so the rule stays contractive.
void fill_qk(const Case& c, const GenOptions& o, const GdrDims& d, Tensor& t, bool positive) {
  const bool l2 = c.get_bool("l2");
  const auto cu = d.layout.cu_seqlens();
  std::vector<double> row(static_cast<size_t>(d.K));
  for (int64_t s = 0; s < d.N; ++s) {
    const Stream st = seq_stream(c, o, t.name(), s);
    const int64_t len = d.layout.lengths[s], base = flat_begin(d, s);
    for (int64_t tok = 0; tok < len; ++tok)
      for (int64_t h = 0; h < d.H; ++h) {
        double ss = 0.0;
        for (int64_t i = 0; i < d.K; ++i) {
          double x = st.normal(static_cast<uint64_t>((tok * d.H + h) * d.K + i));
          if (positive) x = std::fabs(x);
          row[i] = x;
          ss += x * x;
        }
        const double inv = l2 ? 1.0 : 1.0 / std::sqrt(ss + 1e-12);
        for (int64_t i = 0; i < d.K; ++i)
          t.set(((base + tok) * d.H + h) * d.K + i, static_cast<float>(row[i] * inv));
      }
  }
}

double gate_value(const std::string& regime, const Stream& st, uint64_t i, int64_t tok,
                  int64_t len) {
  if (regime == "zero") return 0.0;
  if (regime == "strong") return st.uniform(i, -20.0, -1e-4);
  if (regime == "tail") {
    const int64_t tail_begin = ((len - 1) / 64) * 64;
    if (tok >= tail_begin) return st.uniform(i, -60.0, -30.0);
  }
  return det_log_sigmoid(st.uniform(i));  // weak
}

double beta_value(const std::string& regime, const Stream& st, uint64_t i) {
  if (regime == "zero") return 0.0;
  if (regime == "one") return 1.0;
  const double b = det_sigmoid(st.normal(i));
  return regime == "wide" ? 2.0 * b : b;
}

TensorMap generate_gdr(const Case& c, const GenOptions& o) {
  const GdrDims d = gdr_dims(c);
  TensorMap m;
  Tensor& q = m.add(Tensor("q", d.dtype, {d.B, d.T, d.H, d.K}));
  Tensor& k = m.add(Tensor("k", d.dtype, {d.B, d.T, d.H, d.K}));
  Tensor& v = m.add(Tensor("v", d.dtype, {d.B, d.T, d.HV, d.V}));
  Tensor& g = m.add(Tensor("g", DType::kF32, {d.B, d.T, d.HV}));
  Tensor& beta = m.add(Tensor("beta", d.dtype, {d.B, d.T, d.HV}));
  fill_qk(c, o, d, q, false);
  fill_qk(c, o, d, k, c.get("keys") == "pos");
  const std::string gate = c.get("gate"), beta_regime = c.get("beta");
  for (int64_t s = 0; s < d.N; ++s) {
    const Stream sv = seq_stream(c, o, "v", s), sg = seq_stream(c, o, "g", s),
                 sb = seq_stream(c, o, "beta", s);
    const int64_t len = d.layout.lengths[s], base = flat_begin(d, s);
    for (int64_t tok = 0; tok < len; ++tok)
      for (int64_t h = 0; h < d.HV; ++h) {
        const uint64_t i = static_cast<uint64_t>(tok * d.HV + h);
        for (int64_t j = 0; j < d.V; ++j)
          v.set(((base + tok) * d.HV + h) * d.V + j,
                static_cast<float>(sv.normal(i * static_cast<uint64_t>(d.V) + j)));
        g.set((base + tok) * d.HV + h, static_cast<float>(gate_value(gate, sg, i, tok, len)));
        beta.set((base + tok) * d.HV + h, static_cast<float>(beta_value(beta_regime, sb, i)));
      }
  }
  if (d.layout.has_cu_seqlens()) {
    const auto cu = d.layout.cu_seqlens();
    Tensor& t = m.add(Tensor("cu_seqlens", DType::kI64, {static_cast<int64_t>(cu.size())}));
    for (size_t i = 0; i < cu.size(); ++i) t.as<int64_t>()[i] = cu[i];
  }
  const std::string state = c.get("state");
  if (c.get("cache") != "none" && state != "none") {
    Tensor& s0 = m.add(Tensor("initial_state", DType::kF32, {d.N, d.HV, d.K, d.V}));
    const int64_t per = d.HV * d.K * d.V;
    for (int64_t s = 0; s < d.N; ++s) {
      const bool fresh = state == "mixed" && s % 2 == 0;
      const Stream st = seq_stream(c, o, "initial_state", s);
      for (int64_t i = 0; i < per; ++i)
        s0.set(s * per + i, fresh ? 0.0 : static_cast<float>(0.5 * st.normal(i)));
    }
  }
  return m;
}

}  // namespace

TensorMap generate_inputs(const Case& c, const GenOptions& options) {
  if (c.op() == "gdr") return generate_gdr(c, options);
  throw CaseIdError("no input generator for operation '" + c.op() + "'");
}

int64_t estimate_input_bytes(const Case& c) {
  if (c.op() == "gdr") {
    const GdrDims d = gdr_dims(c);
    const int64_t tokens = d.B * d.T, es = dtype_size(d.dtype);
    return tokens * (2 * d.H * d.K + d.HV * d.V + d.HV) * es + tokens * d.HV * 4 +
           2 * d.N * d.HV * d.K * d.V * 4;
  }
  return 0;
}

}  // namespace deltacheck::cases
