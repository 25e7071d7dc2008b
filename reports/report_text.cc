// Text shared by the report formats (see report_text.h).
#include "reports/report_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "cases/case.h"

namespace deltacheck::reports {
namespace {

using harness::Verdict;

// Sequences listed per tensor in the details; the failing ones always are.
constexpr size_t kMaxSeqLines = 32;

std::string where(const harness::SeqReport& s) {
  return s.first_bad_token >= 0 ? fmt::format("seq {} from token {}", s.seq, s.first_bad_token)
                                : fmt::format("seq {}", s.seq);
}

std::string compare_text(const harness::Metrics& m, const harness::Threshold& t) {
  if (m.non_finite > 0) return fmt::format("{} non-finite values", m.non_finite);
  if (!(m.rel_rms <= t.rel_rms))
    return fmt::format("rel_rms {} > {}", sci(m.rel_rms), sci(t.rel_rms));
  if (!(m.max_abs <= t.max_abs))
    return fmt::format("max|Δ| {} > {}", sci(m.max_abs), sci(t.max_abs));
  return "";
}

}  // namespace

const std::vector<Verdict>& verdict_order() {
  static const std::vector<Verdict> order{Verdict::kPass,        Verdict::kFail,
                                          Verdict::kLeak,        Verdict::kError,
                                          Verdict::kUnsupported, Verdict::kSkipped};
  return order;
}

std::string verdict_text(const harness::CaseResult& r) {
  const std::string declined = harness::declined_probes(r);
  if (r.verdict != Verdict::kPass || declined.empty()) return harness::verdict_name(r.verdict);
  return "pass (probes declined: " + declined + ")";
}

int passes_without_probes(const std::vector<harness::CaseResult>& results) {
  int n = 0;
  for (const harness::CaseResult& r : results)
    n += r.verdict == Verdict::kPass && !harness::declined_probes(r).empty();
  return n;
}

std::string passes_without_probes_line(int n) {
  if (n == 0) return "";
  return fmt::format(
      "{} {} without {} leak probes: the backend declined every one (--deterministic or "
      "--batch-invariant make such a case an error)",
      n, n == 1 ? "pass" : "passes", n == 1 ? "its" : "their");
}

std::string sci(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return fmt::format("{:.1e}", x);
}

std::string bias_text(const harness::RoundingBias& b) {
  if (!b.checked) return "";
  return fmt::format("{:.0f}% {}, z {:.1f}{}", 100.0 * b.fraction,
                     harness::bias_direction_name(b.direction), b.z, b.biased ? " (biased)" : "");
}

std::string failure_headline(const harness::CaseResult& r) {
  if (r.verdict != Verdict::kFail && r.verdict != Verdict::kLeak) return r.message;
  // The sequence the runner named (r.leak_seq, as the console says) when a tensor is wrong
  // there; otherwise the first wrong tensor and its first wrong sequence.
  const harness::TensorReport* named = nullptr;
  for (const harness::TensorReport& t : r.tensors)
    if (!named && r.leak_seq >= 0 && r.leak_seq < static_cast<int64_t>(t.seqs.size()) &&
        !t.seqs[r.leak_seq].ok)
      named = &t;
  for (const harness::TensorReport& t : r.tensors) {
    if (t.ok || (named && &t != named)) continue;
    const harness::SeqReport* bad = named ? &t.seqs[r.leak_seq] : nullptr;
    for (const harness::SeqReport& s : t.seqs)
      if (!bad && !s.ok) bad = &s;
    if (t.exact) {
      std::string h =
          fmt::format("{} of {} elements of {} differ", t.mismatches, t.metrics.count, t.name);
      return bad ? h + " (" + where(*bad) + ")" : h;
    }
    std::string cmp = compare_text(t.metrics, t.threshold);
    if (cmp.empty() && bad) cmp = compare_text(bad->metrics, bad->threshold);
    if (cmp.empty()) break;
    return fmt::format("{} in {}{}", cmp, t.name, bad ? " (" + where(*bad) + ")" : "");
  }
  return r.message;  // e.g. a leak that only a probe saw
}

std::string readable_case_id(const std::string& id) {
  const StatusOr<cases::Case> parsed = cases::Case::from_id(id, /*given=*/false);
  if (!parsed.ok()) return id;
  const cases::Case& c = parsed.value();
  const cases::OpSchema& schema = cases::find_schema(c.op());  // c's op exists
  std::string o = c.op() + "(";
  for (const auto& kv : c.params()) {
    const std::string& key = kv.first;
    const std::string& value = kv.second;
    // By key, not by position: a parameter absent by default (gdr's regime, gdr_grad's cp) is
    // left out of the id and shifts the ones after it.
    const auto spec = std::find_if(schema.params.begin(), schema.params.end(),
                                   [&](const cases::ParamSpec& p) { return p.key == key; });
    if (key != "layout" && spec != schema.params.end() && value == spec->default_value) continue;
    o += (o.back() == '(' ? "" : ",") + key + "=" + value;
  }
  return o + ")";
}

std::vector<std::string> reason_lines(const harness::CaseResult& r) {
  std::vector<std::string> lines;
  if (r.verdict != Verdict::kPass && !r.message.empty()) lines.push_back(r.message);
  // For a wrong result, how far off against the same-precision baselines: a few times the worst
  // baseline is a precision shortfall, orders of magnitude a wrong result.
  if (r.verdict == Verdict::kFail || r.verdict == Verdict::kLeak)
    for (const harness::TensorReport& t : r.tensors) {
      if (t.ok || t.exact || t.metrics.non_finite > 0) continue;
      const double base = t.baseline.rel_rms;
      lines.push_back(fmt::format(
          "{}: rel_rms {:.2e} (threshold {:.2e}), max|Δ| {:.2e} (threshold {:.2e}); worst "
          "same-precision baseline{}: rel_rms {:.2e}{}",
          t.name, t.metrics.rel_rms, t.threshold.rel_rms, t.metrics.max_abs, t.threshold.max_abs,
          t.baseline_name.empty() ? "" : " (" + t.baseline_name + ")", base,
          base > 0 ? fmt::format(", error {:.3g}x it", t.metrics.rel_rms / base) : std::string()));
    }
  for (const harness::ProbeReport& p : r.probes)
    if (p.verdict != Verdict::kPass && r.message.find("probe " + p.name) == std::string::npos)
      lines.push_back(
          fmt::format("probe {}: {} {}", p.name, harness::verdict_name(p.verdict), p.detail));
  return lines;
}

std::string result_details(const Entry& e) {
  const harness::CaseResult& r = e.result;
  std::string o =
      fmt::format("verdict: {}\ncase: {}\nbackend: {}\n", verdict_text(r), r.case_id, r.backend);
  if (!r.message.empty()) o += "message: " + r.message + "\n";
  o += fmt::format("family: {}  seed: {}\n", e.family, e.seed);
  for (const harness::TensorReport& t : r.tensors) {
    if (t.exact) {
      o += fmt::format("tensor {} ({}, bit-exact): {} of {} elements differ{}\n", t.name, t.dtype,
                       t.mismatches, t.metrics.count, t.ok ? "" : " FAIL");
    } else {
      o += fmt::format(
          "tensor {} ({}): rel_rms {} (threshold {}, baseline {}), max|Δ| {} at {} (threshold "
          "{}){}{}\n",
          t.name, t.dtype, sci(t.metrics.rel_rms), sci(t.threshold.rel_rms),
          sci(t.baseline.rel_rms), sci(t.metrics.max_abs), t.metrics.max_index,
          sci(t.threshold.max_abs), t.bias.checked ? ", error signs " + bias_text(t.bias) : "",
          t.ok ? "" : " FAIL");
    }
    size_t listed = 0, skipped = 0;
    for (const harness::SeqReport& s : t.seqs) {
      if (s.ok && listed >= kMaxSeqLines) {
        ++skipped;
        continue;
      }
      ++listed;
      if (t.exact)
        o += fmt::format("  seq {}: {}\n", s.seq, s.ok ? "identical" : "differs from " + where(s));
      else if (s.metrics.count == 0)
        o += fmt::format("  seq {} (length {}): empty\n", s.seq, s.length);
      else
        o += fmt::format(
            "  seq {} (length {}): rel_rms {} (threshold {}), max|Δ| {} (threshold {}){}{}\n",
            s.seq, s.length, sci(s.metrics.rel_rms), sci(s.threshold.rel_rms),
            sci(s.metrics.max_abs), sci(s.threshold.max_abs),
            s.bias.checked ? ", error signs " + bias_text(s.bias) : "",
            s.ok                     ? ""
            : s.first_bad_token >= 0 ? " FAIL from token " + std::to_string(s.first_bad_token)
                                     : " FAIL");
    }
    if (skipped > 0) o += fmt::format("  ... {} more sequences within tolerance\n", skipped);
  }
  for (const harness::ProbeReport& p : r.probes)
    o += fmt::format("probe {}: {} {}\n", p.name, harness::verdict_name(p.verdict), p.detail);
  if (!e.rerun.empty()) o += "rerun: " + e.rerun + "\n";
  if (!e.dump.empty()) o += "dump: " + e.dump + "\n";
  return o;
}

}  // namespace deltacheck::reports
