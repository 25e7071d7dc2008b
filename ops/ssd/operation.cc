// The ssd operation. Outputs: y [B,T,H,P] (dtype of x) and final_state [Nseq,H,P,N] (fp32; not for
// cache=none). The FP64 oracle is reference/ssd's token recurrence; the tolerance baselines are
// the formulations in real use in the case's precision (ssd_baselines below). Chunked and dynamic
// cases are driven call by call by the harness (harness/call_plan.h) against the one-shot prefill.
#include "ops/operation.h"

#include "ops/precision.h"
#include "ops/repack.h"
#include "ops/ssd/params.h"
#include "reference/ssd.h"

namespace deltacheck::ops::ssd {

using cases::DType;
using cases::Tensor;
using cases::TensorMap;

reference::SsdArgs reference_args(const Params& d, const TensorMap& in,
                                  std::vector<std::vector<double>>& buffers) {
  buffers.reserve(10);
  auto values = [&](const char* name) -> const double* {
    const Tensor* t = in.find(name);
    if (!t) return nullptr;
    buffers.push_back(t->to_double());
    return buffers.back().data();
  };
  reference::SsdArgs a;
  a.batch = d.B;
  a.seq_len = d.T;
  a.num_heads = d.H;
  a.head_dim = d.P;
  a.num_groups = d.G;
  a.state_dim = d.N;
  a.x = values("x");
  a.dt = values("dt");
  a.dt_bias = values("dt_bias");
  a.A = values("A");
  a.Bm = values("B");
  a.Cm = values("C");
  a.D = values("D");
  a.z = values("z");
  a.dt_min = d.dt_min();
  a.dt_max = d.dt_max();
  if (const Tensor* cu = in.find("cu_seqlens"))
    a.cu_seqlens.assign(cu->as<int64_t>(), cu->as<int64_t>() + cu->numel());
  a.initial_state = values("initial_state");
  return a;
}

namespace {

// The SSD formulations in real use in the precision of a case whose activations are `dtype`: the
// fp32 token recurrence with vLLM's softplus log(exp(x) + 1) (its selective_state_update under
// Triton 3: a step of 1e-3 keeps ~4 fewer digits than through log1p), the fp32 chunked form
// at chunk 256 (mamba_ssm's and vLLM's default) and at 64 (smaller kernels' tiles), and for bf16 /
// fp16 activations both chunked forms with matmul operands in that dtype (tensor cores; not under
// operands=fp32); a TF32 declaration adds the chunked forms with TF32 operands, a chunk=N
// declaration the chunked form at N. y is rounded to the dtype as stored.
std::vector<reference::SsdArithmetic> ssd_baselines(DType dtype, const PrecisionProfile& profile) {
  using reference::Rounding;
  using reference::SsdForm;
  const Rounding act = dtype == DType::kBF16  ? Rounding::kBF16
                       : dtype == DType::kF16 ? Rounding::kF16
                                              : Rounding::kNone;
  std::vector<reference::SsdArithmetic> out;
  out.push_back({SsdForm::kRecurrent, true, Rounding::kNone, act, 0, true});
  std::vector<int64_t> chunks{256, 64};
  if (profile.chunk != PrecisionProfile::kDefaultChunk && profile.chunk != 256)
    chunks.push_back(profile.chunk);
  const bool lowp = act != Rounding::kNone && !profile.operands_fp32;
  const bool tf32 = act == Rounding::kNone && profile.matmul == MatmulPrecision::kTF32;
  for (int64_t chunk : chunks) {
    out.push_back({SsdForm::kChunked, true, Rounding::kNone, act, chunk});
    if (lowp) out.push_back({SsdForm::kChunked, true, act, act, chunk});
    if (tf32) out.push_back({SsdForm::kChunked, true, Rounding::kTF32, act, chunk});
  }
  return out;
}

Values as_values(reference::SsdResult r, const Params& d) {
  Values v{{"y", std::move(r.y)}};
  if (d.final_state) v["final_state"] = std::move(r.final_state);
  return v;
}

Values evaluate(const cases::Case& c, const TensorMap& in, const reference::SsdArithmetic* how) {
  const Params d = decode(c);
  std::vector<std::vector<double>> buffers;
  const reference::SsdArgs a = reference_args(d, in, buffers);
  return as_values(how ? reference::ssd(a, *how) : reference::ssd(a), d);
}

class SsdOperation : public Operation {
 public:
  std::vector<OutputSpec> outputs(const cases::Case& c) const override {
    const Params d = decode(c);
    std::vector<OutputSpec> o{{"y", d.dtype, {d.B, d.T, d.H, d.P}}};
    // fp32 states computed from activations of the case's dtype: their tolerance follows it.
    if (d.final_state) o.push_back({"final_state", DType::kF32, {d.seqs, d.H, d.P, d.N}, d.dtype});
    return o;
  }

  Values oracle(const cases::Case& c, const TensorMap& in) const override {
    return evaluate(c, in, nullptr);
  }

  std::vector<Baseline> baselines(const cases::Case& c, const TensorMap& in,
                                  const PrecisionProfile& precision) const override {
    std::vector<Baseline> out;
    for (const reference::SsdArithmetic& how : ssd_baselines(decode(c).dtype, precision))
      out.push_back({reference::describe(how), evaluate(c, in, &how)});
    return out;
  }

  Baseline baseline(const cases::Case& c, const TensorMap& in, const PrecisionProfile& precision,
                    size_t i) const override {
    const reference::SsdArithmetic how = ssd_baselines(decode(c).dtype, precision).at(i);
    return {reference::describe(how), evaluate(c, in, &how)};
  }

  std::vector<SeqSlice> slices(const cases::Case& c, const std::string& output) const override {
    const Params d = decode(c);
    const int64_t row = d.H * d.P, per_state = d.H * d.P * d.N;
    std::vector<SeqSlice> s;
    for (int64_t i = 0; i < d.seqs; ++i) {
      const int64_t b = token_row(d.layout, i, 0), len = d.layout.lengths[i];
      if (output == "y")
        s.push_back({i, b * row, (b + len) * row, row});
      else
        s.push_back({i, i * per_state, (i + 1) * per_state, 0});
    }
    return s;
  }

  std::vector<int64_t> sequence_lengths(const cases::Case& c) const override {
    return decode(c).layout.lengths;
  }

  TensorMajor major(const std::string& t) const override {
    if (t == "initial_state" || t == "final_state") return TensorMajor::kSequence;
    if (t == "x" || t == "dt" || t == "B" || t == "C" || t == "z" || t == "y")
      return TensorMajor::kToken;
    return TensorMajor::kNone;  // A, dt_bias, D: per head, the model's
  }

  bool repackable(const cases::Case& c) const override { return true; }

  std::vector<std::pair<std::string, std::string>> carried_states(
      const cases::Case& c) const override {
    if (decode(c).cache == Cache::kNone) return {};
    return {{"final_state", "initial_state"}};
  }

  CallMode call_mode(const cases::Case& c) const override {
    const Params d = decode(c);
    if (d.cache == Cache::kChunked) return {CallMode::Kind::kChunked, d.calls};
    if (d.cache == Cache::kDynamic) return {CallMode::Kind::kDynamic, d.calls};
    return {};
  }
};

}  // namespace

const Operation& operation() {
  static const SsdOperation op;
  return op;
}

}  // namespace deltacheck::ops::ssd
