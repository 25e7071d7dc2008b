// CPU gates: elementwise over [T, HV], blocks of tokens spread over threads.
#include "kernels/cpu/gates.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/parallel_for.h"
#include "kernels/cpu/sequence_checks.h"

namespace deltacheck::kernels::cpu {
namespace {

constexpr int64_t kElementsPerTask = 16384;  // below this a thread costs more than it saves

// log(1 + exp(x)) that neither overflows for large x nor rounds to 0 for very negative x.
inline float softplus(float x) { return std::max(x, 0.0f) + std::log1p(std::exp(-std::abs(x))); }

// exp(-x) overflows to inf for very negative x, and 1 / (1 + inf) is the right limit 0.
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

Status gates(const GatesParams& p) {
  if (p.num_tokens < 0 || p.num_value_heads < 1)
    return Status::InvalidArgument("num_tokens must be >= 0 and num_value_heads >= 1");
  if (!p.a || !p.b || !p.A_log || !p.dt_bias || !p.g || !p.beta)
    return Status::InvalidArgument("a, b, A_log, dt_bias, g and beta are required");
  if (Status st = check_dtype(p.dtype, "a, b and beta"); !st.ok()) return st;
  const int64_t HV = p.num_value_heads;
  std::vector<float> decay_rate(static_cast<size_t>(HV));  // exp(A_log), once per head
  for (int64_t h = 0; h < HV; ++h) decay_rate[h] = std::exp(p.A_log[h]);
  const int64_t tokens_per_task = std::max<int64_t>(1, kElementsPerTask / HV);
  const int64_t tasks = (p.num_tokens + tokens_per_task - 1) / tokens_per_task;
  core::parallel_for(tasks, p.num_threads, [&](int64_t task) {
    const int64_t t0 = task * tokens_per_task;
    const int64_t t1 = std::min(p.num_tokens, t0 + tokens_per_task);
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t h = 0; h < HV; ++h) {
        const int64_t i = t * HV + h;
        const float a = load_as_float(p.a, p.dtype, i);
        p.g[i] = -decay_rate[h] * softplus(a + p.dt_bias[h]);
        store_from_float(p.beta, p.dtype, i, sigmoid(load_as_float(p.b, p.dtype, i)));
      }
    }
  });
  return Status::Ok();
}

}  // namespace deltacheck::kernels::cpu
