// CPU gated RMS norm: every [V] vector on its own, blocks of vectors spread over threads.
#include "kernels/cpu/gated_rms_norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/parallel_for.h"
#include "kernels/cpu/row_conversion.h"
#include "kernels/cpu/sequence_checks.h"

namespace deltacheck::kernels::cpu {
namespace {

constexpr int64_t kElementsPerTask = 16384;  // below this a thread costs more than it saves

void normalize_row(const GatedRmsNormParams& p, int64_t row, float* x, float* z) {
  const int64_t V = p.dim, base = row * V;
  load_row(p.x, p.dtype, base, V, x);
  load_row(p.z, p.dtype, base, V, z);
  float ss = 0.0f;
  for (int64_t i = 0; i < V; ++i) ss += x[i] * x[i];
  const float inv_rms = 1.0f / std::sqrt(ss / static_cast<float>(V) + p.eps);
  for (int64_t i = 0; i < V; ++i)
    x[i] = p.weight[i] * (x[i] * inv_rms) * (z[i] / (1.0f + std::exp(-z[i])));
  store_row(p.y, p.dtype, base, V, x);
}

}  // namespace

Status gated_rms_norm(const GatedRmsNormParams& p) {
  if (p.num_tokens < 0 || p.num_heads < 1 || p.dim < 1)
    return Status::InvalidArgument("num_tokens must be >= 0, num_heads and dim >= 1");
  if (!p.x || !p.z || !p.weight || !p.y)
    return Status::InvalidArgument("x, z, weight and y are required");
  if (!(p.eps >= 0.0f)) return Status::InvalidArgument("eps must be >= 0");
  if (Status st = check_dtype(p.dtype, "x, z and y"); !st.ok()) return st;
  const int64_t rows = p.num_tokens * p.num_heads;
  const int64_t rows_per_task = std::max<int64_t>(1, kElementsPerTask / p.dim);
  const int64_t tasks = (rows + rows_per_task - 1) / rows_per_task;
  core::parallel_for(tasks, p.num_threads, [&](int64_t task) {
    thread_local std::vector<float> scratch;
    scratch.resize(static_cast<size_t>(2 * p.dim));
    const int64_t r1 = std::min(rows, (task + 1) * rows_per_task);
    for (int64_t r = task * rows_per_task; r < r1; ++r)
      normalize_row(p, r, scratch.data(), scratch.data() + p.dim);
  });
  return Status::Ok();
}

}  // namespace deltacheck::kernels::cpu
