// The cpu backend's ssd cases: prefill (and each call of chunked / dynamic) through the chunked
// CPU SSD kernel, one-token decode calls through its state update, as vLLM's mamba_mixer2 sends
// decode batches to selective_state_update.
#include "backends/ssd_backends.h"
#include "kernels/cpu/ssd.h"
#include "ops/ssd/problem.h"

namespace deltacheck::backends {

Status run_cpu_ssd_case(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) {
  const ops::ssd::Params d = ops::ssd::decode(c);
  const kernels::SsdParams p = ops::ssd::kernel_params(d, in, out);
  if (d.cache == ops::ssd::Cache::kDecode) return kernels::cpu::ssd_state_update(p);
  return kernels::cpu::chunked_ssd(p);
}

}  // namespace deltacheck::backends
