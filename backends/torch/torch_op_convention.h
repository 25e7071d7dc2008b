// The calling convention of the torch-op backend: the schema a custom operator must have for
// deltacheck to check it as a gated delta rule. Close to flash-linear-attention's
// chunk_gated_delta_rule, with every argument positional and the final state always returned;
// README.md in this folder gives the shapes and dtypes.
#pragma once

#include <ATen/core/function_schema.h>

#include <string>

namespace deltacheck::backends {

inline constexpr const char* kTorchOpGdrSignature =
    "(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor? cu_seqlens, "
    "Tensor? initial_state, float scale, bool use_qk_l2norm) -> (Tensor o, Tensor final_state)";

// Why `schema` does not follow the convention (the first differing argument or return), or ""
// when it does. Argument names are free; count, order and types are not.
std::string torch_op_convention_mismatch(const c10::FunctionSchema& schema);

}  // namespace deltacheck::backends
