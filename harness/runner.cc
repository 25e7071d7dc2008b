// Running and judging cases.
#include "harness/runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "cases/generate.h"
#include "harness/call_plan.h"
#include "harness/limits.h"
#include "harness/op_names.h"
#include "harness/probes.h"

namespace deltacheck::harness {
namespace {

constexpr size_t kGuardBytes = 1024;
constexpr uint8_t kGuardPattern = 0x5a;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

CaseResult base_result(const PreparedCase& pc, const std::string& backend) {
  CaseResult r;
  r.case_id = pc.c.id();
  r.op = pc.c.op();
  r.backend = backend;
  r.seq_lengths = operation_for(pc.c).sequence_lengths(pc.c);
  return r;
}

CaseResult with_verdict(CaseResult r, Verdict v, std::string message) {
  r.verdict = v;
  r.message = std::move(message);
  return r;
}

bool in_ranges(const std::vector<ElementRange>& rs, int64_t i) {
  for (const ElementRange& r : rs)
    if (i >= r.begin && i < r.end) return true;
  return false;
}

// Output integrity before any number is compared: guard bands, then unwritten elements (outside
// the ranges the operation does not care about), then elements that must not change.
// `measured` holds outputs already measured: one with no non-finite element holds no poison
// either (floating-point poison is a NaN) and is not scanned again.
std::string integrity_problem(const PreparedCase& pc, const cases::TensorMap& outputs,
                              const std::map<std::string, Metrics>& measured = {}) {
  for (const OutputSpec& spec : pc.outputs) {
    const cases::Tensor* t = outputs.find(spec.name);
    if (!t) return fmt::format("output '{}' missing", spec.name);
    if (!t->guards_intact(kGuardPattern))
      return fmt::format("wrote outside output '{}' (guard band of {} bytes changed)", t->name(),
                         kGuardBytes);
    int64_t first = -1;
    const auto m = measured.find(spec.name);
    const bool all_finite = m != measured.end() && m->second.non_finite == 0;
    if (!all_finite && t->count_poisoned(&first) > 0) {
      int64_t n = 0;
      first = -1;
      for (int64_t i = 0; i < t->numel(); ++i)
        if (t->is_poisoned(i) && !in_ranges(spec.dont_care, i)) {
          if (n++ == 0) first = i;
        }
      if (n > 0)
        return fmt::format("left {} of {} elements of '{}' unwritten (first at index {})", n,
                           t->numel(), t->name(), first);
    }
    const std::vector<double>& e = pc.expected.at(spec.name);
    for (const ElementRange& r : spec.must_be_unchanged)
      for (int64_t i = r.begin; i < r.end; ++i)
        if (!(t->get(i) == e[i] || (std::isnan(t->get(i)) && std::isnan(e[i]))))
          return fmt::format("changed '{}' at index {}: {} must stay bit-identical", spec.name, i,
                             r.what);
  }
  return "";
}

bool same_bits(double a, double e) { return a == e || (std::isnan(a) && std::isnan(e)); }

// Bit-exact comparison of one output: every element must equal its expectation.
TensorReport judge_exact(const PreparedCase& pc, const OutputSpec& spec,
                         const std::vector<double>& actual, const std::vector<double>& expected,
                         std::vector<bool>& seq_bad) {
  TensorReport tr;
  tr.name = spec.name;
  tr.dtype = cases::dtype_name(spec.dtype);
  tr.exact = true;
  const int64_t n = static_cast<int64_t>(actual.size());
  tr.metrics.count = n;
  for (int64_t i = 0; i < n; ++i)
    if (!same_bits(actual[i], expected[i])) {
      if (tr.mismatches++ == 0) tr.metrics.max_index = i;
    }
  tr.ok = tr.mismatches == 0;
  tr.metrics.rel_rms = n > 0 ? static_cast<double>(tr.mismatches) / n : 0.0;
  tr.metrics.max_abs = tr.ok ? 0.0 : 1.0;
  tr.threshold = {0.0, 0.0, 0.0};
  for (const SeqSlice& s : operation_for(pc.c).slices(pc.c, spec.name)) {
    SeqReport sr;
    sr.seq = s.seq;
    sr.metrics.count = s.end - s.begin;
    for (int64_t i = s.begin; i < s.end; ++i)
      if (!same_bits(actual[i], expected[i])) {
        if (sr.ok && s.per_token > 0) sr.first_bad_token = (i - s.begin) / s.per_token;
        sr.ok = false;
      }
    if (!sr.ok && s.seq < static_cast<int64_t>(seq_bad.size())) seq_bad[s.seq] = true;
    tr.seqs.push_back(sr);
  }
  return tr;
}

}  // namespace

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kPass:
      return "pass";
    case Verdict::kFail:
      return "fail";
    case Verdict::kLeak:
      return "leak";
    case Verdict::kError:
      return "error";
    case Verdict::kUnsupported:
      return "unsupported";
    case Verdict::kSkipped:
      return "skipped";
  }
  return "?";
}

Verdict verdict_from_name(const std::string& s) {
  for (Verdict v : {Verdict::kPass, Verdict::kFail, Verdict::kLeak, Verdict::kError,
                    Verdict::kUnsupported, Verdict::kSkipped})
    if (s == verdict_name(v)) return v;
  throw std::invalid_argument("unknown verdict '" + s + "'");
}

bool is_failure(Verdict v) {
  return v == Verdict::kFail || v == Verdict::kLeak || v == Verdict::kError;
}

PreparedCase prepare(const cases::Case& c, const cases::GenOptions& options) {
  const Operation& op = operation_for(c);
  PreparedCase pc{c, cases::generate_inputs(c, options), {}, {}, op.outputs(c)};
  pc.expected = op.oracle(c, pc.inputs);
  pc.baselines = op.baselines(c, pc.inputs, pc.precision);
  measure_baselines(pc);
  return pc;
}

namespace {
// The worst of the baselines on elements [begin, end) of one output.
BaselineError worst_error(const PreparedCase& pc, const std::string& output, int64_t begin,
                          int64_t end) {
  BaselineError w;
  const std::vector<double>& e = pc.expected.at(output);
  for (const Baseline& b : pc.baselines) {
    const Metrics m = measure(b.values.at(output), e, begin, end);
    // The largest max |Δ| (and where) over all baselines, the rest from the largest rel_rms.
    const bool larger_abs = w.name.empty() || m.max_abs > w.metrics.max_abs;
    const double max_abs = larger_abs ? m.max_abs : w.metrics.max_abs;
    const int64_t at = larger_abs ? m.max_index : w.metrics.max_index;
    if (w.name.empty() || m.rel_rms > w.metrics.rel_rms) {
      w.metrics = m;
      w.name = b.name;
    }
    w.metrics.max_abs = max_abs;
    w.metrics.max_index = at;
  }
  return w;
}
}  // namespace

void measure_baselines(PreparedCase& pc) {
  const Operation& op = operation_for(pc.c);
  pc.baseline_errors.clear();
  if (op.exact(pc.c) || pc.baselines.empty()) return;
  for (const OutputSpec& spec : pc.outputs) {
    std::vector<BaselineError>& m = pc.baseline_errors[spec.name];
    m.push_back(
        worst_error(pc, spec.name, 0, static_cast<int64_t>(pc.expected.at(spec.name).size())));
    for (const SeqSlice& s : op.slices(pc.c, spec.name))
      m.push_back(worst_error(pc, spec.name, s.begin, s.end));
  }
}

Values worst_baseline(const PreparedCase& pc) {
  Values out;
  for (const auto& [name, errors] : pc.baseline_errors)
    for (const Baseline& b : pc.baselines)
      if (!errors.empty() && b.name == errors[0].name) out[name] = b.values.at(name);
  return out;
}

cases::TensorMap allocate_outputs(const std::vector<OutputSpec>& specs) {
  cases::TensorMap out;
  for (const OutputSpec& s : specs) {
    cases::Tensor& t = out.add(
        cases::Tensor(s.name, s.dtype, s.shape, kGuardBytes, cases::Tensor::Init::kUnspecified));
    t.fill_guards(kGuardPattern);
    t.poison();
  }
  return out;
}

CaseResult judge(const PreparedCase& pc, const cases::TensorMap& outputs,
                 const std::string& backend_name, bool allow_degenerate) {
  CaseResult r = base_result(pc, backend_name);
  const Operation& op = operation_for(pc.c);
  // Outputs compared with a tolerance are measured first, on their typed elements, all in one
  // threaded pass; one without a NaN or infinity holds no poison either.
  std::map<std::string, Metrics> measured;
  if (!op.exact(pc.c)) {
    std::vector<std::string> names;
    std::vector<MeasureRequest> requests;
    for (const OutputSpec& spec : pc.outputs) {
      const cases::Tensor* t = outputs.find(spec.name);
      if (!t || t->shape() != spec.shape || t->dtype() != spec.dtype ||
          !cases::is_floating(spec.dtype) || !spec.dont_care.empty())
        continue;
      names.push_back(spec.name);
      requests.push_back({t, &pc.expected.at(spec.name), 0, t->numel()});
    }
    const std::vector<Metrics> metrics = measure_each(requests);  // all outputs in one pass
    for (size_t i = 0; i < names.size(); ++i) measured[names[i]] = metrics[i];
  }
  if (std::string problem = integrity_problem(pc, outputs, measured); !problem.empty())
    return with_verdict(
        std::move(r), problem.rfind("changed", 0) == 0 ? Verdict::kFail : Verdict::kError, problem);

  const int64_t n = static_cast<int64_t>(r.seq_lengths.size());
  std::vector<bool> seq_bad(static_cast<size_t>(n), false);
  bool any_bad = false, all_zero = true;
  std::string first_problem;
  for (const OutputSpec& spec : pc.outputs) {
    const cases::Tensor* t = outputs.find(spec.name);
    if (!t || t->shape() != spec.shape || t->dtype() != spec.dtype)
      return with_verdict(std::move(r), Verdict::kError,
                          fmt::format("output '{}' missing or malformed", spec.name));
    const std::vector<double>& expected = pc.expected.at(spec.name);
    // The output as double, made only where needed (exact comparison, don't-care ranges, a
    // failure to locate): a passing case is measured on the typed output in one pass.
    std::vector<double> actual;
    bool have_actual = false;
    auto materialize = [&] {
      if (have_actual) return;
      actual = t->to_double();
      for (const ElementRange& dc : spec.dont_care)  // not compared: take the expectation
        for (int64_t i = dc.begin; i < dc.end; ++i) actual[i] = expected[i];
      have_actual = true;
    };
    if (!spec.dont_care.empty()) materialize();
    auto measure_actual = [&](int64_t begin, int64_t end) {
      return have_actual ? measure(actual, expected, begin, end)
                         : measure(*t, expected, begin, end);
    };
    if (op.exact(pc.c)) {
      materialize();
      all_zero = false;  // a mask of zeros is a meaningful answer
      TensorReport tr = judge_exact(pc, spec, actual, expected, seq_bad);
      if (!tr.ok && first_problem.empty()) {
        const int64_t i = tr.metrics.max_index;
        first_problem =
            fmt::format("{} of {} elements of '{}' differ; first at {}: expected {} got {}",
                        tr.mismatches, tr.metrics.count, tr.name,
                        op.describe_element(pc.c, pc.inputs, tr.name, i), expected[i], actual[i]);
      }
      any_bad = any_bad || !tr.ok;
      r.tensors.push_back(std::move(tr));
      continue;
    }
    for (size_t i = 0; all_zero && i < expected.size(); ++i) all_zero = expected[i] == 0.0;

    TensorReport tr;
    tr.name = spec.name;
    tr.dtype = cases::dtype_name(spec.dtype);
    const int64_t numel = t->numel();
    const auto cached = pc.baseline_errors.find(spec.name);
    const std::vector<BaselineError>* base_m =
        cached == pc.baseline_errors.end() ? nullptr : &cached->second;
    const std::vector<SeqSlice> slices = op.slices(pc.c, spec.name);
    const auto pre = measured.find(spec.name);
    tr.metrics = pre != measured.end() ? pre->second : measure_actual(0, numel);
    const BaselineError whole_base = base_m ? (*base_m)[0] : worst_error(pc, spec.name, 0, numel);
    tr.baseline = whole_base.metrics;
    tr.baseline_name = whole_base.name;
    // TF32 operands have fp16's 10 mantissa bits: a declared TF32 backend's fp32 tensors take
    // fp16's ceiling (their floors stay fp32's, the storage dtype's).
    const cases::DType computed = spec.precision.value_or(spec.dtype);
    const bool tf32 = pc.precision == MatmulPrecision::kTF32 && computed == cases::DType::kF32;
    tr.threshold =
        threshold(tf32 ? cases::DType::kF16 : computed, tr.baseline.rel_rms, tr.baseline.max_abs,
                  tr.metrics.ref_max_abs, spec.ceiling_factor, spec.dtype);
    tr.ok = within(tr.threshold, tr.metrics.rel_rms, tr.metrics.max_abs, tr.metrics.non_finite);
    if (tr.metrics.max_abs > tr.threshold.resolution)
      r.margin = std::max({r.margin, tr.metrics.rel_rms / tr.threshold.rel_rms,
                           tr.metrics.max_abs / tr.threshold.max_abs});
    for (size_t si = 0; si < slices.size(); ++si) {
      const SeqSlice& s = slices[si];
      SeqReport sr;
      sr.seq = s.seq;
      sr.length = r.seq_lengths[s.seq];
      if (s.end == s.begin) {
        tr.seqs.push_back(sr);
        continue;
      }
      // A sequence spanning the whole tensor has the tensor's metrics (no second pass).
      const bool whole = s.begin == 0 && s.end == numel;
      sr.metrics = whole ? tr.metrics : measure_actual(s.begin, s.end);
      const Metrics b = whole    ? tr.baseline
                        : base_m ? (*base_m)[si + 1].metrics
                                 : worst_error(pc, spec.name, s.begin, s.end).metrics;
      sr.threshold = sequence_threshold(
          spec.dtype, b.rel_rms, b.max_abs,
          {sr.metrics.ref_max_abs, sr.metrics.ref_rms, tr.metrics.ref_max_abs, tr.metrics.ref_rms},
          tr.threshold);
      sr.ok = within(sr.threshold, sr.metrics.rel_rms, sr.metrics.max_abs, sr.metrics.non_finite);
      if (!sr.ok) {
        materialize();
        sr.first_bad_token =
            first_token_over(actual, expected, s.begin, s.end, s.per_token, sr.threshold.max_abs);
        seq_bad[s.seq] = true;
      }
      tr.ok = tr.ok && sr.ok;
      if (sr.metrics.max_abs > sr.threshold.resolution)
        r.margin = std::max({r.margin, sr.metrics.rel_rms / sr.threshold.rel_rms,
                             sr.metrics.max_abs / sr.threshold.max_abs});
      tr.seqs.push_back(sr);
    }
    // Token errors feed the failure plots: computed for tensors that failed only.
    if (!tr.ok && (spec.name == "o" || !tr.seqs.empty())) {
      materialize();
      const auto& sl = slices;
      if (!sl.empty() && sl.front().per_token > 0)
        tr.token_error = token_errors(actual, expected, 0, numel, sl.front().per_token);
      // Per head too where the output is [B, T, heads, D] and wrong (the report plots it).
      const auto& sh = spec.shape;
      if (!tr.ok && sh.size() == 4 && sh[2] > 1 && !sl.empty() &&
          sl.front().per_token == sh[2] * sh[3])
        tr.head_token_error = head_token_errors(actual, expected, sl.front().per_token, sh[2]);
    }
    const double ratio = tr.threshold.rel_rms > 0 ? tr.metrics.rel_rms / tr.threshold.rel_rms : 0;
    const double worst = r.worst_threshold > 0 ? r.worst_rel_rms / r.worst_threshold : -1;
    if (r.worst_tensor.empty() || ratio > worst) {
      r.worst_tensor = tr.name;
      r.worst_rel_rms = tr.metrics.rel_rms;
      r.worst_threshold = tr.threshold.rel_rms;
    }
    if (!tr.ok && first_problem.empty()) {
      if (tr.metrics.non_finite > 0)
        first_problem = fmt::format("{} non-finite values in '{}' (first at index {})",
                                    tr.metrics.non_finite, tr.name, tr.metrics.max_index);
      else if (tr.metrics.rel_rms > tr.threshold.rel_rms)
        first_problem = fmt::format("rel_rms {:.1e} > {:.1e} in {}", tr.metrics.rel_rms,
                                    tr.threshold.rel_rms, tr.name);
      else if (tr.metrics.max_abs > tr.threshold.max_abs)
        first_problem = fmt::format("max|Δ| {:.1e} > {:.1e} in {}", tr.metrics.max_abs,
                                    tr.threshold.max_abs, tr.name);
      else
        first_problem = fmt::format("sequence-level errors in {}", tr.name);
    }
    any_bad = any_bad || !tr.ok;
    r.tensors.push_back(std::move(tr));
  }
  if (all_zero && !pc.outputs.empty() && !allow_degenerate)
    return with_verdict(std::move(r), Verdict::kError,
                        "degenerate expectation: every expected output is zero, the case cannot "
                        "tell a right implementation from one that writes zeros");
  if (!any_bad) return with_verdict(std::move(r), Verdict::kPass, "");

  // Where does the error start? The first bad sequence, its first bad token and max |Δ|.
  int64_t first_bad = -1;
  for (int64_t s = 0; s < n; ++s)
    if (seq_bad[s]) {
      first_bad = s;
      break;
    }
  std::string where;
  if (first_bad >= 0) {
    for (const TensorReport& tr : r.tensors) {
      const SeqReport& sr = tr.seqs[first_bad];
      if (sr.ok) continue;
      r.leak_seq = first_bad;
      r.leak_token = sr.first_bad_token;
      r.leak_max_abs = sr.metrics.max_abs;
      where = sr.first_bad_token >= 0
                  ? fmt::format("seq {} from token {}", first_bad, sr.first_bad_token)
                  : fmt::format("seq {} {}", first_bad, tr.name);
      break;
    }
  }
  // Leak: the error is confined to sequences after the first (run_case then confirms that the
  // first wrong sequence is right when run alone).
  if (n >= 2 && first_bad > 0) {
    r.verdict = Verdict::kLeak;
    r.message = fmt::format("{}, max|Δ| {:.2e} ({})", where, r.leak_max_abs, first_problem);
    return r;
  }
  r.leak_seq = -1;
  r.leak_token = -1;
  return with_verdict(std::move(r), Verdict::kFail,
                      where.empty() ? first_problem : first_problem + " (" + where + ")");
}

namespace {

// A prepared case whose baselines include `precision`'s (a TF32 backend on fp32 activations).
PreparedCase with_precision(const PreparedCase& pc, MatmulPrecision precision) {
  PreparedCase out = pc;
  out.precision = precision;
  out.baselines = operation_for(pc.c).baselines(pc.c, pc.inputs, precision);
  measure_baselines(out);
  return out;
}

bool has_fp32_activations(const PreparedCase& pc) {
  for (const OutputSpec& s : pc.outputs)
    if (s.precision.value_or(s.dtype) != cases::DType::kF32) return false;
  return !pc.outputs.empty();
}

// The first sequence judged wrong in any tensor, or -1.
int64_t first_bad_sequence(const CaseResult& r) {
  int64_t first = -1;
  for (const TensorReport& t : r.tensors)
    for (const SeqReport& s : t.seqs)
      if (!s.ok && (first < 0 || s.seq < first)) first = s.seq;
  return first;
}

}  // namespace

CaseResult run_case(const PreparedCase& prepared, Backend& backend, bool probes,
                    const FailureCallback& on_failure) {
  const auto t0 = std::chrono::steady_clock::now();
  const MatmulPrecision precision = backend.matmul_precision();
  // A backend that declares TF32 matmuls is judged against the TF32 baseline on fp32 cases.
  std::optional<PreparedCase> tf32;
  if (precision != prepared.precision && !operation_for(prepared.c).exact(prepared.c) &&
      has_fp32_activations(prepared) && backend.supports(prepared.c).ok)
    tf32 = with_precision(prepared, precision);
  const PreparedCase& pc = tf32 ? *tf32 : prepared;
  CaseResult r = base_result(pc, backend.name());
  r.precision = matmul_precision_name(precision);
  const Support s = backend.supports(pc.c);
  if (!s.ok) return with_verdict(std::move(r), Verdict::kUnsupported, s.reason);
  cases::TensorMap outputs = allocate_outputs(pc.outputs);
  Status st;
  const auto tb = std::chrono::steady_clock::now();
  try {
    st = execute(backend, pc.c, pc.inputs, outputs);
  } catch (const std::exception& e) {
    r.seconds_backend = seconds_since(tb);
    return with_verdict(std::move(r), Verdict::kError, std::string("threw: ") + e.what());
  } catch (...) {
    return with_verdict(std::move(r), Verdict::kError, "threw a non-standard exception");
  }
  const double backend_seconds = seconds_since(tb);
  if (!st.ok()) {
    r.seconds_backend = backend_seconds;
    const Verdict v =
        st.code() == StatusCode::kUnsupported ? Verdict::kUnsupported : Verdict::kError;
    return with_verdict(std::move(r), v, st.message());
  }
  r = judge(pc, outputs, backend.name());
  r.precision = matmul_precision_name(precision);
  r.seconds_backend = backend_seconds;
  if (r.verdict == Verdict::kLeak || r.verdict == Verdict::kFail) confirm_leak(pc, backend, r);
  if (r.verdict == Verdict::kFail && precision == MatmulPrecision::kDefault &&
      has_fp32_activations(pc) && !operation_for(pc.c).exact(pc.c)) {
    // An undeclared TF32 kernel: its errors fit the TF32 baseline's tolerance.
    // Its errors fit the TF32 baseline's tolerance and are of the TF32 baseline's size (a
    // quarter of it or more: fp32 slips far below it are not TF32's doing).
    const PreparedCase as_tf32 = with_precision(pc, MatmulPrecision::kTF32);
    const CaseResult t = judge(as_tf32, outputs, backend.name());
    double like_tf32 = 0;
    for (const TensorReport& tr : t.tensors)
      if (tr.baseline.rel_rms > 0)
        like_tf32 = std::max(like_tf32, tr.metrics.rel_rms / tr.baseline.rel_rms);
    if (t.verdict == Verdict::kPass && like_tf32 >= 0.25)
      r.message +=
          "; the errors are of TF32 size: the kernel likely runs fp32 matmuls in TF32 "
          "(declare it with --matmul-precision tf32 if that is intended)";
  }
  if (probes && (r.verdict == Verdict::kPass || r.verdict == Verdict::kFail)) {
    try {
      r.probes = run_probes(pc, backend, outputs, r);
    } catch (const std::exception& e) {
      r.probes.push_back({"probes", Verdict::kError, e.what()});
    }
    merge_probe_verdicts(r);
  } else if (!probes && r.verdict == Verdict::kFail && r.seq_lengths.size() >= 2 &&
             first_bad_sequence(r) == 0) {
    r.message += "; a leak from a later sequence into seq 0 was not ruled out (probes are off)";
  }
  r.seconds_total = seconds_since(t0);
  if (on_failure && is_failure(r.verdict)) on_failure(pc, outputs, r);
  return r;
}

void merge_probe_verdicts(CaseResult& r) {
  // A leak seen by a probe is a leak even where the oracle comparison passed; a probe failure
  // (non-determinism, split differing from one-shot) fails a passing case.
  for (const ProbeReport& p : r.probes) {
    const std::string line = fmt::format("probe {}: {}", p.name, p.detail);
    if (p.verdict == Verdict::kLeak &&
        (r.verdict == Verdict::kPass || r.verdict == Verdict::kFail)) {
      r.message = r.verdict == Verdict::kPass ? line : r.message + "; " + line;
      r.verdict = Verdict::kLeak;
    } else if ((p.verdict == Verdict::kFail || p.verdict == Verdict::kError) &&
               r.verdict == Verdict::kPass) {
      r.verdict = p.verdict;
      r.message = line;
    }
  }
}

PreparedCase prepare_pieces(const PreparedCase& pc, const std::vector<Piece>& pieces) {
  const Operation& op = operation_for(pc.c);
  const cases::Layout& L = pc.c.layout();
  Repacked rp = repack(pc.c, pc.inputs, pieces);
  PreparedCase out{rp.c, std::move(rp.tensors), {}, {}, op.outputs(rp.c)};
  // Expectations of the pieces, cut from the whole case's (pieces start at offset 0 here or the
  // slices would not be the expectation of a fresh sequence).
  auto cut = [&](const Values& v) {
    Values o;
    for (const auto& [name, values] : v) {
      std::vector<double>& dst = o[name];
      for (const Piece& p : pieces) {
        const auto part =
            op.major(name) == TensorMajor::kSequence
                ? row_values(values, L.num_seqs(), p.seq, 1)
                : row_values(values, L.total_tokens(), token_row(L, p.seq, p.offset), p.length);
        dst.insert(dst.end(), part.begin(), part.end());
      }
    }
    return o;
  };
  out.expected = cut(pc.expected);
  for (const Baseline& b : pc.baselines) out.baselines.push_back({b.name, cut(b.values)});
  out.precision = pc.precision;
  measure_baselines(out);
  return out;
}

void confirm_leak(const PreparedCase& pc, Backend& backend, CaseResult& r) {
  if (!operation_for(pc.c).repackable(pc.c)) return;
  const cases::Layout& L = pc.c.layout();
  // A fail whose first wrong sequence is the first of a pack: is it wrong alone too?
  const bool first_of_pack =
      r.verdict == Verdict::kFail && L.num_seqs() >= 2 && first_bad_sequence(r) == 0;
  const int64_t seq = first_of_pack ? 0 : r.leak_seq;
  if (seq < 0 || (r.verdict == Verdict::kFail && !first_of_pack)) return;
  // Run the first wrong sequence by itself: right alone but wrong in the pack is a leak; wrong
  // alone too is a plain failure that merely happens to spare the sequences before it.
  const PreparedCase alone = prepare_pieces(pc, {{seq, 0, L.lengths.at(seq)}});
  cases::TensorMap outputs = allocate_outputs(alone.outputs);
  Verdict v = Verdict::kError;
  std::string why;
  try {
    const Status st = backend.supports(alone.c).ok
                          ? execute(backend, alone.c, alone.inputs, outputs)
                          : Status::Unsupported(backend.supports(alone.c).reason);
    if (st.ok()) {
      const CaseResult a = judge(alone, outputs, backend.name(), true);
      v = a.verdict;
      why = a.message;
    } else {
      why = st.message();
    }
  } catch (const std::exception& e) {
    why = e.what();
  }
  if (first_of_pack) {
    if (v != Verdict::kPass) return;  // wrong by itself: stays a fail (the probes may say more)
    for (const TensorReport& t : r.tensors)
      if (!t.seqs.empty() && !t.seqs[0].ok) {
        r.leak_seq = 0;
        r.leak_token = t.seqs[0].first_bad_token;
        r.leak_max_abs = t.seqs[0].metrics.max_abs;
        break;
      }
    r.verdict = Verdict::kLeak;
    r.message = fmt::format(
        "seq 0 from token {}, max|Δ| {:.2e}: wrong in the pack and right alone, a later "
        "sequence leaks into it ({})",
        r.leak_token, r.leak_max_abs, r.message);
    return;
  }
  if (v == Verdict::kPass) {
    r.message += fmt::format("; seq {} alone passes", r.leak_seq);
    return;
  }
  r.verdict = Verdict::kFail;
  r.message = fmt::format("seq {} is wrong alone too, not a leak: {}", r.leak_seq,
                          why.empty() ? verdict_name(v) : why);
}

std::vector<CaseResult> run_all(const std::vector<cases::Case>& cs,
                                const std::vector<Backend*>& backends, const RunOptions& options,
                                const std::function<void(const CaseResult&)>& on_result) {
  const size_t n = cs.size();
  std::vector<std::vector<CaseResult>> slots(n);
  std::vector<bool> done(n, false);
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<size_t> next{0};

  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) {
      std::vector<CaseResult> rs;
      bool any_supported = false;
      for (Backend* b : backends) any_supported = any_supported || b->supports(cs[i]).ok;
      // --max-memory: a case that would not fit is skipped before anything is allocated.
      std::string too_big;
      try {
        if (any_supported) too_big = memory_refusal(cs[i], options.max_memory_bytes);
      } catch (const std::exception&) {  // prepare() below reports what is wrong with the case
      }
      if (!too_big.empty()) {
        for (Backend* b : backends) {
          CaseResult r;
          r.case_id = cs[i].id();
          r.op = cs[i].op();
          r.backend = b->name();
          r.verdict = Verdict::kSkipped;
          r.message = too_big;
          rs.push_back(std::move(r));
        }
      } else if (!any_supported) {
        for (Backend* b : backends) {
          CaseResult r;
          r.case_id = cs[i].id();
          r.op = cs[i].op();
          r.backend = b->name();
          r.verdict = Verdict::kUnsupported;
          r.message = b->supports(cs[i]).reason;
          rs.push_back(std::move(r));
        }
      } else {
        try {
          const PreparedCase pc = prepare(cs[i]);
          for (Backend* b : backends)
            rs.push_back(run_case(pc, *b, options.probes, options.on_failure));
        } catch (const std::exception& e) {
          for (Backend* b : backends) {
            CaseResult r;
            r.case_id = cs[i].id();
            r.op = cs[i].op();
            r.backend = b->name();
            r.verdict = Verdict::kError;
            r.message = std::string("could not prepare the case: ") + e.what();
            rs.push_back(std::move(r));
          }
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      slots[i] = std::move(rs);
      done[i] = true;
      cv.notify_all();
    }
  };
  std::vector<std::thread> pool;
  for (int j = 1; j < options.jobs; ++j) pool.emplace_back(work);
  // The calling thread works too, and reports results in case order as they complete.
  std::vector<CaseResult> all;
  std::thread reporter([&] {
    for (size_t i = 0; i < n; ++i) {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return done[i]; });
      std::vector<CaseResult> rs = std::move(slots[i]);
      lock.unlock();
      for (CaseResult& r : rs) {
        if (on_result) on_result(r);
        all.push_back(std::move(r));
      }
    }
  });
  work();
  for (auto& t : pool) t.join();
  reporter.join();
  return all;
}

}  // namespace deltacheck::harness
