// Factories of the built-in backends (the registry in registry.cc lists them by name).
#pragma once

#include <memory>
#include <vector>

#include "harness/backend.h"

namespace deltacheck::harness {

std::unique_ptr<Backend> make_cpu_backend();
std::vector<std::unique_ptr<Backend>> make_wrong_backends();

}  // namespace deltacheck::harness
