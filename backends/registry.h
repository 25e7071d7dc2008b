// The registry of backends: every backend this build knows, by name. The built-in ones (cpu,
// wrong:*, right:*, external) are always there; optional libraries (torch, cuda) add theirs with
// register_backend_factory (deltacheck/torch.h, deltacheck/cuda.h). The harness never names a
// backend: it runs what the caller made here (docs/architecture.md, "Dependencies").
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/backend.h"

namespace deltacheck::backends {

// Backends implement the harness's interface: its names (Backend, BackendOptions, BackendInfo,
// Capabilities, ...) are used unqualified in this namespace.
using namespace deltacheck::harness;

// Adds backends from an optional library (e.g. LibTorch, CUDA); call before first use.
using BackendFactory = std::function<std::vector<std::unique_ptr<Backend>>(const BackendOptions&)>;
void register_backend_factory(BackendFactory factory);

// Every backend this build knows, in listing order.
std::vector<BackendInfo> list_backends();
// Creates a backend by name; throws std::invalid_argument naming the unknown backend.
std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& options = {});

}  // namespace deltacheck::backends
