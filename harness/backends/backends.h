// Factories of the built-in backends (the registry in registry.cc lists them by name).
#pragma once

#include <memory>
#include <vector>

#include "harness/backend.h"

namespace deltacheck::harness {

std::unique_ptr<Backend> make_cpu_backend();
std::vector<std::unique_ptr<Backend>> make_wrong_backends();
// right:*, the false-positive panel's deliberately correct formulations (right/backends.cc).
std::vector<std::unique_ptr<Backend>> make_right_backends();
// Deliberately wrong handling of states between calls and in pools (wrong_cache_backends.cc).
std::vector<std::unique_ptr<Backend>> make_wrong_cache_backends();
// Deliberately wrong serving runtimes around the cpu kernels (wrong_serve_backends.cc).
std::vector<std::unique_ptr<Backend>> make_wrong_serve_backends();
// The cpu backend's layer cases, and the conv that reads across a boundary (cpu_layer.cc).
Status run_cpu_layer_case(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out);
std::unique_ptr<Backend> make_wrong_conv_backend();
// The cpu backend's gdr cases in every cache mode (cpu_gdr.cc).
Status run_cpu_gdr_case(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out);
// wrong:segfault and wrong:hang, which crash only under --isolate (wrong_crash_backends.cc).
std::vector<std::unique_ptr<Backend>> make_wrong_crash_backends();
// "external": a program run per case through the fixture format (external_backend.cc).
std::unique_ptr<Backend> make_external_backend(const BackendOptions& options);

}  // namespace deltacheck::harness
