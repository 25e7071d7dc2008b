// The backends' ssd cases (Mamba2 SSD): the cpu backend's route (cpu_ssd.cc), the deliberately
// wrong ones (wrong_ssd_backends.cc) and the panel's right:ssd-* (right/ssd.cc).
#pragma once

#include <memory>
#include <vector>

#include "backends/registry.h"

namespace deltacheck::backends {

// cache=decode (one token per sequence, a selective_state_update-style call) through the state
// update; every other call through the chunked kernel.
Status run_cpu_ssd_case(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out);
std::vector<std::unique_ptr<Backend>> make_wrong_ssd_backends();
std::vector<std::unique_ptr<Backend>> make_right_ssd_backends();

}  // namespace deltacheck::backends
