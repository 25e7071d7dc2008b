// Running and judging cases.
#include "harness/runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <system_error>
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

std::string declined_probes(const CaseResult& r) {
  std::string names;
  for (const ProbeReport& p : r.probes) {
    if (p.verdict != Verdict::kSkipped) return "";
    names += (names.empty() ? "" : ", ") + p.name;
  }
  return names;
}

namespace {

// One of an operation's baselines as a backend: what a correct kernel of that formulation gives
// when the harness drives a multi-call case (cache=chunked, dynamic) through its call plan, each
// call restarting the formulation's chunk grid at its first token, states carried between calls
// as a kernel's outputs carry them.
class BaselineAsBackend final : public Backend {
 public:
  BaselineAsBackend(const Operation& op, const PrecisionProfile& precision, size_t i)
      : op_(op), precision_(precision), i_(i) {}
  std::string name() const override { return "baseline"; }
  std::string description() const override { return "a tolerance baseline, call by call"; }
  Support supports(const cases::Case&) const override { return Support::Yes(); }
  Status run(const cases::Case& c, const cases::TensorMap& inputs,
             cases::TensorMap& outputs) override {
    // A call that holds no token of any sequence (a dynamic case's prefill of one-token
    // sequences): every state comes out as it went in, as from a kernel, and no reference runs.
    if (c.layout().total_tokens() == 0) {
      for (const auto& [out_name, in_name] : op_.carried_states(c)) {
        cases::Tensor& t = outputs.at(out_name);
        const cases::Tensor& from = inputs.at(in_name);
        if (t.numel() != from.numel())
          return Status::Internal("baseline: '" + in_name + "' and '" + out_name + "' differ");
        for (int64_t e = 0; e < t.numel(); ++e) t.set(e, from.get(e));
      }
      return Status::Ok();
    }
    const Baseline b = op_.baseline(c, inputs, precision_, i_);
    for (cases::Tensor& t : outputs.all()) {
      const auto it = b.values.find(t.name());
      if (it == b.values.end() || static_cast<int64_t>(it->second.size()) != t.numel())
        return Status::Internal("baseline '" + b.name + "' has no output '" + t.name() + "'");
      for (int64_t e = 0; e < t.numel(); ++e) t.set(e, it->second[e]);
    }
    return Status::Ok();
  }

 private:
  const Operation& op_;
  PrecisionProfile precision_;
  size_t i_;
};

}  // namespace

std::vector<Baseline> case_baselines(const cases::Case& c, const cases::TensorMap& inputs,
                                     const PrecisionProfile& precision) {
  const Operation& op = operation_for(c);
  std::vector<Baseline> out = op.baselines(c, inputs, precision);
  if (op.exact(c) || call_plan(c).empty()) return out;
  // A multi-call case: each baseline also run in the case's calls (a chunked kernel called in
  // pieces restarts its chunks at every cut; the one-shot baseline does not). The worst of both
  // sets the tolerance, so a multi-call case is never judged tighter than before.
  const size_t n = out.size();
  for (size_t i = 0; i < n; ++i) {
    BaselineAsBackend b(op, precision, i);
    cases::TensorMap outputs = allocate_outputs(op.outputs(c));
    if (const Status st = execute(b, c, inputs, outputs); !st.ok())
      throw std::logic_error("baseline '" + out[i].name + "' in the case's calls: " + st.message());
    Values v;
    for (const cases::Tensor& t : outputs.all()) v[t.name()] = t.to_double();
    out.push_back({out[i].name + ", in the case's calls", std::move(v)});
  }
  return out;
}

PreparedCase prepare(const cases::Case& c, const cases::GenOptions& options,
                     std::shared_ptr<const ExpectationCache> cache, bool defer_store) {
  const Operation& op = operation_for(c);
  PreparedCase pc{c, {}, {}, {}, op.outputs(c)};
  bool computed = false;
  auto compute = [&] {
    computed = true;
    pc.inputs = cases::generate_inputs(c, options);
    pc.expected = op.oracle(c, pc.inputs);
    pc.baselines = case_baselines(c, pc.inputs, pc.precision);
    measure_baselines(pc);
    return ExpectationCache::Prepared{pc.inputs, pc.expected, pc.baseline_errors};
  };
  // The probes key what they cache by the case id alone: only for the case's own inputs.
  if (!cache || !options.sequence_salt.empty()) {
    compute();
    return pc;
  }
  // A hit leaves pc.baselines empty (the cache keeps their errors, not their values):
  // baselines_of() recomputes them where a failure needs them.
  ExpectationCache::Unwritten unwritten;
  ExpectationCache::Prepared p =
      cache->prepared(c, options, pc.precision, compute, defer_store ? &unwritten : nullptr);
  if (!computed) {
    pc.inputs = std::move(p.inputs);
    pc.expected = std::move(p.expected);
    pc.baseline_errors = std::move(p.errors);
  } else if (defer_store) {
    pc.unwritten = std::make_shared<ExpectationCache::Unwritten>(std::move(unwritten));
  }
  pc.cache = std::move(cache);
  return pc;
}

void write_cache_entry(const PreparedCase& pc) {
  if (!pc.unwritten || !pc.cache || pc.unwritten->key.empty()) return;
  ExpectationCache::Unwritten entry = std::move(*pc.unwritten);
  pc.unwritten->key.clear();
  pc.cache->write(std::move(entry));
}

std::vector<Baseline> baselines_of(const PreparedCase& pc) {
  if (!pc.baselines.empty() || pc.baseline_errors.empty()) return pc.baselines;
  return case_baselines(pc.c, pc.inputs, pc.precision);
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
  const std::vector<Baseline> baselines = baselines_of(pc);
  for (const auto& [name, errors] : pc.baseline_errors)
    for (const Baseline& b : baselines)
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

// ---- judge(): integrity -> measure -> locate -> verdict, one function per step. ----

namespace {

// A step's finding that ends the judgement early.
struct Finding {
  Verdict verdict;
  std::string message;
};

// One output under comparison: its spec, what the backend wrote, the expectation, its sequences'
// element ranges and, once measured, why it fails ("" when it passes). The output as double is
// made only where a step needs it element by element and dropped after.
struct Compared {
  const OutputSpec* spec = nullptr;
  const cases::Tensor* t = nullptr;
  const std::vector<double>* expected = nullptr;
  std::vector<SeqSlice> slices;
  std::string problem;

  // The output as double; don't-care elements take the expectation (they are not compared).
  std::vector<double> values() const {
    std::vector<double> actual = t->to_double();
    for (const ElementRange& dc : spec->dont_care)
      for (int64_t i = dc.begin; i < dc.end; ++i) actual[i] = (*expected)[i];
    return actual;
  }
};

bool in_ranges(const std::vector<ElementRange>& rs, int64_t i) {
  for (const ElementRange& r : rs)
    if (i >= r.begin && i < r.end) return true;
  return false;
}

bool same_bits(double a, double e) { return a == e || (std::isnan(a) && std::isnan(e)); }

// Step 2's whole-tensor metrics, taken first: the floating outputs of a case compared with a
// tolerance (no don't-care ranges) measured on their typed elements, all in one threaded pass.
// Integrity uses them too: an output without a NaN or infinity holds no poison either (the poison
// is a NaN) and is not scanned again. Keyed by output name; outputs missing or malformed are left
// out (integrity reports them).
std::map<std::string, Metrics> measure_whole_outputs(const PreparedCase& pc,
                                                     const cases::TensorMap& outputs) {
  std::map<std::string, Metrics> measured;
  if (operation_for(pc.c).exact(pc.c)) return measured;
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
  const std::vector<Metrics> metrics = measure_each(requests);
  for (size_t i = 0; i < names.size(); ++i) measured[names[i]] = metrics[i];
  return measured;
}

// Step 1, integrity, before any number is compared. Per output in order: present, guard bands
// intact, no element left unwritten (poisoned) outside the ranges the operation does not care
// about, the must-be-unchanged ranges bit-identical; then every output of the declared shape and
// dtype. A changed must-be-unchanged element is the verdict fail, any other problem error; none:
// nullopt.
std::optional<Finding> check_integrity(const PreparedCase& pc, const cases::TensorMap& outputs,
                                       const std::map<std::string, Metrics>& measured) {
  for (const OutputSpec& spec : pc.outputs) {
    const cases::Tensor* t = outputs.find(spec.name);
    if (!t) return Finding{Verdict::kError, fmt::format("output '{}' missing", spec.name)};
    if (!t->guards_intact(kGuardPattern))
      return Finding{Verdict::kError,
                     fmt::format("wrote outside output '{}' (guard band of {} bytes changed)",
                                 t->name(), kGuardBytes)};
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
        return Finding{Verdict::kError,
                       fmt::format("left {} of {} elements of '{}' unwritten (first at index {})",
                                   n, t->numel(), t->name(), first)};
    }
    const std::vector<double>& e = pc.expected.at(spec.name);
    for (const ElementRange& r : spec.must_be_unchanged)
      for (int64_t i = r.begin; i < r.end; ++i)
        if (!same_bits(t->get(i), e[i]))
          return Finding{Verdict::kFail,
                         fmt::format("changed '{}' at index {}: {} must stay bit-identical",
                                     spec.name, i, r.what)};
  }
  for (const OutputSpec& spec : pc.outputs) {
    const cases::Tensor* t = outputs.find(spec.name);
    if (t->shape() != spec.shape || t->dtype() != spec.dtype)
      return Finding{Verdict::kError, fmt::format("output '{}' missing or malformed", spec.name)};
  }
  return std::nullopt;
}

// Step 2 for a bit-exact output: every element must equal its expectation; counts the
// mismatches, per tensor and per sequence (with each wrong sequence's first wrong token).
TensorReport measure_exact(const PreparedCase& pc, Compared& c) {
  const std::vector<double> actual = c.values();
  const std::vector<double>& expected = *c.expected;
  TensorReport tr;
  tr.name = c.spec->name;
  tr.dtype = cases::dtype_name(c.spec->dtype);
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
  for (const SeqSlice& s : c.slices) {
    SeqReport sr;
    sr.seq = s.seq;
    sr.metrics.count = s.end - s.begin;
    for (int64_t i = s.begin; i < s.end; ++i)
      if (!same_bits(actual[i], expected[i])) {
        if (sr.ok && s.per_token > 0) sr.first_bad_token = (i - s.begin) / s.per_token;
        sr.ok = false;
      }
    tr.seqs.push_back(sr);
  }
  if (!tr.ok) {
    const int64_t i = tr.metrics.max_index;
    c.problem = fmt::format("{} of {} elements of '{}' differ; first at {}: expected {} got {}",
                            tr.mismatches, tr.metrics.count, tr.name,
                            operation_for(pc.c).describe_element(pc.c, pc.inputs, tr.name, i),
                            expected[i], actual[i]);
  }
  return tr;
}

// Step 2 for an output compared with a tolerance: its error (rel_rms, max |Δ|, non-finite
// elements) whole and per sequence, each against the threshold the baselines' error sets; raises
// r.margin and the worst tensor. `whole` is its metrics when measure_whole_outputs took them.
TensorReport measure_tolerant(const PreparedCase& pc, Compared& c, const Metrics* whole,
                              CaseResult& r) {
  const OutputSpec& spec = *c.spec;
  const std::vector<double>& expected = *c.expected;
  // Don't-care ranges need the output as double (with the expectation in them); any other output
  // is measured on its typed elements (the same bits, compare.h).
  std::vector<double> actual;
  if (!spec.dont_care.empty()) actual = c.values();
  auto measure_actual = [&](int64_t begin, int64_t end) {
    return spec.dont_care.empty() ? measure(*c.t, expected, begin, end)
                                  : measure(actual, expected, begin, end);
  };
  // The sign test of rounding bias on what the backend stored (harness/tolerance.h), in rows of
  // the innermost dimension; bf16 / fp16 outputs only.
  const bool signs = checks_rounding_bias(spec.dtype);
  const int64_t row = spec.shape.empty() ? 1 : spec.shape.back();
  auto bias_of = [&](const Metrics& m, int64_t begin, int64_t end) {
    if (!signs) return RoundingBias{};
    const ErrorSigns es = spec.dont_care.empty() ? error_signs(*c.t, expected, begin, end, row)
                                                 : error_signs(actual, expected, begin, end, row);
    return rounding_bias(spec.dtype, es, m);
  };
  TensorReport tr;
  tr.name = spec.name;
  tr.dtype = cases::dtype_name(spec.dtype);
  const int64_t numel = c.t->numel();
  const auto cached = pc.baseline_errors.find(spec.name);
  const std::vector<BaselineError>* base_m =
      cached == pc.baseline_errors.end() ? nullptr : &cached->second;
  tr.metrics = whole ? *whole : measure_actual(0, numel);
  const BaselineError whole_base = base_m ? (*base_m)[0] : worst_error(pc, spec.name, 0, numel);
  tr.baseline = whole_base.metrics;
  tr.baseline_name = whole_base.name;
  // TF32 operands have fp16's 10 mantissa bits: a declared TF32 backend's fp32 tensors take
  // fp16's ceiling (their floors stay fp32's, the storage dtype's).
  const cases::DType computed = spec.precision.value_or(spec.dtype);
  const bool tf32 = pc.precision.matmul == MatmulPrecision::kTF32 && computed == cases::DType::kF32;
  // autodiff=act: a state rounded to the activation dtype at every token, and every gradient
  // with it, puts a correct backward's errors at 1-2.3x the dtype's ceiling (docs/tolerance.md,
  // "autodiff=act"): a declared one gets four times that ceiling, as layer_grad's eight rounding
  // stages do.
  const double ceiling =
      pc.precision.autodiff_act ? std::max(spec.ceiling_factor, 4.0) : spec.ceiling_factor;
  tr.threshold = threshold(tf32 ? cases::DType::kF16 : computed, tr.baseline.rel_rms,
                           tr.baseline.max_abs, tr.metrics.ref_max_abs, ceiling, spec.dtype);
  tr.ok = within(tr.threshold, tr.metrics.rel_rms, tr.metrics.max_abs, tr.metrics.non_finite);
  tr.bias = bias_of(tr.metrics, 0, numel);
  tr.ok = tr.ok && !tr.bias.biased;
  // A biased output's margin says so (>= 1); a pass's margin stays its tolerances'.
  if (tr.bias.biased) r.margin = std::max(r.margin, bias_margin(tr.bias));
  if (tr.metrics.max_abs > tr.threshold.resolution)
    r.margin = std::max({r.margin, tr.metrics.rel_rms / tr.threshold.rel_rms,
                         tr.metrics.max_abs / tr.threshold.max_abs});
  for (size_t si = 0; si < c.slices.size(); ++si) {
    const SeqSlice& s = c.slices[si];
    SeqReport sr;
    sr.seq = s.seq;
    sr.length = r.seq_lengths[s.seq];
    if (s.end == s.begin) {
      tr.seqs.push_back(sr);
      continue;
    }
    // A sequence spanning the whole tensor has the tensor's metrics (no second pass).
    const bool spans_all = s.begin == 0 && s.end == numel;
    sr.metrics = spans_all ? tr.metrics : measure_actual(s.begin, s.end);
    const Metrics b = spans_all ? tr.baseline
                      : base_m  ? (*base_m)[si + 1].metrics
                                : worst_error(pc, spec.name, s.begin, s.end).metrics;
    sr.threshold = sequence_threshold(
        spec.dtype, b.rel_rms, b.max_abs,
        {sr.metrics.ref_max_abs, sr.metrics.ref_rms, tr.metrics.ref_max_abs, tr.metrics.ref_rms},
        tr.threshold);
    sr.ok = within(sr.threshold, sr.metrics.rel_rms, sr.metrics.max_abs, sr.metrics.non_finite);
    sr.bias = spans_all ? tr.bias : bias_of(sr.metrics, s.begin, s.end);
    sr.ok = sr.ok && !sr.bias.biased;
    if (sr.bias.biased) r.margin = std::max(r.margin, bias_margin(sr.bias));
    tr.ok = tr.ok && sr.ok;
    if (sr.metrics.max_abs > sr.threshold.resolution)
      r.margin = std::max({r.margin, sr.metrics.rel_rms / sr.threshold.rel_rms,
                           sr.metrics.max_abs / sr.threshold.max_abs});
    tr.seqs.push_back(sr);
  }
  const double ratio = tr.threshold.rel_rms > 0 ? tr.metrics.rel_rms / tr.threshold.rel_rms : 0;
  const double worst = r.worst_threshold > 0 ? r.worst_rel_rms / r.worst_threshold : -1;
  if (r.worst_tensor.empty() || ratio > worst) {
    r.worst_tensor = tr.name;
    r.worst_rel_rms = tr.metrics.rel_rms;
    r.worst_threshold = tr.threshold.rel_rms;
  }
  if (tr.ok) return tr;
  if (tr.metrics.non_finite > 0)
    c.problem = fmt::format("{} non-finite values in '{}' (first at index {})",
                            tr.metrics.non_finite, tr.name, tr.metrics.max_index);
  else if (tr.metrics.rel_rms > tr.threshold.rel_rms)
    c.problem = fmt::format("rel_rms {:.1e} > {:.1e} in {}", tr.metrics.rel_rms,
                            tr.threshold.rel_rms, tr.name);
  else if (tr.metrics.max_abs > tr.threshold.max_abs)
    c.problem = fmt::format("max|Δ| {:.1e} > {:.1e} in {}", tr.metrics.max_abs,
                            tr.threshold.max_abs, tr.name);
  // A rounding bias has a line of its own: the tensor's, or else its first biased sequence's.
  std::string bias;
  if (tr.bias.biased) bias = describe_bias(tr.bias, tr.dtype, tr.name);
  for (size_t si = 0; bias.empty() && si < tr.seqs.size(); ++si)
    if (tr.seqs[si].bias.biased)
      bias = describe_bias(tr.seqs[si].bias, tr.dtype,
                           fmt::format("{} of seq {}", tr.name, tr.seqs[si].seq));
  if (!bias.empty()) c.problem = c.problem.empty() ? bias : c.problem + "; " + bias;
  if (c.problem.empty()) c.problem = fmt::format("sequence-level errors in {}", tr.name);
  return tr;
}

// Step 2, measure: every output against its expectation, in the order the operation declares
// them, into r.tensors (bit-exact operations count mismatches; the others measure errors against
// thresholds). Requires a clean integrity step: every output present and well-formed.
std::vector<Compared> measure_outputs(const PreparedCase& pc, const cases::TensorMap& outputs,
                                      const std::map<std::string, Metrics>& whole, CaseResult& r) {
  const Operation& op = operation_for(pc.c);
  std::vector<Compared> cs;
  for (const OutputSpec& spec : pc.outputs) {
    Compared c{&spec, outputs.find(spec.name), &pc.expected.at(spec.name),
               op.slices(pc.c, spec.name), ""};
    if (op.exact(pc.c)) {
      r.tensors.push_back(measure_exact(pc, c));
    } else {
      const auto pre = whole.find(spec.name);
      r.tensors.push_back(measure_tolerant(pc, c, pre == whole.end() ? nullptr : &pre->second, r));
    }
    cs.push_back(std::move(c));
  }
  return cs;
}

// Step 3, locate, inside the outputs that failed a tolerance: each wrong sequence's first token
// whose max |Δ| exceeds its threshold, and the largest |Δ| per token (per head and token too for
// a wrong [B, T, heads, D] output) that the report plots. Bit-exact outputs located their wrong
// tokens while measuring; passing outputs are not touched.
void locate_in_outputs(const std::vector<Compared>& cs, CaseResult& r) {
  for (size_t i = 0; i < cs.size(); ++i) {
    TensorReport& tr = r.tensors[i];
    const Compared& c = cs[i];
    if (tr.ok || tr.exact) continue;
    std::optional<std::vector<double>> actual;
    auto values = [&]() -> const std::vector<double>& {
      if (!actual) actual = c.values();
      return *actual;
    };
    for (size_t si = 0; si < c.slices.size(); ++si) {
      const SeqSlice& s = c.slices[si];
      SeqReport& sr = tr.seqs[si];
      if (!sr.ok)
        sr.first_bad_token = first_token_over(values(), *c.expected, s.begin, s.end, s.per_token,
                                              sr.threshold.max_abs);
    }
    if (c.spec->name != "o" && tr.seqs.empty()) continue;
    const std::vector<SeqSlice>& sl = c.slices;
    if (sl.empty() || sl.front().per_token <= 0) continue;
    tr.token_error = token_errors(values(), *c.expected, 0, c.t->numel(), sl.front().per_token);
    const auto& sh = c.spec->shape;
    if (sh.size() == 4 && sh[2] > 1 && sl.front().per_token == sh[2] * sh[3])
      tr.head_token_error = head_token_errors(values(), *c.expected, sl.front().per_token, sh[2]);
  }
}

// Where the error starts: the first sequence any output judged wrong, its first wrong token and
// max |Δ| (from the first output wrong there), and those in words.
struct Location {
  int64_t first_bad = -1;        // the first wrong sequence
  int64_t seq = -1, token = -1;  // the same, and its first wrong token, from the output wrong there
  double max_abs = 0.0;
  std::string where;  // "seq 2 from token 5", "seq 2 o"; "" when no sequence is wrong
};

// Step 3, locate, across sequences (of a result with a wrong output).
Location locate_first_wrong(const CaseResult& r) {
  const int64_t n = static_cast<int64_t>(r.seq_lengths.size());
  Location at;
  int64_t first_bad = -1;
  for (const TensorReport& tr : r.tensors)
    for (const SeqReport& sr : tr.seqs)
      if (!sr.ok && sr.seq >= 0 && sr.seq < n && (first_bad < 0 || sr.seq < first_bad))
        first_bad = sr.seq;
  at.first_bad = first_bad;
  if (first_bad < 0) return at;
  for (const TensorReport& tr : r.tensors) {
    // Outputs that belong to no sequence (summed weight gradients) have no per-sequence reports.
    if (first_bad >= static_cast<int64_t>(tr.seqs.size())) continue;
    const SeqReport& sr = tr.seqs[first_bad];
    if (sr.ok) continue;
    at.seq = first_bad;
    at.token = sr.first_bad_token;
    at.max_abs = sr.metrics.max_abs;
    at.where = sr.first_bad_token >= 0
                   ? fmt::format("seq {} from token {}", first_bad, sr.first_bad_token)
                   : fmt::format("seq {} {}", first_bad, tr.name);
    break;
  }
  return at;
}

// Step 4, verdict. Error for a degenerate expectation (every expected output zero: the case cannot
// tell a right implementation from one that writes zeros) unless allowed; pass when every output
// is within its threshold; leak when the error starts in a sequence after the first (run_case
// then confirms it by running that sequence alone); fail otherwise. The message is the first
// failing output's problem and where it starts.
CaseResult decide_verdict(const PreparedCase& pc, const std::vector<Compared>& cs, CaseResult r,
                          bool allow_degenerate) {
  bool all_zero = !operation_for(pc.c).exact(pc.c);  // a mask of zeros is a meaningful answer
  for (const Compared& c : cs)
    for (size_t i = 0; all_zero && i < c.expected->size(); ++i) all_zero = (*c.expected)[i] == 0.0;
  if (all_zero && !pc.outputs.empty() && !allow_degenerate)
    return with_verdict(std::move(r), Verdict::kError,
                        "degenerate expectation: every expected output is zero, the case cannot "
                        "tell a right implementation from one that writes zeros");
  std::string first_problem;
  for (const Compared& c : cs)
    if (!c.problem.empty()) {
      first_problem = c.problem;
      break;
    }
  const bool any_bad =
      std::any_of(r.tensors.begin(), r.tensors.end(), [](const TensorReport& t) { return !t.ok; });
  if (!any_bad) return with_verdict(std::move(r), Verdict::kPass, "");

  const Location at = locate_first_wrong(r);
  const Operation& op = operation_for(pc.c);
  if (op.call_mode(pc.c).kind == CallMode::Kind::kDriven) {
    // A scenario's requests are separate runs, not a pack: a wrong one is a fail, named by the
    // request, call and block the operation finds for its first wrong token.
    const std::string why = op.explain_failure(pc.c, at.seq, at.token);
    return with_verdict(std::move(r), Verdict::kFail,
                        why.empty() ? first_problem : first_problem + " (" + why + ")");
  }
  r.leak_seq = at.seq;
  r.leak_token = at.token;
  r.leak_max_abs = at.max_abs;
  if (r.seq_lengths.size() >= 2 && at.first_bad > 0 && operation_for(pc.c).presume_leaks(pc.c)) {
    r.verdict = Verdict::kLeak;
    r.message = fmt::format("{}, max|Δ| {:.2e} ({})", at.where, r.leak_max_abs, first_problem);
    return r;
  }
  r.leak_seq = -1;
  r.leak_token = -1;
  // What the operation can tell about the first wrong token (a tree draft: its parent).
  const std::string why = op.explain_failure(pc.c, at.seq, at.token);
  const std::string where = why.empty() ? at.where : at.where + ": " + why;
  return with_verdict(std::move(r), Verdict::kFail,
                      where.empty() ? first_problem : first_problem + " (" + where + ")");
}

}  // namespace

CaseResult judge(const PreparedCase& pc, const cases::TensorMap& outputs,
                 const std::string& backend_name, bool allow_degenerate) {
  CaseResult r = base_result(pc, backend_name);
  const std::map<std::string, Metrics> whole = measure_whole_outputs(pc, outputs);
  if (const std::optional<Finding> bad = check_integrity(pc, outputs, whole))
    return with_verdict(std::move(r), bad->verdict, bad->message);
  const std::vector<Compared> cs = measure_outputs(pc, outputs, whole, r);
  locate_in_outputs(cs, r);
  return decide_verdict(pc, cs, std::move(r), allow_degenerate);
}

namespace {

// A prepared case whose baselines are those of `precision`, a backend's declared profile.
PreparedCase with_precision(const PreparedCase& pc, const PrecisionProfile& precision) {
  PreparedCase out = pc;
  out.precision = precision;
  auto compute = [&] {
    out.baselines = case_baselines(pc.c, pc.inputs, precision);
    measure_baselines(out);
    return out.baseline_errors;
  };
  out.baselines.clear();
  out.baseline_errors = pc.cache ? pc.cache->errors("errors", pc.c, precision, compute) : compute();
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

// The part of profile `p` that changes the baselines of pc's case: TF32 only on fp32
// activations, the L2 norm's dtype, fp32 operands and autodiff=act only on bf16 / fp16 ones
// (autodiff=act on backward ops only).
PrecisionProfile relevant_profile(PrecisionProfile p, const PreparedCase& pc) {
  if (has_fp32_activations(pc)) {
    p.l2norm_act = false;
    p.operands_fp32 = false;
    p.autodiff_act = false;
  } else {
    p.matmul = MatmulPrecision::kDefault;
  }
  // autodiff=act changes the gradients' baselines only (gdr_grad, layer_grad: the *_grad ops).
  const std::string& op = pc.c.op();
  if (op.size() < 5 || op.compare(op.size() - 5, 5, "_grad") != 0) p.autodiff_act = false;
  return p;
}

// A profile choice a failing kernel may have made without declaring it, and how to declare it.
struct Undeclared {
  PrecisionProfile choice;
  std::string declare;  // the reason line's advice
  // Looked for only in fails up to this margin: TF32's 10 mantissa bits put its errors some
  // 1000x above fp32's threshold; a chunk size or the L2 norm's dtype moves them a few times.
  double max_margin;
};

constexpr double kAutodiffHintMargin = 100.0;

std::vector<Undeclared> undeclared_choices(const PrecisionProfile& declared) {
  std::vector<Undeclared> out;
  PrecisionProfile tf32, chunk, norm, autodiff;
  tf32.matmul = MatmulPrecision::kTF32;
  chunk.chunk = 128;
  norm.l2norm_act = true;
  autodiff.autodiff_act = true;
  if (declared.matmul == MatmulPrecision::kDefault)
    out.push_back({tf32,
                   "the errors are of TF32 size: the kernel likely runs fp32 matmuls in TF32 "
                   "(declare it with --matmul-precision tf32 if that is intended)",
                   std::numeric_limits<double>::infinity()});
  if (declared.chunk == PrecisionProfile::kDefaultChunk)
    out.push_back({chunk,
                   "the errors are of chunk=128 size: declare --profile chunk=128 if the kernel "
                   "chunks by 128",
                   10.0});
  if (!declared.l2norm_act)
    out.push_back({norm,
                   "the errors are of l2norm=act size: declare --profile l2norm=act if the "
                   "kernel computes the q/k L2 norm in the activation dtype",
                   10.0});
  // An activation-dtype state rounded at every token: its gradients are up to some 30x the
  // fp32-state baselines' on the gate's cases (docs/tolerance.md, "autodiff=act").
  if (!declared.autodiff_act)
    out.push_back({autodiff,
                   "the errors are of autodiff=act size: declare --profile autodiff=act if the "
                   "gradients come from autodiff through a graph in the activation dtype",
                   kAutodiffHintMargin});
  return out;
}

// For a fail: the reason line's hint when a profile choice the backend did not declare explains
// its errors: judged with that choice added the case passes, and the errors are of the added
// baseline's size (a quarter of it or more: slips far below it are not that choice's doing).
// Only for fails within a choice's reach of the threshold (a chunk size is a few times the
// baselines, a bug orders of magnitude), so the extra baselines cost a failing case only.
std::string profile_hint(const PreparedCase& pc, const PrecisionProfile& declared,
                         const cases::TensorMap& outputs, const CaseResult& r) {
  const PrecisionProfile now = relevant_profile(declared, pc);
  for (const Undeclared& u : undeclared_choices(declared)) {
    const PrecisionProfile with = relevant_profile(merged(declared, u.choice), pc);
    if (with == now || r.margin > u.max_margin) continue;
    const PreparedCase as = with_precision(pc, with);
    const CaseResult t = judge(as, outputs, r.backend);
    double like = 0;
    for (const TensorReport& tr : t.tensors)
      if (tr.baseline.rel_rms > 0) like = std::max(like, tr.metrics.rel_rms / tr.baseline.rel_rms);
    if (t.verdict == Verdict::kPass && like >= 0.25) return "; " + u.declare;
  }
  return "";
}

}  // namespace

CaseResult run_case(const PreparedCase& prepared, Backend& backend, bool probes,
                    const FailureCallback& on_failure, bool prepare_ahead, bool require_probes) {
  const auto t0 = std::chrono::steady_clock::now();
  // A backend is judged against its declared profile's baselines (re-prepared where the
  // profile changes them for this case's precision).
  const bool tolerant = !operation_for(prepared.c).exact(prepared.c);
  PrecisionProfile profile = backend.precision_profile();
  std::optional<PreparedCase> profiled;
  auto reprofile = [&](const PrecisionProfile& p) {
    profiled.reset();
    if (tolerant && relevant_profile(p, prepared) != prepared.precision)
      profiled = with_precision(prepared, relevant_profile(p, prepared));
  };
  if (tolerant && relevant_profile(profile, prepared) != prepared.precision &&
      backend_supports(backend, prepared.c).ok)
    reprofile(profile);
  const PreparedCase* pcp = profiled ? &*profiled : &prepared;
  CaseResult r = base_result(*pcp, backend.name());
  r.precision = profile_name(profile);
  const Support s = backend_supports(backend, pcp->c);
  if (!s.ok) return with_verdict(std::move(r), Verdict::kUnsupported, s.reason);
  // Planned before the call, so that with prepare_ahead the first probe call's setup is built
  // while the backend runs this one.
  std::optional<ProbePlan> plan;
  try {
    if (probes) plan.emplace(*pcp, prepare_ahead);
  } catch (const std::exception&) {  // run_probes below meets it again and reports it
  }
  cases::TensorMap outputs = allocate_outputs(pcp->outputs);
  Status st;
  const auto tb = std::chrono::steady_clock::now();
  try {
    st = execute(backend, pcp->c, pcp->inputs, outputs, pcp->inputs_copy.get());
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
  // An external program may declare its profile in its {out} file: known after its first call.
  if (const PrecisionProfile now = backend.precision_profile(); now != profile) {
    profile = now;
    reprofile(profile);
    pcp = profiled ? &*profiled : &prepared;
    if (plan) {
      plan.reset();
      try {
        plan.emplace(*pcp, prepare_ahead);
      } catch (const std::exception&) {
      }
    }
  }
  const PreparedCase& pc = *pcp;
  r = judge(pc, outputs, backend.name());
  r.precision = profile_name(profile);
  r.seconds_backend = backend_seconds;
  if (r.verdict == Verdict::kLeak || r.verdict == Verdict::kFail) confirm_leak(pc, backend, r);
  if (r.verdict == Verdict::kFail && tolerant) r.message += profile_hint(pc, profile, outputs, r);
  if (probes && (r.verdict == Verdict::kPass || r.verdict == Verdict::kFail)) {
    try {
      r.probes =
          plan ? run_probes(pc, backend, outputs, r, *plan) : run_probes(pc, backend, outputs, r);
    } catch (const std::exception& e) {
      r.probes.push_back({"probes", Verdict::kError, e.what()});
    }
    merge_probe_verdicts(r);
    // Asked for (RunOptions::require_probes): a pass whose every probe the backend declined did
    // not run what the run asked of it. Error, not fail: nothing says its numbers are wrong.
    if (const std::string declined = declined_probes(r);
        require_probes && r.verdict == Verdict::kPass && !declined.empty()) {
      r.verdict = Verdict::kError;
      r.message = "a pass needs its leak probes, which this run requires: the backend declined " +
                  std::string(r.probes.size() > 1 ? "every one" : "it") + " (" + declined +
                  "): " + r.probes.front().detail;
    }
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
  const int64_t rows = token_rows(pc.c);
  auto cut = [&](const Values& v) {
    Values o;
    for (const auto& [name, values] : v) {
      if (op.major(name) == TensorMajor::kNone) continue;  // belongs to no sequence: below
      std::vector<double>& dst = o[name];
      for (const Piece& p : pieces) {
        const auto part = op.major(name) == TensorMajor::kSequence
                              ? row_values(values, L.num_seqs(), p.seq, 1)
                              : row_values(values, rows, token_row(L, p.seq, p.offset), p.length);
        dst.insert(dst.end(), part.begin(), part.end());
      }
    }
    return o;
  };
  out.expected = cut(pc.expected);
  for (const Baseline& b : baselines_of(pc)) out.baselines.push_back({b.name, cut(b.values)});
  // Outputs that belong to no sequence (a layer's weight gradients, sums over every sequence):
  // the pieces' own expectation and baselines, computed on the pieces' inputs.
  std::vector<std::string> summed;
  for (const OutputSpec& s : out.outputs)
    if (op.major(s.name) == TensorMajor::kNone) summed.push_back(s.name);
  if (!summed.empty()) {
    Values own = op.oracle(out.c, out.inputs);
    for (const std::string& name : summed) out.expected[name] = std::move(own.at(name));
    const std::vector<Baseline> bs = case_baselines(out.c, out.inputs, pc.precision);
    for (size_t i = 0; i < bs.size() && i < out.baselines.size(); ++i)
      for (const std::string& name : summed) out.baselines[i].values[name] = bs[i].values.at(name);
  }
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
    std::string row;  // a sequence-major output (a state or its gradient) has no token
    for (const TensorReport& t : r.tensors)
      if (!t.seqs.empty() && !t.seqs[0].ok) {
        r.leak_seq = 0;
        r.leak_token = t.seqs[0].first_bad_token;
        r.leak_max_abs = t.seqs[0].metrics.max_abs;
        row = t.name;
        break;
      }
    r.verdict = Verdict::kLeak;
    const std::string where = r.leak_token >= 0 ? fmt::format("from token {}", r.leak_token)
                                                : fmt::format("in its '{}' row", row);
    r.message = fmt::format(
        "seq 0 {}, max|Δ| {:.2e}: wrong in the pack and right alone, a later sequence leaks into "
        "it ({})",
        where, r.leak_max_abs, r.message);
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

  // One result per backend for a case that is not run.
  auto not_run_results = [&](size_t i, Verdict v, const std::function<std::string(Backend&)>& why) {
    std::vector<CaseResult> rs;
    for (Backend* b : backends) {
      CaseResult r;
      r.case_id = cs[i].id();
      r.op = cs[i].op();
      r.backend = b->name();
      r.verdict = v;
      r.message = why(*b);
      rs.push_back(std::move(r));
    }
    return rs;
  };
  // Case i's results when it is not run (too big for --max-memory, or no backend supports it);
  // nullopt when it is to be prepared and run.
  auto not_run = [&](size_t i) -> std::optional<std::vector<CaseResult>> {
    bool any_supported = false;
    for (Backend* b : backends) any_supported = any_supported || backend_supports(*b, cs[i]).ok;
    // --max-memory: a case that would not fit is skipped before anything is allocated.
    std::string too_big;
    try {
      if (any_supported)
        too_big = memory_refusal(cs[i], options.max_memory_bytes, options.cache != nullptr);
    } catch (const std::exception&) {  // prepare() reports what is wrong with the case
    }
    if (!too_big.empty())
      return not_run_results(i, Verdict::kSkipped, [&](Backend&) { return too_big; });
    if (!any_supported)
      return not_run_results(i, Verdict::kUnsupported,
                             [&](Backend& b) { return backend_supports(b, cs[i]).reason; });
    return std::nullopt;
  };
  const bool ahead = options.prepare_ahead && options.jobs <= 1;
  // Case i on every backend, its preparation from `prepared` (which may throw).
  auto run_prepared = [&](size_t i, const std::function<PreparedCase()>& prepared) {
    std::vector<CaseResult> rs;
    try {
      const PreparedCase pc = prepared();
      for (Backend* b : backends)
        rs.push_back(
            run_case(pc, *b, options.probes, options.on_failure, ahead, options.require_probes));
      // Only now, with every call of the case made, is its expectation written to the cache.
      write_cache_entry(pc);
    } catch (const std::exception& e) {
      rs = not_run_results(i, Verdict::kError, [&](Backend&) {
        return std::string("could not prepare the case: ") + e.what();
      });
    }
    return rs;
  };
  auto publish = [&](size_t i, std::vector<CaseResult> rs) {
    std::lock_guard<std::mutex> lock(mu);
    slots[i] = std::move(rs);
    done[i] = true;
    cv.notify_all();
  };
  // The copy of the case's inputs that backends checking their inputs are checked with is taken
  // here, with the preparation (on the preparing thread with prepare_ahead), not before each call.
  bool copy_inputs = false;
  for (const Backend* b : backends) copy_inputs = copy_inputs || b->checks_inputs();
  auto prepare_case = [&](size_t i) {
    PreparedCase pc = prepare(cs[i], {}, options.cache, /*defer_store=*/true);
    if (copy_inputs && one_call(pc.c))
      pc.inputs_copy = std::make_shared<const InputCopy>(pc.inputs);
    return pc;
  };

  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) {
      std::optional<std::vector<CaseResult>> skip = not_run(i);
      publish(i, skip ? std::move(*skip) : run_prepared(i, [&] { return prepare_case(i); }));
    }
  };
  // prepare_ahead (one job): case i + 1 is prepared on a thread of its own while case i runs, so
  // a backend that leaves the CPU to the harness (a Python callable, an external program, a GPU)
  // waits less between cases. The backends are still called from this thread, in case order, and
  // what is prepared is the same as without it (prepare() depends on the case alone).
  struct Upcoming {
    std::optional<std::vector<CaseResult>> skip;
    std::future<PreparedCase> prepared;
  };
  auto upcoming = [&](size_t i) {
    Upcoming u;
    if (i >= n) return u;
    u.skip = not_run(i);
    if (u.skip) return u;
    try {
      u.prepared = std::async(std::launch::async, prepare_case, i);
    } catch (const std::system_error&) {  // no thread to be had: prepared when its turn comes
      u.prepared = std::async(std::launch::deferred, prepare_case, i);
    }
    return u;
  };
  auto work_ahead = [&] {
    Upcoming current = upcoming(0);
    for (size_t i = 0; i < n; ++i) {
      Upcoming following = upcoming(i + 1);
      publish(i, current.skip ? std::move(*current.skip)
                              : run_prepared(i, [&] { return current.prepared.get(); }));
      current = std::move(following);
    }
  };
  // Threads of its own, not core::parallel_for's pool: the pool runs one loop at a time and every
  // case's kernels use it (held for the whole run, each kernel call would start fresh threads), and
  // the reporter below hands results on in case order while the jobs run, which fork-join cannot.
  std::vector<std::thread> pool;
  for (int j = 1; !ahead && j < options.jobs; ++j) pool.emplace_back(work);
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
  if (ahead)
    work_ahead();
  else
    work();
  for (auto& t : pool) t.join();
  reporter.join();
  return all;
}

}  // namespace deltacheck::harness
