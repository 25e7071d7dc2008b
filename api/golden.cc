// Golden fixtures of the public API (include/deltacheck/golden.h).
#include "deltacheck/golden.h"

#include "harness/isolation.h"
#include "harness/tolerance.h"

namespace deltacheck {

std::string tolerance_policy_id() { return harness::TolerancePolicy::kId; }

Status run_in_child(const std::function<Status()>& fn, double timeout_s) {
  cases::TensorMap nothing;
  return harness::run_isolated([&](cases::TensorMap&) { return fn(); }, nothing, {timeout_s});
}

}  // namespace deltacheck
