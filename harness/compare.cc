// Error metrics.
#include "harness/compare.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <type_traits>

#include "core/parallel_for.h"

namespace deltacheck::harness {

namespace {

// Elements per partial result. Fixed, so the sums (and every metric) are the same whatever the
// number of threads that computes the blocks. 2^17: long enough for the hardware prefetcher's
// streams, short enough that a final state of 16 x 128 x 128 splits over two threads.
constexpr int64_t kBlock = int64_t{1} << 17;

struct Partial {
  double num[4] = {0.0, 0.0, 0.0, 0.0}, den[4] = {0.0, 0.0, 0.0, 0.0};
  double ref_max_abs = 0.0, max_abs = 0.0;
  // -1 while the block is empty; kLocateLater when its largest |Δ| has not been located yet
  // (it is then the first |Δ| equal to max_abs in [locate_begin, locate_end)).
  int64_t max_index = -1, non_finite = 0;
  int64_t locate_begin = 0, locate_end = 0;
};
constexpr int64_t kLocateLater = -2;

// One block, element by element. The sums run in four interleaved lanes: one chain of dependent
// additions would bound this loop at several cycles per element. `load(i)` is element i of the
// actual values as double.
template <typename Load>
Partial measure_block_exact(const Load& load, const double* e, int64_t begin, int64_t end) {
  Partial m;
  auto step = [&](int64_t i, int lane) {
    const double ref = e[i];
    const double a = load(i);
    m.ref_max_abs = std::max(m.ref_max_abs, std::fabs(ref));
    m.den[lane] += ref * ref;
    if (!std::isfinite(a)) {
      ++m.non_finite;
      if (std::isfinite(m.max_abs)) m.max_index = i;  // the first non-finite element
      m.max_abs = INFINITY;
      m.num[lane] = INFINITY;
      return;
    }
    const double d = std::fabs(a - ref);
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

// The actual values of a tensor as double: fp32 and fp64 loaded four at a time below.
struct F32Values {
  const float* p;
  double operator()(int64_t i) const { return p[i]; }
};
struct F64Values {
  const double* p;
  double operator()(int64_t i) const { return p[i]; }
};

// Tests: the two-lane loop on a machine that has AVX2 (set_portable_measure()).
std::atomic<bool> g_portable_only{false};

// W doubles, W int64 and W floats, as GCC and Clang vector extensions.
template <int W>
struct Vec;
template <>
struct Vec<2> {
  typedef double V __attribute__((vector_size(16)));
  typedef int64_t Bits __attribute__((vector_size(16)));
  typedef float F __attribute__((vector_size(8)));
};
template <>
struct Vec<4> {
  typedef double V __attribute__((vector_size(32)));
  typedef int64_t Bits __attribute__((vector_size(32)));
  typedef float F __attribute__((vector_size(16)));
};

// Elements [i, i + 4 * n) of a block added to `out`'s four lanes with vectors of W doubles (GCC
// and Clang vector extensions): lane l takes elements i + l, i + l + 4, ... in order, whatever W,
// so the sums have the same bits as measure_block_exact()'s. Branch-free: NaN shows in the sums.
// The largest |Δ| of these elements goes to `span_max` (out.max_abs is left to the caller).
template <int W, typename Load>
__attribute__((always_inline)) inline void lanes_loop(const Load& load, const double* e, int64_t i,
                                                      int64_t n, Partial& out, double& span_max) {
  using V = typename Vec<W>::V;
  using VBits = typename Vec<W>::Bits;
  constexpr int kRegs = 4 / W;
  VBits magnitude;
  for (int l = 0; l < W; ++l) magnitude[l] = INT64_MAX;
  V num[kRegs], den[kRegs], mx[kRegs], rmx[kRegs];
  for (int r = 0; r < kRegs; ++r) {
    mx[r] = rmx[r] = V{} * 0.0;
    for (int l = 0; l < W; ++l) num[r][l] = out.num[r * W + l], den[r][l] = out.den[r * W + l];
  }
  for (int64_t k = 0; k < n; ++k, i += 4)
    for (int r = 0; r < kRegs; ++r) {
      const int64_t j = i + r * W;
      V ref, a;
      std::memcpy(&ref, e + j, sizeof(V));
      if constexpr (std::is_same_v<Load, F32Values>) {
        typename Vec<W>::F f;
        std::memcpy(&f, load.p + j, sizeof(f));
        a = __builtin_convertvector(f, V);
      } else if constexpr (std::is_same_v<Load, F64Values>) {
        std::memcpy(&a, load.p + j, sizeof(V));
      } else {
        for (int l = 0; l < W; ++l) a[l] = load(j + l);
      }
      // |x| clears the sign bit; max(m, x) is `m < x ? x : m` per lane.
      const V d = reinterpret_cast<V>(reinterpret_cast<VBits>(a - ref) & magnitude);
      const V r_abs = reinterpret_cast<V>(reinterpret_cast<VBits>(ref) & magnitude);
      num[r] += d * d;
      den[r] += ref * ref;
      const VBits more = mx[r] < d, ref_more = rmx[r] < r_abs;
      mx[r] = reinterpret_cast<V>((reinterpret_cast<VBits>(d) & more) |
                                  (reinterpret_cast<VBits>(mx[r]) & ~more));
      rmx[r] = reinterpret_cast<V>((reinterpret_cast<VBits>(r_abs) & ref_more) |
                                   (reinterpret_cast<VBits>(rmx[r]) & ~ref_more));
    }
  for (int r = 0; r < kRegs; ++r)
    for (int l = 0; l < W; ++l) {
      out.num[r * W + l] = num[r][l];
      out.den[r * W + l] = den[r][l];
      span_max = span_max < mx[r][l] ? mx[r][l] : span_max;
      out.ref_max_abs = out.ref_max_abs < rmx[r][l] ? rmx[r][l] : out.ref_max_abs;
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// AVX2 where the CPU has it (no FMA: `num += d * d` stays a multiply and an add, so the bits are
// those of the two-lane loop).
template <typename Load>
__attribute__((target("avx2"))) void lanes_loop_avx2(const Load& load, const double* e, int64_t i,
                                                     int64_t n, Partial& out, double& span_max) {
  lanes_loop<4>(load, e, i, n, out, span_max);
}
bool have_avx2() {
  static const bool yes = [] {
    __builtin_cpu_init();  // (needed where this runs before the runtime's own initializer)
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return yes && !g_portable_only.load(std::memory_order_relaxed);
}
#endif

// Elements per span of a block whose largest |Δ| is tracked: locate() looks for the largest |Δ|
// of a block in the first span that holds it, not in the whole block. A multiple of 4, so the
// spans continue the block's four lanes.
constexpr int64_t kLocateSpan = 1024;

// The same block without branches: the same four lanes in the same order, so the same sums; the
// largest |Δ| is located afterwards, only in the block (and span) that holds it. Where anything
// is not finite (an unwritten NaN, an overflow) the block is measured element by element
// instead, which gives it the meaning measure_block_exact() defines.
template <typename Load>
Partial measure_block(const Load& load, const double* e, int64_t begin, int64_t end) {
  Partial m;
  if (end <= begin) return m;
  const int64_t quads = (end - begin) / 4;
  void (*lanes)(const Load&, const double*, int64_t, int64_t, Partial&,
                double&) = [](const Load& l, const double* x, int64_t i, int64_t n, Partial& out,
                              double& span_max) { lanes_loop<2>(l, x, i, n, out, span_max); };
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (have_avx2()) lanes = lanes_loop_avx2<Load>;
#endif
  // Where the first largest |Δ| lies: the first span whose largest exceeds all before it (the
  // first span when every |Δ| is 0).
  m.locate_begin = begin;
  m.locate_end = std::min(end, begin + kLocateSpan);
  for (int64_t at = begin, left = quads; left > 0;) {
    const int64_t n = std::min(left, kLocateSpan / 4);
    double span_max = 0.0;
    lanes(load, e, at, n, m, span_max);
    if (span_max > m.max_abs) {
      m.max_abs = span_max;
      m.locate_begin = at;
      m.locate_end = at + 4 * n;
    }
    at += 4 * n;
    left -= n;
  }
  for (int64_t i = begin + 4 * quads; i < end; ++i) {  // the tail goes to lane 0, as in _exact
    const double ref = e[i];
    const double d = std::fabs(load(i) - ref);
    m.num[0] += d * d;
    m.den[0] += ref * ref;
    if (m.max_abs < d) {
      m.max_abs = d;
      m.locate_begin = i;
      m.locate_end = i + 1;
    }
    m.ref_max_abs = std::max(m.ref_max_abs, std::fabs(ref));
  }
  const double sum = (m.num[0] + m.num[1]) + (m.num[2] + m.num[3]);
  const double ref_sum = (m.den[0] + m.den[1]) + (m.den[2] + m.den[3]);
  if (!std::isfinite(sum) || !std::isfinite(ref_sum))
    return measure_block_exact(load, e, begin, end);
  m.max_index = kLocateLater;
  return m;
}

// The first element of [begin, end) whose |Δ| is max_abs.
template <typename Load>
int64_t locate(const Load& load, const double* e, int64_t begin, int64_t end, double max_abs) {
  for (int64_t i = begin; i < end; ++i)
    if (std::fabs(load(i) - e[i]) == max_abs) return i;
  return begin;  // not reached: max_abs is one of the block's |Δ|
}

// fn(i) for i in [0, n), on every hardware thread when there is more than one block of work.
template <typename Fn>
void for_each_block(int64_t n, Fn&& fn) {
  core::parallel_for(n, n > 1 ? 0 : 1, fn);
}

// One measurement, as blocks: `block` measures [b, e) of it, `locate` finds the first element of
// [b, e) whose |Δ| is the given largest. Typed by its load, so measurements of outputs of
// different dtypes share one threaded pass.
struct Job {
  std::function<Partial(int64_t, int64_t)> block;
  std::function<int64_t(int64_t, int64_t, double)> locate;
  int64_t begin = 0, end = 0;
  int64_t blocks() const { return std::max<int64_t>(1, (end - begin + kBlock - 1) / kBlock); }
};

template <typename Load>
Job make_job(const Load& load, const double* e, int64_t begin, int64_t end) {
  return {
      [load, e](int64_t b, int64_t en) { return measure_block(load, e, b, en); },
      [load, e](int64_t b, int64_t en, double max_abs) { return locate(load, e, b, en, max_abs); },
      begin, end};
}

// The job that measures [begin, end) of a tensor's own elements, converted to double exactly.
Job tensor_job(const cases::Tensor& a, const std::vector<double>& e, int64_t begin, int64_t end) {
  switch (a.dtype()) {
    case cases::DType::kF32:
      return make_job(F32Values{a.as<float>()}, e.data(), begin, end);
    case cases::DType::kBF16: {
      const uint16_t* p = a.as<uint16_t>();
      return make_job([p](int64_t i) { return static_cast<double>(bf16_to_float(p[i])); }, e.data(),
                      begin, end);
    }
    case cases::DType::kF16: {
      const uint16_t* p = a.as<uint16_t>();
      return make_job([p](int64_t i) { return static_cast<double>(fp16_to_float(p[i])); }, e.data(),
                      begin, end);
    }
    case cases::DType::kF64:
      return make_job(F64Values{a.as<double>()}, e.data(), begin, end);
    default:
      return make_job([&a](int64_t i) { return a.get(i); }, e.data(), begin, end);
  }
}

// The blocks of every job in one threaded pass (on every hardware thread when there is more
// than one block), then each job's blocks combined in order: the first largest |Δ| (or first
// non-finite element) wins, as in one pass from the start.
std::vector<Metrics> run_jobs(const std::vector<Job>& jobs) {
  std::vector<int64_t> first(jobs.size() + 1, 0);  // job j's blocks: [first[j], first[j + 1])
  for (size_t j = 0; j < jobs.size(); ++j) first[j + 1] = first[j] + jobs[j].blocks();
  std::vector<Partial> parts(static_cast<size_t>(first.back()));
  std::vector<size_t> owner(parts.size());
  for (size_t j = 0; j < jobs.size(); ++j)
    for (int64_t b = first[j]; b < first[j + 1]; ++b) owner[b] = j;
  auto range = [&](size_t j, int64_t b) {
    const Job& job = jobs[j];
    const int64_t at = job.begin + (b - first[j]) * kBlock;
    return std::pair<int64_t, int64_t>{at, std::min(job.end, at + kBlock)};
  };
  for_each_block(static_cast<int64_t>(parts.size()), [&](int64_t b) {
    const auto [begin, end] = range(owner[b], b);
    parts[b] = jobs[owner[b]].block(begin, end);
  });
  std::vector<Metrics> out(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    Metrics& m = out[j];
    Partial all;
    int64_t winner = -1;
    for (int64_t b = first[j]; b < first[j + 1]; ++b) {
      const Partial& p = parts[b];
      for (int l = 0; l < 4; ++l) all.num[l] += p.num[l], all.den[l] += p.den[l];
      m.ref_max_abs = std::max(m.ref_max_abs, p.ref_max_abs);
      m.non_finite += p.non_finite;
      if (p.max_index != -1 && (p.max_abs > m.max_abs || winner < 0)) {
        m.max_abs = p.max_abs;
        m.max_index = p.max_index;
        winner = b;
      }
    }
    if (m.max_index == kLocateLater)
      m.max_index = jobs[j].locate(parts[winner].locate_begin, parts[winner].locate_end, m.max_abs);
    const double num = (all.num[0] + all.num[1]) + (all.num[2] + all.num[3]);
    const double den = (all.den[0] + all.den[1]) + (all.den[2] + all.den[3]);
    m.count = jobs[j].end - jobs[j].begin;
    m.rel_rms = den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
    m.ref_rms = m.count > 0 ? std::sqrt(den / static_cast<double>(m.count)) : 0.0;
    m.nmse = m.rel_rms * m.rel_rms;
  }
  return out;
}

}  // namespace

void set_portable_measure(bool portable) { g_portable_only = portable; }

Metrics measure(const std::vector<double>& a, const std::vector<double>& e, int64_t begin,
                int64_t end) {
  return run_jobs({make_job(F64Values{a.data()}, e.data(), begin, end)})[0];
}

Metrics measure(const cases::Tensor& a, const std::vector<double>& e, int64_t begin, int64_t end) {
  return run_jobs({tensor_job(a, e, begin, end)})[0];
}

std::vector<Metrics> measure_each(const std::vector<MeasureRequest>& requests) {
  std::vector<Job> jobs;
  jobs.reserve(requests.size());
  for (const MeasureRequest& r : requests)
    jobs.push_back(tensor_job(*r.actual, *r.expected, r.begin, r.end));
  return run_jobs(jobs);
}

namespace {
// One pass over [begin, end): `load(i)` is element i as double.
template <typename Load>
ErrorSigns count_signs(const Load& load, const double* e, int64_t begin, int64_t end, int64_t row) {
  ErrorSigns s;
  row = std::max<int64_t>(1, row);
  for (int64_t r0 = begin; r0 < end;) {
    const int64_t r1 = std::min(end, (r0 / row + 1) * row);  // the rest of r0's row
    int64_t toward = 0, away = 0, up = 0, down = 0;
    for (int64_t i = r0; i < r1; ++i) {
      const double ref = e[i], d = load(i) - ref;  // NaN: every comparison false
      up += d > 0;
      down += d < 0;
      toward += (d < 0 && ref > 0) || (d > 0 && ref < 0);
      away += (d > 0 && ref > 0) || (d < 0 && ref < 0);
    }
    s.toward_zero += toward;
    s.away_from_zero += away;
    s.up += up;
    s.down += down;
    s.zero_sq += (toward - away) * (toward - away);
    s.up_sq += (up - down) * (up - down);
    s.rows += up + down > 0;
    r0 = r1;
  }
  return s;
}
}  // namespace

ErrorSigns error_signs(const cases::Tensor& a, const std::vector<double>& e, int64_t begin,
                       int64_t end, int64_t row) {
  const uint16_t* h = a.as<uint16_t>();
  switch (a.dtype()) {
    case cases::DType::kBF16:
      return count_signs([h](int64_t i) { return static_cast<double>(bf16_to_float(h[i])); },
                         e.data(), begin, end, row);
    case cases::DType::kF16:
      return count_signs([h](int64_t i) { return static_cast<double>(fp16_to_float(h[i])); },
                         e.data(), begin, end, row);
    case cases::DType::kF32:
      return count_signs(F32Values{a.as<float>()}, e.data(), begin, end, row);
    default:
      return count_signs([&a](int64_t i) { return a.get(i); }, e.data(), begin, end, row);
  }
}

ErrorSigns error_signs(const std::vector<double>& a, const std::vector<double>& e, int64_t begin,
                       int64_t end, int64_t row) {
  return count_signs(F64Values{a.data()}, e.data(), begin, end, row);
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
