// Precision profiles and the rule's baseline formulations (ops/precision.h).
#include "ops/precision.h"

#include <algorithm>
#include <stdexcept>

namespace deltacheck::ops {

const char* matmul_precision_name(MatmulPrecision p) {
  return p == MatmulPrecision::kTF32 ? "tf32" : "fp32";
}

MatmulPrecision matmul_precision_from_name(const std::string& s) {
  if (s == "fp32" || s == "default" || s.empty()) return MatmulPrecision::kDefault;
  if (s == "tf32") return MatmulPrecision::kTF32;
  throw std::invalid_argument("unknown matmul precision '" + s + "' (fp32 | tf32)");
}

std::string profile_name(const PrecisionProfile& p) {
  std::string s;
  auto add = [&s](const std::string& c) { s += (s.empty() ? "" : ",") + c; };
  if (p.matmul == MatmulPrecision::kTF32) add("tf32");
  if (p.chunk != PrecisionProfile::kDefaultChunk) add("chunk=" + std::to_string(p.chunk));
  if (p.independent_cumsum) add("cumsum=independent");
  if (p.l2norm_act) add("l2norm=act");
  if (p.operands_fp32) add("operands=fp32");
  if (p.autodiff_act) add("autodiff=act");
  return s.empty() ? "fp32" : s;
}

PrecisionProfile profile_from_name(const std::string& text) {
  PrecisionProfile p;
  if (text.empty() || text == "fp32" || text == "default") return p;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string part = text.substr(begin, end - begin);
    begin = end + 1;
    const size_t eq = part.find('=');
    const std::string key = part.substr(0, eq),
                      value = eq == std::string::npos ? "" : part.substr(eq + 1);
    auto bad = [&](const std::string& why) {
      throw std::invalid_argument("bad profile choice '" + part + "' in '" + text + "': " + why);
    };
    if (part == "tf32" || part == "matmul=tf32") {
      p.matmul = MatmulPrecision::kTF32;
    } else if (part == "matmul=fp32") {
      p.matmul = MatmulPrecision::kDefault;
    } else if (key == "chunk" && eq != std::string::npos) {
      int64_t n = 0;
      bool digits = !value.empty() && value.size() <= 5;
      for (char ch : value) digits = digits && ch >= '0' && ch <= '9';
      if (digits) n = std::stoll(value);
      if (!digits || n < 1 || n > 4096) bad("chunk=N needs N in 1..4096");
      p.chunk = n;
    } else if (part == "cumsum=independent" || part == "cumsum=running") {
      p.independent_cumsum = value == "independent";
    } else if (part == "l2norm=act" || part == "l2norm=fp32") {
      p.l2norm_act = value == "act";
    } else if (part == "operands=fp32" || part == "operands=act") {
      p.operands_fp32 = value == "fp32";
    } else if (part == "autodiff=act" || part == "autodiff=fp32") {
      p.autodiff_act = value == "act";
    } else {
      bad("choices are tf32, chunk=N, cumsum=independent, l2norm=act, operands=fp32, "
          "autodiff=act");
    }
  }
  return p;
}

PrecisionProfile merged(PrecisionProfile p, const PrecisionProfile& extra) {
  const PrecisionProfile d;
  if (extra.matmul != d.matmul) p.matmul = extra.matmul;
  if (extra.chunk != d.chunk) p.chunk = extra.chunk;
  p.independent_cumsum = p.independent_cumsum || extra.independent_cumsum;
  p.l2norm_act = p.l2norm_act || extra.l2norm_act;
  p.operands_fp32 = p.operands_fp32 || extra.operands_fp32;
  p.autodiff_act = p.autodiff_act || extra.autodiff_act;
  return p;
}

namespace {

using reference::Rounding;

Rounding activation_rounding(cases::DType dtype) {
  return dtype == cases::DType::kBF16  ? Rounding::kBF16
         : dtype == cases::DType::kF16 ? Rounding::kF16
                                       : Rounding::kNone;
}

bool same(const reference::Arithmetic& a, const reference::Arithmetic& b) {
  return a.form == b.form && a.fp32 == b.fp32 && a.operands == b.operands && a.stored == b.stored &&
         a.output == b.output && a.chunk_size == b.chunk_size && a.exact_cumsum == b.exact_cumsum &&
         a.qk_norm == b.qk_norm && a.graph == b.graph;
}

// Each of `base` computed with the profile's loosening choices (chunk size, independent prefix
// sums, the L2 norm in the activation dtype) where they change it, after the defaults.
std::vector<reference::Arithmetic> with_profile(std::vector<reference::Arithmetic> base,
                                                const PrecisionProfile& p, Rounding act,
                                                bool forward) {
  const size_t n = base.size();
  for (size_t i = 0; i < n; ++i) {
    reference::Arithmetic v = base[i];
    if (v.form == reference::Formulation::kChunked) {
      v.chunk_size = p.chunk;
      v.exact_cumsum = v.exact_cumsum || p.independent_cumsum;
    }
    if (forward && p.l2norm_act) v.qk_norm = act;
    const bool known = std::any_of(base.begin(), base.end(),
                                   [&](const reference::Arithmetic& b) { return same(b, v); });
    if (!known) base.push_back(v);
  }
  return base;
}

}  // namespace

std::vector<reference::Arithmetic> rule_baselines(cases::DType dtype,
                                                  const PrecisionProfile& profile) {
  const Rounding act = activation_rounding(dtype);
  reference::Arithmetic recurrent;
  recurrent.fp32 = true;
  recurrent.output = act;
  reference::Arithmetic chunked = recurrent;
  chunked.form = reference::Formulation::kChunked;
  std::vector<reference::Arithmetic> out{recurrent, chunked};
  const bool lowp = act != Rounding::kNone && !profile.operands_fp32;
  if (lowp) {
    reference::Arithmetic low = chunked;
    low.operands = act;
    low.stored = act;
    out.push_back(low);
  } else if (act == Rounding::kNone && profile.matmul == MatmulPrecision::kTF32) {
    reference::Arithmetic tf32 = chunked;
    tf32.operands = Rounding::kTF32;
    out.push_back(tf32);
  }
  // The chunked form with each prefix sum of G rounded on its own from an exact sum (jnp.cumsum,
  // torch.cumsum on a CPU): in the default set wherever the fp32 arithmetic sets the threshold
  // (docs/tolerance.md, "Precision profiles"; activation-dtype operands dominate it otherwise).
  if (!lowp) {
    reference::Arithmetic exact = chunked;
    exact.exact_cumsum = true;
    out.push_back(exact);
  }
  return with_profile(std::move(out), profile, act, /*forward=*/true);
}

std::vector<reference::Arithmetic> grad_baselines(cases::DType dtype,
                                                  const PrecisionProfile& profile) {
  const Rounding act = activation_rounding(dtype);
  reference::Arithmetic plain;
  plain.fp32 = true;
  plain.output = act;
  // The chunked form as FLA's and Transformers' naive chunk functions run under autograd: its
  // fp32 error (exp(G_i - G_j) over a chunk of strong decay, dg by the reverse cumulative sum)
  // is what a correct chunked backward may have (docs/gradients.md, "The chunked baseline").
  reference::Arithmetic chunked = plain;
  chunked.form = reference::Formulation::kChunked;
  std::vector<reference::Arithmetic> out{plain, chunked};
  // In fp32 activations, the same chunked form with torch.cumsum's arithmetic for G and dg (each
  // rounded once from an exact sum): under strong decay its rounding moves dk, dv, dg and dbeta
  // several times further than a running fp32 sum does (dg's threshold on the gate's worst case:
  // 1.7e-5 -> 6.9e-5; docs/gradients.md, "The chunked baseline"). With bf16 / fp16 operands the
  // rounded operands dominate both.
  if (act == Rounding::kNone || profile.operands_fp32) {
    reference::Arithmetic exact = chunked;
    exact.exact_cumsum = true;
    out.push_back(exact);
  }
  reference::Arithmetic lowp = plain;
  lowp.operands = act != Rounding::kNone && !profile.operands_fp32 ? act
                  : act == Rounding::kNone && profile.matmul == MatmulPrecision::kTF32
                      ? Rounding::kTF32
                      : Rounding::kNone;
  if (lowp.operands != Rounding::kNone) {
    out.push_back(lowp);
    // The chunked form as a tensor-core kernel runs it: operands, the UT matrix, w, u, v_new
    // and the states and state gradients it keeps between passes in the activation dtype.
    reference::Arithmetic chunked_lowp = chunked;
    chunked_lowp.operands = lowp.operands;
    out.push_back(chunked_lowp);
  }
  out = with_profile(std::move(out), profile, act, /*forward=*/false);
  // autodiff=act: the recurrence and its reverse-mode derivative with every tensor of the graph
  // in the activation dtype (docs/tolerance.md, "autodiff=act"); in fp32 it is the fp32 graph,
  // which the recurrent baseline already is.
  if (profile.autodiff_act && act != Rounding::kNone) {
    reference::Arithmetic graph = plain;
    graph.graph = act;
    out.push_back(graph);
  }
  return out;
}

void round_to(std::vector<double>& v, cases::DType dtype) {
  if (dtype == cases::DType::kF64) return;
  cases::Tensor t("r", dtype, {1});
  for (double& x : v) {
    t.set(0, x);
    x = t.get(0);
  }
}

}  // namespace deltacheck::ops
