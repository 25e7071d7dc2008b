// junit.xml: the JUnit XML that Jenkins, GitLab and GitHub test-report actions read. One
// <testsuite> per backend; one <testcase> per case. classname is the operation and its layout
// family ("gdr.packed", "layer.single"; ops without a layout by their cache mode: "mask.static"),
// so CI pages group cases the way the case matrix does; name is the case id without the
// parameters that have their default values (still an id --case takes) plus the backend. fail and
// leak are <failure>, error is <error>, unsupported and skipped are <skipped>: message is the
// one-line headline, the body the reason lines, the full case id and the rerun command; every
// detail (tensors, sequences, probes) goes to <system-out>. Validated against
// tests/reports/junit.xsd.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "reports/report.h"
#include "reports/report_text.h"

namespace deltacheck::reports {
namespace {

using harness::Verdict;

std::string xml_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    switch (ch) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':
        o += "&apos;";
        break;
      default:
        // XML 1.0 has no way to write other control characters, even escaped.
        if (u < 0x20 && ch != '\n' && ch != '\t' && ch != '\r')
          o += '?';
        else
          o += ch;
    }
  }
  return o;
}

// "gdr.packed" for gdr(layout=packed[...],...): the op and its layout kind, else its cache mode.
std::string classname(const std::string& case_id) {
  const std::string family = case_family(case_id);  // "gdr packed cache=prefill", "mask cache=.."
  std::string op = family.substr(0, family.find(' '));
  const size_t kind = family.find(' ');
  if (kind == std::string::npos) return op;
  std::string rest = family.substr(kind + 1);
  if (rest.rfind("cache=", 0) == 0) rest = rest.substr(6);
  return op + "." + rest.substr(0, rest.find(' '));
}

// The outcome element's body: why, which case exactly, and how to run it again.
std::string outcome_body(const Entry& e) {
  std::string body;
  for (const std::string& line : reason_lines(e.result)) body += line + "\n";
  body += "case: " + e.result.case_id + "\n";
  if (!e.rerun.empty()) body += "rerun: " + e.rerun + "\n";
  return body;
}

std::string seconds_attr(double s) {
  return fmt::format("{:.6f}", std::isfinite(s) && s > 0 ? s : 0.0);
}

}  // namespace

std::string format_junit(const Report& r) {
  struct Counts {
    int tests = 0, failures = 0, errors = 0, skipped = 0;
    double seconds = 0.0;
  };
  std::map<std::string, Counts> per_backend;
  Counts all;
  for (const Entry& e : r.entries) {
    Counts& c = per_backend[e.result.backend];
    for (Counts* x : {&c, &all}) {
      x->tests++;
      x->failures += e.result.verdict == Verdict::kFail || e.result.verdict == Verdict::kLeak;
      x->errors += e.result.verdict == Verdict::kError;
      x->skipped +=
          e.result.verdict == Verdict::kUnsupported || e.result.verdict == Verdict::kSkipped;
      x->seconds += e.result.seconds_total;
    }
  }
  const std::string host = r.machines.empty() ? "localhost" : r.machines.front().hostname;
  std::string o = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o += fmt::format(
      "<testsuites name=\"deltacheck\" tests=\"{}\" failures=\"{}\" errors=\"{}\" "
      "skipped=\"{}\" time=\"{}\">\n",
      all.tests, all.failures, all.errors, all.skipped, seconds_attr(r.seconds));
  std::vector<std::string> backends = r.backends;
  for (const auto& [b, c] : per_backend)
    if (std::find(backends.begin(), backends.end(), b) == backends.end()) backends.push_back(b);
  for (const std::string& b : backends) {
    const Counts& c = per_backend[b];
    o += fmt::format(
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" "
        "time=\"{}\" timestamp=\"{}\" hostname=\"{}\">\n",
        xml_escape("deltacheck." + b), c.tests, c.failures, c.errors, c.skipped,
        seconds_attr(c.seconds),
        xml_escape(r.started_at.empty() ? "1970-01-01T00:00:00Z" : r.started_at), xml_escape(host));
    o += "    <properties>\n";
    for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
             {"tool", "deltacheck " + r.tool_version + " (" + r.git_revision + ")"},
             {"tolerance", r.tolerance},
             {"backend", b},
             {"fail_on", fail_on_string(r.fail_on)}})
      o += fmt::format("      <property name=\"{}\" value=\"{}\"/>\n", k, xml_escape(v));
    o += "    </properties>\n";
    for (const Entry& e : r.entries) {
      const harness::CaseResult& res = e.result;
      if (res.backend != b) continue;
      o += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{}\"",
                       xml_escape(classname(res.case_id)),
                       xml_escape(readable_case_id(res.case_id) + " [" + res.backend + "]"),
                       seconds_attr(res.seconds_total));
      if (res.verdict == Verdict::kPass) {
        // A pass without its probes keeps its pass, and says so where CI shows a test's output.
        if (const std::string d = harness::declined_probes(res); !d.empty())
          o += fmt::format(">\n      <system-out>{}</system-out>\n    </testcase>\n",
                           xml_escape(verdict_text(res)));
        else
          o += "/>\n";
        continue;
      }
      o += ">\n";
      const std::string message = xml_escape(failure_headline(res));
      const std::string body = xml_escape(outcome_body(e));
      switch (res.verdict) {
        case Verdict::kFail:
        case Verdict::kLeak:
          o += fmt::format("      <failure message=\"{}\" type=\"{}\">{}</failure>\n", message,
                           harness::verdict_name(res.verdict), body);
          break;
        case Verdict::kError:
          o +=
              fmt::format("      <error message=\"{}\" type=\"error\">{}</error>\n", message, body);
          break;
        default:
          o += fmt::format("      <skipped message=\"{}\"/>\n", message);
      }
      o += fmt::format("      <system-out>{}</system-out>\n", xml_escape(result_details(e)));
      o += "    </testcase>\n";
    }
    o += "  </testsuite>\n";
  }
  o += "</testsuites>\n";
  return o;
}

}  // namespace deltacheck::reports
