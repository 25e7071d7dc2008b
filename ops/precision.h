// A backend's precision profile (the formulation choices a correct implementation makes, each
// with its own same-precision baseline), and the gated-delta-rule formulations the tolerance
// baselines use (harness/tolerance.h judges against them; the operations compute them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cases/tensor.h"
#include "reference/gated_delta_rule.h"

namespace deltacheck::ops {

// What a backend's matmuls do with fp32 operands: fp32 (default) or TF32 (10 mantissa bits, as
// Triton's tl.dot and cuBLAS with TF32 enabled compute on Ampere and later). A declared TF32
// backend is judged against the TF32 baseline on fp32 cases; the declaration is printed with
// every result.
enum class MatmulPrecision { kDefault, kTF32 };
const char* matmul_precision_name(MatmulPrecision p);              // "fp32" | "tf32"
MatmulPrecision matmul_precision_from_name(const std::string& s);  // throws std::invalid_argument

// The formulation choices a backend declares (docs/tolerance.md, "Precision profiles"). Each
// loosening choice adds the default baselines computed that way (the kernel is judged against
// the worst of both); operands=fp32 removes the activation-dtype-operands baselines (a recurrent
// kernel that keeps its state and matmul operands in fp32 is judged as one). Written as
// comma-separated choices: "tf32,chunk=128,cumsum=independent,l2norm=act,operands=fp32,
// autodiff=act".
struct PrecisionProfile {
  static constexpr int64_t kDefaultChunk = 64;
  // A matmul precision alone is the profile of that one choice (the TF32 declaration before
  // profiles).
  PrecisionProfile(MatmulPrecision m = MatmulPrecision::kDefault) : matmul(m) {}  // NOLINT
  MatmulPrecision matmul = MatmulPrecision::kDefault;  // tf32 (or matmul=tf32)
  int64_t chunk = kDefaultChunk;                       // chunk=N: the chunked form's chunk size
  bool independent_cumsum = false;  // cumsum=independent: each prefix sum rounded from an exact sum
  bool l2norm_act = false;          // l2norm=act: the q/k L2 norm in the activation dtype
  bool operands_fp32 = false;       // operands=fp32: no activation-dtype matmul operands
  // autodiff=act: backward ops, bf16 / fp16 cases: gradients by autodiff through a graph whose
  // every tensor is of the activation dtype (a model in bf16 end to end under torch.autograd)
  bool autodiff_act = false;

  bool is_default() const { return *this == PrecisionProfile{}; }
  bool operator==(const PrecisionProfile& o) const {
    return matmul == o.matmul && chunk == o.chunk && independent_cumsum == o.independent_cumsum &&
           l2norm_act == o.l2norm_act && operands_fp32 == o.operands_fp32 &&
           autodiff_act == o.autodiff_act;
  }
  bool operator!=(const PrecisionProfile& o) const { return !(*this == o); }
};

// The canonical spelling: "fp32" for the default profile, "tf32" for a TF32 declaration alone,
// else the declared choices in a fixed order ("tf32,chunk=128,cumsum=independent").
std::string profile_name(const PrecisionProfile& p);
// Reads a profile ("" and "fp32" are the default); throws std::invalid_argument naming the bad
// part ("unknown profile choice 'chunk=0' ...").
PrecisionProfile profile_from_name(const std::string& s);
// `p` with the choices of `extra` added (extra's non-default fields win).
PrecisionProfile merged(PrecisionProfile p, const PrecisionProfile& extra);

// The gated-delta-rule formulations in real use, in the precision of a case whose activations
// are `dtype` (the baselines of tol-v3): the fp32 token recurrence; the fp32 chunked form with
// chunk-local cumulative gates, by a running sum and (fp32 activations) with each prefix sum
// rounded from an exact sum; for bf16/fp16 activations, the chunked form with matmul operands
// and intermediates in that dtype (tensor-core kernels; not under operands=fp32); for fp32
// activations under a TF32 declaration, the chunked form with TF32 operands. A profile's
// loosening choices add each of them computed that way.
std::vector<reference::Arithmetic> rule_baselines(cases::DType dtype,
                                                  const PrecisionProfile& profile);

// The backward formulations in real use in the precision of a case whose activations are `dtype`
// (gdr_grad, layer_grad): the fp32 token recurrence (activation gradients stored in the
// activation dtype), the fp32 chunked form (chunk 64, dg by the reverse cumulative sum of the
// cumulative gates' gradient), and for bf16 / fp16 activations (or a TF32 declaration) both
// with matmul operands in that format (the chunked one also keeping its UT matrix, w, u, v_new,
// states and state gradients in it). A profile's chunk=N adds the chunked forms at that chunk;
// operands=fp32 removes the activation-dtype-operands forms; autodiff=act (bf16 / fp16) adds the
// recurrent backward as autodiff computes it through an activation-dtype graph.
std::vector<reference::Arithmetic> grad_baselines(cases::DType dtype,
                                                  const PrecisionProfile& profile);

// Rounds values to what a tensor of `dtype` holds (FP64: unchanged).
void round_to(std::vector<double>& v, cases::DType dtype);

}  // namespace deltacheck::ops
