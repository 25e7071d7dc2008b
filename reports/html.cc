// report.html: one self-contained page (no network, no external script or style) for a kernel
// developer. Per failing case, inline SVG plots of |Δ| against token position on a log scale with
// the packed sequence boundaries, each sequence's threshold and the first bad token drawn (per
// head where the runner kept per-head errors); per backend, a matrix of verdicts by case family;
// sortable tables (a few lines of inline script).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "reports/report.h"
#include "reports/report_text.h"

namespace deltacheck::reports {
namespace {

using harness::Verdict;

// Failures beyond this many are listed without plots, to keep the page a few MB at most.
constexpr size_t kMaxPlottedFailures = 60;
// Bins per curve (two points each): longer curves are reduced to the max of each bin.
constexpr size_t kMaxBins = 500;
constexpr size_t kMaxHeadCurves = 16;

const char* kHeadColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                             "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string esc(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char ch : s) switch (ch) {
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
        o += "&#39;";
        break;
      default:
        o += ch;
    }
  return o;
}

// A sortable cell's key: numbers sort numerically, non-finite values last.
std::string num_key(double x) {
  if (std::isnan(x)) return "1e308";
  if (std::isinf(x)) return x > 0 ? "1e307" : "-1e308";
  return fmt::format("{:.6e}", x);
}

std::string badge(Verdict v) {
  return fmt::format("<span class=\"badge v-{0}\">{0}</span>", harness::verdict_name(v));
}

// --- plots ---------------------------------------------------------------------------------

struct Frame {
  double w = 760, h = 250, ml = 64, mr = 14, mt = 24, mb = 38;
  double n = 1;             // tokens on the x axis
  double lo = -12, hi = 0;  // log10 range of the y axis
  double pw() const { return w - ml - mr; }
  double ph() const { return h - mt - mb; }
  double x(double token) const { return ml + pw() * token / n; }
  double y(double v) const {
    if (!std::isfinite(v)) return mt;
    if (v <= 0 || std::log10(v) < lo) return mt + ph();
    return mt + ph() * (hi - std::min(std::log10(v), hi)) / (hi - lo);
  }
};

// A step curve: each bin of tokens (at most kMaxBins bins) a flat segment at its max, so one
// token is as visible as a thousand and peaks survive; a non-finite value wins its bin.
std::vector<std::pair<double, double>> reduce(const std::vector<double>& v) {
  std::vector<std::pair<double, double>> pts;
  const size_t n = v.size(), bins = std::min(n, kMaxBins);
  for (size_t b = 0; b < bins; ++b) {
    const size_t lo = b * n / bins, hi = std::max(lo + 1, (b + 1) * n / bins);
    double m = 0.0;
    for (size_t i = lo; i < hi; ++i) m = std::isfinite(v[i]) ? std::max(m, v[i]) : INFINITY;
    pts.push_back({static_cast<double>(lo), m});
    pts.push_back({static_cast<double>(hi), m});
  }
  return pts;
}

std::string polyline(const Frame& f, const std::vector<double>& v, const std::string& style) {
  std::string pts;
  for (const auto& [t, e] : reduce(v)) pts += fmt::format("{:.1f},{:.1f} ", f.x(t), f.y(e));
  if (!pts.empty()) pts.pop_back();
  return fmt::format("<polyline fill=\"none\" {} points=\"{}\"/>", style, pts);
}

std::string error_plot(const harness::TensorReport& t, const harness::CaseResult& r) {
  Frame f;
  const std::vector<double>& err = t.token_error;
  f.n = static_cast<double>(err.size());
  // Sequence starts on the token axis, when the tensor's tokens are the packed layout's.
  std::vector<int64_t> starts{0};
  for (int64_t len : r.seq_lengths) starts.push_back(starts.back() + len);
  const bool packed_axis = starts.back() == static_cast<int64_t>(err.size());
  const bool seq_thresholds = packed_axis && t.seqs.size() == r.seq_lengths.size();

  double vmin = INFINITY, vmax = 0;
  auto see = [&](double v) {
    if (std::isfinite(v) && v > 0) vmin = std::min(vmin, v), vmax = std::max(vmax, v);
  };
  for (double v : err) see(v);
  for (const auto& h : t.head_token_error)
    for (double v : h) see(v);
  see(t.threshold.max_abs);
  for (const auto& s : t.seqs) see(s.threshold.max_abs);
  if (vmax > 0) {
    f.hi = std::ceil(std::log10(vmax) + 1e-9);
    f.lo = std::floor(std::log10(vmin));
  }
  f.lo = std::max(f.lo, f.hi - 16);  // underflowed values sit on the floor
  if (f.hi - f.lo < 2) f.lo = f.hi - 2;

  std::string s = fmt::format(
      "<svg class=\"plot\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {0} {1}\" "
      "width=\"{0}\" height=\"{1}\" role=\"img\"><title>|Δ| per token of {2}, log scale</title>\n",
      f.w, f.h, esc(t.name));
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" class=\"area\"/>\n", f.ml,
                   f.mt, f.pw(), f.ph());
  // y axis: decades.
  const int decades = static_cast<int>(f.hi - f.lo);
  const int ystep = decades > 8 ? 2 : 1;
  for (int d = static_cast<int>(f.lo); d <= static_cast<int>(f.hi); d += ystep) {
    const double y = f.y(std::pow(10.0, d));
    s += fmt::format(
        "<line class=\"grid\" x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\"/>"
        "<text class=\"tick\" x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">1e{5}</text>\n",
        f.ml, f.ml + f.pw(), y, f.ml - 4, y + 4, d);
  }
  // x axis: a round step giving about 8 ticks.
  double step = 1;
  for (double m = 1; m * 8 < f.n; m *= 10)
    for (double k : {1.0, 2.0, 5.0})
      if (m * k * 8 >= f.n && step == 1) step = m * k;
  if (step == 1) step = std::max(1.0, std::ceil(f.n / 8));
  for (double t0 = 0; t0 <= f.n; t0 += step)
    s += fmt::format(
        "<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
        f.x(t0), f.mt + f.ph() + 14, static_cast<int64_t>(t0));
  s += fmt::format(
      "<text class=\"axis\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">token (position in "
      "the {} row)</text>\n",
      f.ml + f.pw() / 2, f.h - 6, packed_axis && r.seq_lengths.size() > 1 ? "packed" : "flattened");
  s += fmt::format(
      "<text class=\"axis\" transform=\"translate(14 {:.1f}) rotate(-90)\" "
      "text-anchor=\"middle\">max |Δ| per token</text>\n",
      f.mt + f.ph() / 2);
  // Sequences: boundaries, labels, thresholds and first bad tokens.
  if (packed_axis) {
    for (size_t i = 0; i < r.seq_lengths.size(); ++i) {
      const double x0 = f.x(static_cast<double>(starts[i])),
                   x1 = f.x(static_cast<double>(starts[i + 1]));
      if (starts[i] > 0 && starts[i] < starts.back())
        s += fmt::format(
            "<line class=\"boundary\" x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\"/>\n", x0,
            f.mt, f.mt + f.ph());
      if (x1 - x0 >= 18 && r.seq_lengths.size() > 1)
        s += fmt::format(
            "<text class=\"seq\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">s{}</text>\n",
            (x0 + x1) / 2, f.mt - 8, i);
      if (seq_thresholds && r.seq_lengths[i] > 0) {
        const harness::SeqReport& sr = t.seqs[i];
        s += fmt::format(
            "<line class=\"threshold\" x1=\"{0:.1f}\" x2=\"{1:.1f}\" y1=\"{2:.1f}\" "
            "y2=\"{2:.1f}\"/>\n",
            x0, x1, f.y(sr.threshold.max_abs));
        if (!sr.ok && sr.first_bad_token >= 0) {
          const double xb = f.x(static_cast<double>(starts[i] + sr.first_bad_token) + 0.5);
          s += fmt::format("<line class=\"{}\" x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{}\" y2=\"{}\"/>\n",
                           static_cast<int64_t>(i) == r.leak_seq ? "firstbad leak" : "firstbad", xb,
                           xb, f.mt, f.mt + f.ph());
        }
      }
    }
  }
  if (!seq_thresholds) {
    const double y = f.y(t.threshold.max_abs);
    s +=
        fmt::format("<line class=\"threshold\" x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\"/>\n",
                    f.ml, f.ml + f.pw(), y, y);
  }
  // Curves: each head thin, the max over the token's elements on top.
  const size_t heads = std::min(t.head_token_error.size(), kMaxHeadCurves);
  for (size_t h = 0; h < heads; ++h)
    s += polyline(f, t.head_token_error[h],
                  fmt::format("class=\"head\" stroke=\"{}\"", kHeadColors[h % 10])) +
         "\n";
  s += polyline(f, err, "class=\"maxline\"") + "\n";
  // Non-finite tokens as marks at the top edge.
  int marks = 0;
  for (size_t i = 0; i < err.size() && marks < 200; ++i)
    if (!std::isfinite(err[i])) {
      s += fmt::format("<circle class=\"nonfinite\" cx=\"{:.1f}\" cy=\"{}\" r=\"2.5\"/>",
                       f.x(static_cast<double>(i) + 0.5), f.mt);
      ++marks;
    }
  s += "</svg>\n";
  // Legend as HTML, so it wraps.
  s += "<div class=\"legend\"><span class=\"k maxline\"></span>max over the token's elements";
  for (size_t h = 0; h < heads; ++h)
    s += fmt::format("<span class=\"k\" style=\"background:{}\"></span>head {}",
                     kHeadColors[h % 10], h);
  if (t.head_token_error.size() > heads)
    s += fmt::format(" (first {} of {} heads)", heads, t.head_token_error.size());
  s += "<span class=\"k threshold\"></span>max|Δ| threshold";
  if (packed_axis && r.seq_lengths.size() > 1)
    s += "<span class=\"k boundary\"></span>sequence boundary";
  s += "<span class=\"k firstbad\"></span>first bad token</div>\n";
  return s;
}

// --- page pieces -----------------------------------------------------------------------------

std::string tensor_table(const harness::CaseResult& r) {
  std::string s =
      "<table class=\"sortable metrics\"><thead><tr><th>tensor</th><th>dtype</th><th>rel_rms</th>"
      "<th>threshold</th><th>baseline</th><th>max|Δ|</th><th>at</th><th>threshold</th>"
      "<th>non-finite</th><th>error signs</th><th>ok</th></tr></thead><tbody>\n";
  for (const auto& t : r.tensors) {
    if (t.exact) {
      s += fmt::format(
          "<tr><td>{}</td><td>{}</td><td colspan=\"6\">bit-exact: {} of {} elements differ</td>"
          "<td></td><td></td><td>{}</td></tr>\n",
          esc(t.name), esc(t.dtype), t.mismatches, t.metrics.count, t.ok ? "yes" : "<b>no</b>");
      continue;
    }
    s += fmt::format(
        "<tr><td>{}</td><td>{}</td><td data-v=\"{}\">{}</td><td data-v=\"{}\">{}</td><td "
        "data-v=\"{}\">{}</td><td data-v=\"{}\">{}</td><td>{}</td><td data-v=\"{}\">{}</td>"
        "<td>{}</td><td>{}</td><td>{}</td></tr>\n",
        esc(t.name), esc(t.dtype), num_key(t.metrics.rel_rms), sci(t.metrics.rel_rms),
        num_key(t.threshold.rel_rms), sci(t.threshold.rel_rms), num_key(t.baseline.rel_rms),
        sci(t.baseline.rel_rms), num_key(t.metrics.max_abs), sci(t.metrics.max_abs),
        t.metrics.max_index, num_key(t.threshold.max_abs), sci(t.threshold.max_abs),
        t.metrics.non_finite, esc(bias_text(t.bias)), t.ok ? "yes" : "<b>no</b>");
  }
  return s + "</tbody></table>\n";
}

std::string seq_table(const harness::CaseResult& r) {
  bool any = false;
  for (const auto& t : r.tensors) any = any || !t.seqs.empty();
  if (!any) return "";
  size_t rows = 0;
  std::string body;
  for (const auto& t : r.tensors)
    for (const auto& sr : t.seqs) {
      ++rows;
      body += fmt::format(
          "<tr class=\"{}\"><td>{}</td><td data-v=\"{}\">{}</td><td data-v=\"{}\">{}</td>"
          "<td data-v=\"{}\">{}</td><td data-v=\"{}\">{}</td><td data-v=\"{}\">{}</td>"
          "<td data-v=\"{}\">{}</td><td>{}</td><td>{}</td></tr>\n",
          sr.ok ? "" : "bad", esc(t.name), sr.seq, sr.seq, sr.length, sr.length,
          num_key(sr.metrics.rel_rms), t.exact ? "" : sci(sr.metrics.rel_rms),
          num_key(sr.threshold.rel_rms), t.exact ? "" : sci(sr.threshold.rel_rms),
          num_key(sr.metrics.max_abs), t.exact ? "" : sci(sr.metrics.max_abs), sr.first_bad_token,
          sr.first_bad_token >= 0 ? std::to_string(sr.first_bad_token) : "",
          esc(bias_text(sr.bias)), sr.ok ? "yes" : "<b>no</b>");
    }
  return fmt::format(
      "<details{}><summary>per sequence ({} rows)</summary><table class=\"sortable\"><thead><tr>"
      "<th>tensor</th><th>seq</th><th>length</th><th>rel_rms</th><th>threshold</th><th>max|Δ|</th>"
      "<th>first bad token</th><th>error "
      "signs</th><th>ok</th></tr></thead><tbody>\n{}</tbody></table></details>\n",
      rows <= 24 ? " open" : "", rows, body);
}

std::string failure_card(const Entry& e, size_t n, bool plots) {
  const harness::CaseResult& r = e.result;
  std::string s = fmt::format(
      "<article class=\"failure\" id=\"r{}\"><h3>{} <code>{}</code> on <code>{}</code></h3>\n", n,
      badge(r.verdict), esc(r.case_id), esc(r.backend));
  s += fmt::format("<p class=\"headline\">{}</p>\n", esc(failure_headline(r)));
  if (!r.message.empty() && r.message != failure_headline(r))
    s += fmt::format("<p>{}</p>\n", esc(r.message));
  s += fmt::format(
      "<p class=\"small\">family {} · seed {} · backend {:.3f} s · total {:.3f} s</p>\n",
      esc(e.family), e.seed, r.seconds_backend, r.seconds_total);
  if (!e.rerun.empty()) s += fmt::format("<pre class=\"cmd\">{}</pre>\n", esc(e.rerun));
  if (!e.dump.empty())
    s += fmt::format(
        "<p class=\"small\">inputs, expected and actual outputs: <a href=\"{0}\">{0}</a> "
        "(HDF5)</p>\n",
        esc(e.dump));
  if (!r.tensors.empty()) s += tensor_table(r);
  for (const auto& t : r.tensors) {
    if (t.token_error.empty()) continue;
    if (!plots) {
      s += "<p class=\"small\">plots are drawn for the first failures only; this one's curve is in "
           "report.json</p>\n";
      break;
    }
    s += fmt::format("<h4>{} ({})</h4>\n", esc(t.name), esc(t.dtype)) + error_plot(t, r);
  }
  s += seq_table(r);
  if (!r.probes.empty()) {
    s += "<ul class=\"probes\">";
    for (const auto& p : r.probes)
      s += fmt::format("<li>probe {}: {} {}</li>", esc(p.name), badge(p.verdict), esc(p.detail));
    s += "</ul>\n";
  }
  return s + "</article>\n";
}

std::string family_matrix(const Report& r, const std::vector<std::string>& backends) {
  std::set<std::string> families;
  std::map<std::pair<std::string, std::string>, std::vector<std::pair<const Entry*, size_t>>> cells;
  for (size_t i = 0; i < r.entries.size(); ++i) {
    const Entry& e = r.entries[i];
    families.insert(e.family);
    cells[{e.family, e.result.backend}].push_back({&e, i});
  }
  std::string s = "<table class=\"sortable matrix\"><thead><tr><th>family</th>";
  for (const auto& b : backends) s += fmt::format("<th>{}</th>", esc(b));
  s += "</tr></thead><tbody>\n";
  for (const std::string& fam : families) {
    s += fmt::format("<tr><td>{}</td>", esc(fam));
    for (const auto& b : backends) {
      const auto& es = cells[{fam, b}];
      std::map<Verdict, int> count;
      std::string squares;
      int bad = 0;
      for (const auto& [e, i] : es) {
        count[e->result.verdict]++;
        bad += e->result.verdict != Verdict::kPass;
        squares += fmt::format("<a class=\"sq v-{}\" href=\"#r{}\" title=\"{} {}\"></a>",
                               harness::verdict_name(e->result.verdict), i,
                               harness::verdict_name(e->result.verdict), esc(e->result.case_id));
      }
      std::string tally;
      for (Verdict v : verdict_order())
        if (count[v] > 0)
          tally +=
              fmt::format("{}{} {}", tally.empty() ? "" : ", ", count[v], harness::verdict_name(v));
      s += fmt::format(
          "<td data-v=\"{}\"><div class=\"squares\">{}</div><span class=\"small\">{}</span></td>",
          bad, squares, tally.empty() ? "—" : tally);
    }
    s += "</tr>\n";
  }
  return s + "</tbody></table>\n";
}

std::string results_table(const Report& r) {
  std::string s =
      "<table class=\"sortable results\"><thead><tr><th>#</th><th>verdict</th><th>backend</th>"
      "<th>family</th><th>case</th><th>worst tensor</th><th>rel_rms</th><th>threshold</th>"
      "<th>margin</th><th>seconds</th><th>reason</th></tr></thead><tbody>\n";
  for (size_t i = 0; i < r.entries.size(); ++i) {
    const Entry& e = r.entries[i];
    const harness::CaseResult& res = e.result;
    const bool linked = res.verdict == Verdict::kFail || res.verdict == Verdict::kLeak ||
                        res.verdict == Verdict::kError;
    const std::string id = esc(res.case_id);
    s += fmt::format(
        "<tr id=\"{}\"><td data-v=\"{}\">{}</td><td data-v=\"{}\">{}</td><td>{}</td><td>{}</td>"
        "<td><code>{}</code></td><td>{}</td><td data-v=\"{}\">{}</td><td data-v=\"{}\">{}</td>"
        "<td data-v=\"{}\">{}</td><td data-v=\"{:.6f}\">{:.3f}</td><td>{}</td></tr>\n",
        linked ? fmt::format("row{}", i) : fmt::format("r{}", i), e.index, e.index,
        static_cast<int>(res.verdict), badge(res.verdict), esc(res.backend), esc(e.family),
        linked ? fmt::format("<a href=\"#r{}\">{}</a>", i, id) : id, esc(res.worst_tensor),
        num_key(res.worst_rel_rms), res.worst_tensor.empty() ? "" : sci(res.worst_rel_rms),
        num_key(res.worst_threshold), res.worst_tensor.empty() ? "" : sci(res.worst_threshold),
        num_key(res.margin), res.worst_tensor.empty() ? "" : fmt::format("{:.2f}", res.margin),
        res.seconds_total, res.seconds_total,
        res.verdict != Verdict::kPass           ? esc(failure_headline(res))
        : harness::declined_probes(res).empty() ? ""
                                                : esc(verdict_text(res)));
  }
  return s + "</tbody></table>\n";
}

constexpr const char* kStyle = R"(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1200px;padding:0 16px 48px;color:#1d1d1f}
h1{margin:18px 0 4px}h2{margin-top:32px;border-bottom:1px solid #ddd}h3{margin:0 0 6px;font-size:15px}h4{margin:12px 0 2px}
code,pre{font:12px/1.4 ui-monospace,Menlo,Consolas,monospace}pre.cmd{background:#f4f4f6;padding:6px 8px;overflow-x:auto;white-space:pre-wrap;word-break:break-all}
.meta{color:#555;margin:2px 0}.small{color:#555;font-size:12px}.headline{font-weight:600}
nav a{margin-right:14px}
table{border-collapse:collapse;margin:8px 0;font-size:13px}th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f4f4f6;cursor:pointer;user-select:none;white-space:nowrap}th[data-dir=asc]::after{content:" ▲"}th[data-dir=desc]::after{content:" ▼"}
table.results td:nth-child(5){max-width:520px;word-break:break-all}tr.bad td{background:#fdecea}
.badge{display:inline-block;padding:0 6px;border-radius:3px;color:#fff;font-size:12px;font-weight:600;text-transform:uppercase}
.v-pass{background:#2e7d32}.v-fail{background:#c62828}.v-leak{background:#8e24aa}.v-error{background:#6d1b1b}.v-unsupported{background:#b28704}.v-skipped{background:#757575}
.gate-failed{color:#c62828}.gate-passed{color:#2e7d32}
.squares{display:flex;flex-wrap:wrap;gap:2px;max-width:260px}.sq{display:inline-block;width:10px;height:10px;border-radius:2px}
article.failure{border:1px solid #ddd;border-left:5px solid #c62828;padding:10px 14px;margin:16px 0;border-radius:3px}
svg.plot{display:block;max-width:100%;height:auto;background:#fff}
svg .area{fill:#fafafa;stroke:#bbb}svg .grid{stroke:#e3e3e3}svg .tick{font-size:10px;fill:#555}svg .axis{font-size:11px;fill:#333}
svg .seq{font-size:10px;fill:#555}svg .boundary{stroke:#555;stroke-dasharray:4 3}
svg .threshold{stroke:#ef6c00;stroke-width:1.5;stroke-dasharray:6 3}svg .firstbad{stroke:#c62828;stroke-width:1}svg .leak{stroke-width:2}
svg .head{stroke-width:.8;opacity:.75}svg .maxline{stroke:#111;stroke-width:1.6}svg .nonfinite{fill:#c62828}
.legend{font-size:12px;color:#444;margin:2px 0 8px}.legend .k{display:inline-block;width:16px;height:3px;margin:0 4px 3px 12px;vertical-align:middle;background:#111}
.legend .k.threshold{background:#ef6c00}.legend .k.boundary{background:#555}.legend .k.firstbad{background:#c62828}
)";

// Sortable tables; and a self-check the headless-browser test reads once the page has loaded:
// how many plots rendered a visible curve (data-plots-rendered) out of how many (data-plots), and
// how many resources the page fetched (data-resources; a self-contained page fetches none).
constexpr const char* kScript = R"(
(function () {
  function key(td) { var v = td.getAttribute('data-v'); return v !== null ? v : td.textContent.trim(); }
  document.querySelectorAll('table.sortable').forEach(function (table) {
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, col) {
      th.addEventListener('click', function () {
        var dir = th.getAttribute('data-dir') === 'asc' ? -1 : 1;
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute('data-dir'); });
        th.setAttribute('data-dir', dir > 0 ? 'asc' : 'desc');
        var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = key(a.cells[col]), y = key(b.cells[col]), nx = Number(x), ny = Number(y);
          var c = (x !== '' && y !== '' && !isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
          return c * dir;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  window.addEventListener('load', function () {
    var plots = document.querySelectorAll('svg.plot'), rendered = 0;
    plots.forEach(function (svg) {
      var line = svg.querySelector('polyline.maxline');
      if (line && line.getBBox().width > 0) rendered++;
    });
    var root = document.documentElement;
    root.setAttribute('data-plots', plots.length);
    root.setAttribute('data-plots-rendered', rendered);
    root.setAttribute('data-resources', performance.getEntriesByType('resource').length);
  });
})();
)";

}  // namespace

std::string format_html(const Report& r) {
  std::vector<std::string> backends = r.backends;
  std::map<std::string, std::map<Verdict, int>> counts;
  for (const Entry& e : r.entries) {
    counts[e.result.backend][e.result.verdict]++;
    if (std::find(backends.begin(), backends.end(), e.result.backend) == backends.end())
      backends.push_back(e.result.backend);
  }
  const bool failed = fails_gate(r);
  std::vector<size_t> failures;
  for (size_t i = 0; i < r.entries.size(); ++i) {
    const Verdict v = r.entries[i].result.verdict;
    if (v == Verdict::kFail || v == Verdict::kLeak || v == Verdict::kError) failures.push_back(i);
  }

  std::string s = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n";
  s += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  s += "<link rel=\"icon\" href=\"data:,\">\n";  // no favicon request
  s += fmt::format("<title>deltacheck report: {}</title>\n<style>{}</style></head><body>\n",
                   failed ? "FAILED" : "passed", kStyle);
  s += fmt::format("<h1>deltacheck: <span class=\"gate-{0}\">{0}</span></h1>\n",
                   failed ? "failed" : "passed");
  s += fmt::format(
      "<p class=\"meta\">{} cases × {} backends; the gate fails on {}; tolerance {}</p>\n",
      r.selected_cases, backends.size(), esc(fail_on_string(r.fail_on)), esc(r.tolerance));
  s += fmt::format("<p class=\"meta\">deltacheck {} ({}) · started {} · {:.1f} s",
                   esc(r.tool_version), esc(r.git_revision), esc(r.started_at), r.seconds);
  for (const Machine& m : r.machines)
    s += fmt::format(" · {} ({} cores, {})", esc(m.hostname), m.cores, esc(m.cpu_model));
  s += "</p>\n";
  if (r.shard_count > 1)
    s += fmt::format("<p class=\"meta\">shard {}/{}</p>\n", r.shard_index, r.shard_count);
  if (!r.merged_from.empty()) {
    s += "<p class=\"meta\">merged from";
    for (const auto& m : r.merged_from) s += " <code>" + esc(m) + "</code>";
    s += "</p>\n";
  }
  if (!r.command.empty()) s += fmt::format("<pre class=\"cmd\">{}</pre>\n", esc(r.command));
  s += fmt::format(
      "<nav><a href=\"#totals\">totals</a><a href=\"#matrix\">verdicts by family</a>"
      "<a href=\"#failures\">failures ({})</a><a href=\"#results\">all results ({})</a></nav>\n",
      failures.size(), r.entries.size());

  s += "<h2 id=\"totals\">Totals</h2>\n<table class=\"sortable\"><thead><tr><th>backend</th>";
  for (Verdict v : verdict_order()) s += fmt::format("<th>{}</th>", harness::verdict_name(v));
  s += "</tr></thead><tbody>\n";
  for (const auto& b : backends) {
    s += fmt::format("<tr><td>{}</td>", esc(b));
    for (Verdict v : verdict_order()) {
      const int n = counts[b][v];
      s += n > 0 && v != Verdict::kPass
               ? fmt::format("<td data-v=\"{0}\">{1}</td>", n, badge(v) + " " + std::to_string(n))
               : fmt::format("<td>{}</td>", n);
    }
    s += "</tr>\n";
  }
  s += "</tbody></table>\n";
  std::vector<harness::CaseResult> results;
  for (const Entry& e : r.entries) results.push_back(e.result);
  if (const int n = passes_without_probes(results); n > 0)
    s += fmt::format("<p class=\"unprobed\">{}</p>\n", esc(passes_without_probes_line(n)));

  s += "<h2 id=\"matrix\">Verdicts by case family</h2>\n<p class=\"small\">family = operation, "
       "layout kind and cache mode; one square per case (click one to jump to it)</p>\n";
  s += family_matrix(r, backends);

  s += fmt::format("<h2 id=\"failures\">Failures ({})</h2>\n", failures.size());
  if (failures.empty()) s += "<p>None.</p>\n";
  for (size_t k = 0; k < failures.size(); ++k)
    s += failure_card(r.entries[failures[k]], failures[k], k < kMaxPlottedFailures);

  s += "<h2 id=\"results\">All results</h2>\n<p class=\"small\">click a column to sort</p>\n";
  s += results_table(r);
  s += fmt::format("<script>{}</script>\n</body></html>\n", kScript);
  return s;
}

}  // namespace deltacheck::reports
