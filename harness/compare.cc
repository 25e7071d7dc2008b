// Error metrics.
#include "harness/compare.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/parallel_for.h"

namespace deltacheck::harness {

namespace {

// Elements per partial result. Fixed, so the sums (and every metric) are the same whatever the
// number of threads that computes the blocks.
constexpr int64_t kBlock = int64_t{1} << 18;

struct Partial {
  double num[4] = {0.0, 0.0, 0.0, 0.0}, den[4] = {0.0, 0.0, 0.0, 0.0};
  double ref_max_abs = 0.0, max_abs = 0.0;
  int64_t max_index = -1, non_finite = 0;
};

// One block. The sums run in four interleaved lanes: one chain of dependent additions would
// bound this loop, which runs over every element of every output, at several cycles each.
Partial measure_block(const double* a, const double* e, int64_t begin, int64_t end) {
  Partial m;
  auto step = [&](int64_t i, int lane) {
    const double ref = e[i];
    m.ref_max_abs = std::max(m.ref_max_abs, std::fabs(ref));
    m.den[lane] += ref * ref;
    if (!std::isfinite(a[i])) {
      ++m.non_finite;
      if (std::isfinite(m.max_abs)) m.max_index = i;  // the first non-finite element
      m.max_abs = INFINITY;
      m.num[lane] = INFINITY;
      return;
    }
    const double d = std::fabs(a[i] - ref);
    m.num[lane] += d * d;
    if (d > m.max_abs || m.max_index < 0) {
      m.max_abs = d;
      m.max_index = i;
    }
  };
  int64_t i = begin;
  for (; i + 4 <= end; i += 4)
    for (int lane = 0; lane < 4; ++lane) step(i + lane, lane);
  for (; i < end; ++i) step(i, 0);
  return m;
}

// fn(i) for i in [0, n), on every hardware thread when there is more than one block of work.
template <typename Fn>
void for_each_block(int64_t n, Fn&& fn) {
  kernels::cpu::parallel_for(n, n > 1 ? 0 : 1, fn);
}

}  // namespace

Metrics measure(const std::vector<double>& a, const std::vector<double>& e, int64_t begin,
                int64_t end) {
  const int64_t blocks = std::max<int64_t>(1, (end - begin + kBlock - 1) / kBlock);
  std::vector<Partial> parts(static_cast<size_t>(blocks));
  for_each_block(blocks, [&](int64_t b) {
    parts[b] = measure_block(a.data(), e.data(), begin + b * kBlock,
                             std::min(end, begin + (b + 1) * kBlock));
  });
  // Blocks combined in order: the first largest |Δ| (or first non-finite element) wins, as in
  // one pass from the start.
  Metrics m;
  Partial all;
  for (const Partial& p : parts) {
    for (int l = 0; l < 4; ++l) all.num[l] += p.num[l], all.den[l] += p.den[l];
    m.ref_max_abs = std::max(m.ref_max_abs, p.ref_max_abs);
    m.non_finite += p.non_finite;
    if (p.max_index >= 0 && (p.max_abs > m.max_abs || m.max_index < 0)) {
      m.max_abs = p.max_abs;
      m.max_index = p.max_index;
    }
  }
  const double num = (all.num[0] + all.num[1]) + (all.num[2] + all.num[3]);
  const double den = (all.den[0] + all.den[1]) + (all.den[2] + all.den[3]);
  m.count = end - begin;
  m.rel_rms = den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
  m.nmse = m.rel_rms * m.rel_rms;
  return m;
}

int64_t first_token_over(const std::vector<double>& a, const std::vector<double>& e, int64_t begin,
                         int64_t end, int64_t per_token, double max_abs) {
  if (per_token <= 0) return -1;
  for (int64_t t = 0; begin + t * per_token < end; ++t)
    for (int64_t i = begin + t * per_token; i < begin + (t + 1) * per_token; ++i) {
      const double d = std::fabs(a[i] - e[i]);
      if (!(d <= max_abs)) return t;  // NaN counts as over
    }
  return -1;
}

std::vector<double> token_errors(const std::vector<double>& a, const std::vector<double>& e,
                                 int64_t begin, int64_t end, int64_t per_token) {
  std::vector<double> out;
  if (per_token <= 0) return out;
  out.resize(static_cast<size_t>((end - begin + per_token - 1) / per_token));
  const int64_t tokens = static_cast<int64_t>(out.size());
  const int64_t per_block = std::max<int64_t>(1, kBlock / per_token);
  for_each_block((tokens + per_block - 1) / per_block, [&](int64_t b) {
    for (int64_t t = b * per_block; t < std::min(tokens, (b + 1) * per_block); ++t) {
      double worst = 0.0;
      for (int64_t j = begin + t * per_token; j < begin + (t + 1) * per_token; ++j) {
        const double d = std::fabs(a[j] - e[j]);
        worst = std::isfinite(d) ? std::max(worst, d) : INFINITY;
      }
      out[t] = worst;
    }
  });
  return out;
}

std::vector<std::vector<double>> head_token_errors(const std::vector<double>& a,
                                                   const std::vector<double>& e, int64_t per_token,
                                                   int64_t heads) {
  std::vector<std::vector<double>> out;
  if (per_token <= 0 || heads <= 0 || per_token % heads != 0) return out;
  const int64_t per_head = per_token / heads, n = static_cast<int64_t>(a.size());
  out.resize(static_cast<size_t>(heads));
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = h * per_head; i < n; i += per_token) {
      double worst = 0.0;
      for (int64_t j = i; j < i + per_head; ++j) {
        const double d = std::fabs(a[j] - e[j]);
        worst = std::isfinite(d) ? std::max(worst, d) : INFINITY;
      }
      out[h].push_back(worst);
    }
  return out;
}

}  // namespace deltacheck::harness
