// What a backend's matmuls do with fp32 operands, and the gated-delta-rule formulations the
// tolerance baselines use (harness/tolerance.h judges against them; the operations compute them).
#pragma once

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

// The gated-delta-rule formulations in real use, in the precision of a case whose activations
// are `dtype` (the baselines of tol-v3): the fp32 token recurrence; the fp32 chunked form with
// chunk-local cumulative gates; for bf16/fp16 activations, the chunked form with matmul operands
// and intermediates in that dtype (tensor-core kernels); for fp32 activations under a TF32
// declaration, the chunked form with TF32 operands.
std::vector<reference::Arithmetic> rule_baselines(cases::DType dtype, MatmulPrecision precision);

// The backward formulations in real use in the precision of a case whose activations are `dtype`
// (gdr_grad, layer_grad): the fp32 token recurrence (activation gradients stored in the
// activation dtype), the fp32 chunked form (chunk 64, dg by the reverse cumulative sum of the
// cumulative gates' gradient), and for bf16 / fp16 activations (or a TF32 declaration) both
// with matmul operands in that format (the chunked one also keeping its UT matrix, w, u, v_new,
// states and state gradients in it).
std::vector<reference::Arithmetic> grad_baselines(cases::DType dtype, MatmulPrecision precision);

// Rounds values to what a tensor of `dtype` holds (FP64: unchanged).
void round_to(std::vector<double>& v, cases::DType dtype);

}  // namespace deltacheck::ops
