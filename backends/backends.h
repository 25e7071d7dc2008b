// Factories of the built-in backends (the registry in registry.cc lists them by name).
#pragma once

#include <memory>
#include <vector>

#include "backends/registry.h"
#include "kernels/common/gated_delta_rule_params.h"
#include "kernels/cpu/linear_attention_layer.h"
#include "ops/layer/params.h"

namespace deltacheck::backends {

std::unique_ptr<Backend> make_cpu_backend();
std::vector<std::unique_ptr<Backend>> make_wrong_backends();
// right:*, the false-positive panel's deliberately correct formulations (right/backends.cc).
std::vector<std::unique_ptr<Backend>> make_right_backends();
// Deliberately wrong handling of states between calls and in pools (wrong_cache_backends.cc).
std::vector<std::unique_ptr<Backend>> make_wrong_cache_backends();
// What the wrong gdr backends run (wrong_backends.cc): gdr cases of one call at a time (none,
// prefill, decode; chunked and dynamic come as such calls), not the pool or serving modes.
Support gdr_calls_support(const std::string& name, const cases::Case& c);
// Deliberately wrong recurrences whose bug shows only in an input regime
// (wrong_regime_backends.cc).
std::vector<std::unique_ptr<Backend>> make_wrong_regime_backends();
// A deliberately wrong kernel whose bug shows only past 16K tokens a call
// (wrong_long_backends.cc).
std::vector<std::unique_ptr<Backend>> make_wrong_long_backends();
// Deliberately wrong output stores: bf16 / fp16 outputs rounded in one direction
// (wrong_rounding_backends.cc).
std::vector<std::unique_ptr<Backend>> make_wrong_rounding_backends();
// Deliberately wrong serving runtimes around the cpu kernels (wrong_serve_backends.cc).
std::vector<std::unique_ptr<Backend>> make_wrong_serve_backends();
// Deliberately wrong handling of the layer's serving state (wrong_layer_serving_backends.cc).
std::vector<std::unique_ptr<Backend>> make_wrong_layer_serving_backends();
// The cpu backend's layer cases, and the conv that reads across a boundary (cpu_layer.cc); the
// layer kernel's parameters pointing into a layer (or layer_grad) case's inputs, no outputs.
kernels::cpu::LinearAttentionLayerParams layer_inputs(const ops::layer::Params& d,
                                                      const cases::TensorMap& in);
Status run_cpu_layer_case(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out);
std::unique_ptr<Backend> make_wrong_conv_backend();
// The cpu backend's gdr cases in every cache mode (cpu_gdr.cc).
Status run_cpu_gdr_case(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out);
// The cpu backend's gdr_grad cases through the CPU backward, and the backward's kernel
// parameters for a case (cpu_gdr_grad.cc); the deliberately wrong backwards
// (wrong_grad_backends.cc).
kernels::GatedDeltaRuleBackwardParams gdr_grad_params(const cases::Case& c,
                                                      const cases::TensorMap& in,
                                                      cases::TensorMap& out);
Status run_cpu_gdr_grad_case(const cases::Case& c, const cases::TensorMap& in,
                             cases::TensorMap& out);
std::vector<std::unique_ptr<Backend>> make_wrong_grad_backends();

// The cpu backend's layer_grad cases through the CPU layer backward (cpu_layer_grad.cc); the
// deliberately wrong layer backwards (wrong_layer_grad_backends.cc).
Status run_cpu_layer_grad_case(const cases::Case& c, const cases::TensorMap& in,
                               cases::TensorMap& out);
std::vector<std::unique_ptr<Backend>> make_wrong_layer_grad_backends();
// wrong:segfault and wrong:hang, which crash only under --isolate (wrong_crash_backends.cc).
std::vector<std::unique_ptr<Backend>> make_wrong_crash_backends();
// "external": a program run per case through the fixture format (external_backend.cc).
std::unique_ptr<Backend> make_external_backend(const BackendOptions& options);

}  // namespace deltacheck::backends
