// FunctionBackend and access to deltacheck's own backends (include/deltacheck/backend.h).
#include "deltacheck/backend.h"

#include "backends/registry.h"
#include "harness/isolation.h"

namespace deltacheck {

FunctionBackend::FunctionBackend(std::string name, RunFunction run, SupportFunction supports)
    : name_(std::move(name)),
      description_("function backend"),
      run_(std::move(run)),
      supports_(std::move(supports)) {}

FunctionBackend& FunctionBackend::set_description(std::string description) {
  description_ = std::move(description);
  return *this;
}

FunctionBackend& FunctionBackend::set_deterministic(bool deterministic) {
  deterministic_ = deterministic;
  return *this;
}

FunctionBackend& FunctionBackend::set_batch_invariant(bool batch_invariant) {
  batch_invariant_ = batch_invariant;
  return *this;
}

FunctionBackend& FunctionBackend::set_matmul_precision(harness::MatmulPrecision precision) {
  profile_.matmul = precision;
  return *this;
}

FunctionBackend& FunctionBackend::set_profile(const harness::PrecisionProfile& profile) {
  profile_ = profile;
  return *this;
}

FunctionBackend& FunctionBackend::set_checks_inputs(bool checks) {
  checks_inputs_ = checks;
  return *this;
}

Support FunctionBackend::supports(const Case& c) const {
  return supports_ ? supports_(c) : Support::Yes();
}

Status FunctionBackend::run(const Case& c, const TensorMap& inputs, TensorMap& outputs) {
  if (!run_) return Status::Internal(name_ + ": no run function");
  return run_(c, inputs, outputs);
}

std::vector<BackendInfo> list_backends() { return backends::list_backends(); }

std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& options) {
  return backends::make_backend(name, options);
}

std::unique_ptr<Backend> isolated_backend(std::unique_ptr<Backend> backend, double timeout_s) {
  return harness::make_isolated_backend(std::move(backend), {timeout_s});
}

}  // namespace deltacheck
