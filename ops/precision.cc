// Matmul precision names and the rule's baseline formulations (ops/precision.h).
#include "ops/precision.h"

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

std::vector<reference::Arithmetic> rule_baselines(cases::DType dtype, MatmulPrecision precision) {
  using reference::Rounding;
  const Rounding act = dtype == cases::DType::kBF16  ? Rounding::kBF16
                       : dtype == cases::DType::kF16 ? Rounding::kF16
                                                     : Rounding::kNone;
  reference::Arithmetic recurrent;
  recurrent.fp32 = true;
  recurrent.output = act;
  reference::Arithmetic chunked = recurrent;
  chunked.form = reference::Formulation::kChunked;
  std::vector<reference::Arithmetic> out{recurrent, chunked};
  if (act != Rounding::kNone) {
    reference::Arithmetic lowp = chunked;
    lowp.operands = act;
    lowp.stored = act;
    out.push_back(lowp);
  } else if (precision == MatmulPrecision::kTF32) {
    reference::Arithmetic tf32 = chunked;
    tf32.operands = Rounding::kTF32;
    out.push_back(tf32);
  }
  return out;
}

std::vector<reference::Arithmetic> grad_baselines(cases::DType dtype, MatmulPrecision precision) {
  using reference::Rounding;
  const Rounding act = dtype == cases::DType::kBF16  ? Rounding::kBF16
                       : dtype == cases::DType::kF16 ? Rounding::kF16
                                                     : Rounding::kNone;
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
  if (act == Rounding::kNone) {
    reference::Arithmetic exact = chunked;
    exact.exact_cumsum = true;
    out.push_back(exact);
  }
  reference::Arithmetic lowp = plain;
  lowp.operands = act != Rounding::kNone                ? act
                  : precision == MatmulPrecision::kTF32 ? Rounding::kTF32
                                                        : Rounding::kNone;
  if (lowp.operands != Rounding::kNone) {
    out.push_back(lowp);
    // The chunked form as a tensor-core kernel runs it: operands, the UT matrix, w, u, v_new
    // and the states and state gradients it keeps between passes in the activation dtype.
    reference::Arithmetic chunked_lowp = chunked;
    chunked_lowp.operands = lowp.operands;
    out.push_back(chunked_lowp);
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
