// The report model's helpers: the gate, case families and seeds from ids, rerun commands,
// provenance (version, git revision, machine), atomic report-directory writes, and merging.
#include "reports/report.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "cases/case.h"
#include "cases/safe_text.h"
#include "cases/selection.h"
#include "harness/tolerance.h"

namespace deltacheck::reports {
namespace fs = std::filesystem;
using harness::Verdict;

#ifndef DELTACHECK_REPORTS_VERSION
#define DELTACHECK_REPORTS_VERSION "unknown"
#endif
#ifndef DELTACHECK_GIT_REVISION
#define DELTACHECK_GIT_REVISION "unknown"
#endif

namespace {

// The value of `key` in a case id, scanning top-level parameters only (layouts contain commas).
std::string param_of(const std::string& id, const std::string& key) {
  const size_t open = id.find('('), close = id.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return "";
  int depth = 0;
  size_t start = open + 1;
  for (size_t i = open + 1; i <= close; ++i) {
    const char ch = id[i];
    if (ch == '[') ++depth;
    if (ch == ']') --depth;
    if ((ch == ',' && depth == 0) || i == close) {
      const std::string item = id.substr(start, i - start);
      const size_t eq = item.find('=');
      if (eq != std::string::npos && item.compare(0, eq, key) == 0 && eq == key.size())
        return item.substr(eq + 1);
      start = i + 1;
    }
  }
  return "";
}

std::string read_text(const std::string& path, Status& st) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    st = Status::InvalidArgument("cannot read " + path);
    return "";
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::vector<Verdict> default_fail_on() { return {Verdict::kFail, Verdict::kLeak, Verdict::kError}; }

bool in(const std::vector<Verdict>& set, Verdict v) {
  return std::find(set.begin(), set.end(), v) != set.end();
}

Status parse_fail_on(const std::vector<std::string>& names, std::vector<Verdict>& out) {
  out.clear();
  for (const std::string& n : names) {
    Verdict v;
    try {
      v = harness::verdict_from_name(n);
    } catch (const std::invalid_argument&) {
      return Status::InvalidArgument("--fail-on: unknown verdict '" + n +
                                     "' (fail, leak, error, unsupported, skipped)");
    }
    if (v == Verdict::kPass) return Status::InvalidArgument("--fail-on: 'pass' cannot fail a gate");
    if (!in(out, v)) out.push_back(v);
  }
  if (out.empty()) return Status::InvalidArgument("--fail-on: no verdict given");
  // Canonical order, so equal sets print and compare equal.
  std::sort(out.begin(), out.end());
  return Status::Ok();
}

std::string fail_on_string(const std::vector<Verdict>& v) {
  std::string s;
  for (Verdict x : v) s += (s.empty() ? "" : ",") + std::string(harness::verdict_name(x));
  return s;
}

bool fails_gate(const Report& r) {
  for (const Entry& e : r.entries)
    if (in(r.fail_on, e.result.verdict)) return true;
  return false;
}

std::string case_family(const std::string& case_id) {
  const size_t open = case_id.find('(');
  std::string family = case_id.substr(0, open);
  const std::string layout = param_of(case_id, "layout");
  if (!layout.empty()) family += " " + layout.substr(0, layout.find('['));
  const std::string cache = param_of(case_id, "cache");
  if (!cache.empty()) family += " cache=" + cache;
  return family;
}

int64_t case_seed(const std::string& case_id) {
  const std::string s = param_of(case_id, "seed");
  if (s.empty()) return -1;
  try {
    return std::stoll(s);
  } catch (const std::exception&) {
    return -1;
  }
}

std::string shell_quote(const std::string& s) {
  const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || std::strchr("-_./:=,@+", ch);
  });
  if (plain) return s;
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

std::string rerun_command(const std::string& backend, const std::string& case_id,
                          const std::string& backend_options) {
  return fmt::format("deltacheck run --backend {}{}{} --case {}", shell_quote(backend),
                     backend_options.empty() ? "" : " ", backend_options, shell_quote(case_id));
}

Entry make_entry(harness::CaseResult r, int64_t index, const std::string& backend_options) {
  auto round3 = [](std::vector<double>& v) {
    for (double& x : v)
      if (std::isfinite(x) && x != 0.0) x = std::strtod(fmt::format("{:.2e}", x).c_str(), nullptr);
  };
  for (harness::TensorReport& t : r.tensors) {
    if (r.verdict == Verdict::kPass) {
      t.token_error.clear();
      t.head_token_error.clear();
    }
    round3(t.token_error);
    for (auto& h : t.head_token_error) round3(h);
  }
  Entry e;
  e.index = index;
  e.seed = case_seed(r.case_id);
  e.family = case_family(r.case_id);
  if (harness::is_failure(r.verdict))
    e.rerun = rerun_command(r.backend, r.case_id, backend_options);
  e.result = std::move(r);
  return e;
}

Report assemble_report(const std::vector<harness::CaseResult>& results, const RunRecord& run) {
  Report rep;
  rep.tool_version = tool_version();
  rep.git_revision = git_revision();
  rep.tolerance = harness::describe_policy();
  rep.selection = run.selection;
  for (const auto& r : results)
    if (std::find(rep.backends.begin(), rep.backends.end(), r.backend) == rep.backends.end())
      rep.backends.push_back(r.backend);
  if (rep.backends.empty()) rep.backends = run.backends;
  rep.fail_on = run.fail_on;
  rep.machines = {this_machine()};
  rep.command = this_command_line();
  rep.shard_index = run.shard_index;
  rep.shard_count = run.shard_count;
  rep.started_at = run.started_at;
  rep.seconds = run.seconds;
  std::map<std::string, int64_t> index_of = run.index_of;
  int64_t next_index = std::max<int64_t>(run.selected, 0);
  for (const auto& r : results) {
    auto it = index_of.find(r.case_id);
    if (it == index_of.end()) it = index_of.emplace(r.case_id, next_index++).first;
    Entry e = make_entry(r, it->second, run.backend_options);
    if (run.rerunnable && !run.rerunnable->count(r.backend)) e.rerun.clear();
    if (const auto d = run.dumps.find({r.case_id, r.backend}); d != run.dumps.end())
      e.dump = d->second;
    rep.entries.push_back(std::move(e));
  }
  rep.selected_cases = next_index;  // the selection and the cases outside it
  return rep;
}

std::string tool_version() { return DELTACHECK_REPORTS_VERSION; }
std::string git_revision() { return DELTACHECK_GIT_REVISION; }

Machine this_machine() {
  Machine m;
  char host[256] = {};
  m.hostname = gethostname(host, sizeof(host) - 1) == 0 ? host : "unknown";
  m.cores = static_cast<int>(std::thread::hardware_concurrency());
  m.cpu_model = "unknown";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos)
        m.cpu_model = line.substr(line.find_first_not_of(" \t", colon + 1));
      break;
    }
  return m;
}

std::string this_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string out;
  size_t start = 0;
  while (start < all.size()) {
    size_t end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    out += (out.empty() ? "" : " ") + shell_quote(all.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string utc_now_iso8601() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

namespace {

// Strings in a JSON value (a report's selection) made valid UTF-8.
void sanitize_json(nlohmann::ordered_json& j) {
  if (j.is_string()) {
    j = cases::valid_utf8(j.get<std::string>());
  } else if (j.is_structured()) {
    for (auto& v : j) sanitize_json(v);
  }
}

}  // namespace

Report sanitized(Report r) {
  using cases::printable_line;
  using cases::valid_utf8;
  for (std::string* s : {&r.tool_version, &r.git_revision, &r.tolerance, &r.command, &r.started_at})
    *s = valid_utf8(*s);
  sanitize_json(r.selection);
  for (std::string& b : r.backends) b = printable_line(b);
  for (std::string& m : r.merged_from) m = valid_utf8(m);
  for (Machine& m : r.machines) {
    m.hostname = printable_line(m.hostname);
    m.cpu_model = printable_line(m.cpu_model);
  }
  for (Entry& e : r.entries) {
    harness::CaseResult& x = e.result;
    for (std::string* s : {&x.case_id, &x.op, &x.backend, &x.worst_tensor, &e.family})
      *s = printable_line(*s);
    x.message = printable_line(x.message, 1 << 16);
    e.rerun = valid_utf8(e.rerun);
    e.dump = valid_utf8(e.dump);
    for (harness::ProbeReport& p : x.probes) {
      p.name = printable_line(p.name);
      p.detail = printable_line(p.detail, 1 << 16);
    }
    for (harness::TensorReport& t : x.tensors) {
      t.name = printable_line(t.name);
      t.dtype = printable_line(t.dtype);
    }
  }
  return r;
}

LoadedReport read_report(const std::string& dir_or_file) {
  std::error_code ec;
  const std::string path = fs::is_directory(dir_or_file, ec)
                               ? (fs::path(dir_or_file) / "report.json").string()
                               : dir_or_file;
  LoadedReport lr;
  const std::string text = read_text(path, lr.status);
  if (!lr.status.ok()) return lr;
  return parse_json(text, path);
}

namespace {

// The id of the case at position `pos` of the (unsharded) selection a report's `selection`
// records, re-derived through the case selection; "" when it cannot be (a selection the report
// does not record, one this build cannot make, a position past it).
std::string case_at(const Report& r, int64_t pos) {
  try {
    const nlohmann::ordered_json& j = r.selection;
    if (!j.is_object()) return "";
    cases::SelectionSpec spec;
    if (j.contains("suite") && j["suite"].is_string()) spec.suite = j["suite"].get<std::string>();
    if (j.contains("cases")) spec.ids = j["cases"].get<std::vector<std::string>>();
    if (j.contains("filter") && j["filter"].is_string() && !j["filter"].get<std::string>().empty())
      spec.filters = {j["filter"].get<std::string>()};
    else if (j.contains("filter") && j["filter"].is_array())
      spec.filters = j["filter"].get<std::vector<std::string>>();
    if (j.contains("exclude")) spec.excludes = j["exclude"].get<std::vector<std::string>>();
    if (j.contains("seed") && j["seed"].is_number_integer()) spec.seed = j["seed"].get<int64_t>();
    const cases::SelectedCases sel = cases::select(spec);
    return pos >= 0 && pos < static_cast<int64_t>(sel.cases.size()) ? sel.cases[pos].id() : "";
  } catch (const std::exception&) {
    return "";
  }
}

// A shard holds one result per backend for exactly the cases its shard selected: position p of
// the selection (p < selected_cases) belongs to shard p % N. A shard with results removed (or
// added) would otherwise merge into a run that never happened.
Status check_coverage(const Report& r, const std::vector<Entry>& entries, const std::string& src,
                      const std::map<int64_t, std::string>& id_at) {
  const int64_t n = std::max(r.shard_count, 1);
  auto owned = [&](int64_t p) { return p >= 0 && p < r.selected_cases && p % n == r.shard_index; };
  int64_t expected = 0;
  for (int64_t p = r.shard_index; p < r.selected_cases; p += n) ++expected;
  const std::string which =
      n > 1 ? fmt::format("shard {}/{}", r.shard_index, r.shard_count) : std::string("the run");
  for (const std::string& b : r.backends) {
    std::set<int64_t> held;
    for (const Entry& e : entries) {
      if (e.result.backend != b) continue;
      if (!owned(e.index))
        return Status::InvalidArgument(
            fmt::format("{}: holds {} on {}, outside the {} cases {} selected (position {} of {})",
                        src, e.result.case_id, b, expected, which, e.index, r.selected_cases));
      held.insert(e.index);
    }
    for (int64_t p = r.shard_index; p < r.selected_cases; p += n) {
      if (held.count(p)) continue;
      auto it = id_at.find(p);
      std::string id = it != id_at.end() ? it->second : case_at(r, p);
      return Status::InvalidArgument(fmt::format(
          "{}: {} selected {} cases but holds {} results on {}; the first missing is {}", src,
          which, expected, held.size(), b,
          id.empty() ? fmt::format("the case at position {} of the selection", p)
                     : fmt::format("{} (position {} of the selection)", id, p)));
    }
  }
  return Status::Ok();
}

}  // namespace

MergedReport merge_reports(const std::vector<Report>& inputs,
                           const std::vector<std::string>& sources) {
  MergedReport m;
  if (inputs.empty()) {
    m.status = Status::InvalidArgument("nothing to merge");
    return m;
  }
  const Report& first = inputs.front();
  Report& out = m.report;
  out.tool_version = first.tool_version;
  out.git_revision = first.git_revision;
  out.tolerance = first.tolerance;
  out.selection = first.selection;
  out.fail_on = first.fail_on;
  out.started_at = first.started_at;
  out.merged_from = sources;
  // Shards are grouped by what they ran (selection and backends); each group must be complete.
  std::map<std::string, std::pair<int, std::set<int>>> shard_groups;
  std::set<std::pair<std::string, std::string>> seen;
  // The entries with their case ids in canonical form: one case in two spellings is one case.
  std::vector<std::vector<Entry>> canonical(inputs.size());
  std::map<std::string, std::map<int64_t, std::string>> id_at;  // group -> position -> case
  auto group_of = [](const Report& r) {
    std::string group = r.selection.dump();
    for (const auto& b : r.backends) group += "|" + b;
    return group;
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string src = i < sources.size() ? sources[i] : fmt::format("input {}", i);
    for (Entry e : inputs[i].entries) {
      // Spelling only: a case the zero-token rule now refuses still has its canonical id.
      const StatusOr<cases::Case> c = cases::Case::from_id(e.result.case_id, /*given=*/false);
      if (!c.ok()) {
        m.status = Status::InvalidArgument(fmt::format("{}: case id '{}' does not parse: {}", src,
                                                       e.result.case_id, c.status().message()));
        return m;
      }
      e.result.case_id = c.value().id();
      id_at[group_of(inputs[i])].emplace(e.index, e.result.case_id);
      canonical[i].push_back(std::move(e));
    }
  }
  std::vector<std::pair<const Entry*, size_t>> entries;  // entry, backend rank
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Report& r = inputs[i];
    const std::string src = i < sources.size() ? sources[i] : fmt::format("input {}", i);
    if (r.tool_version != first.tool_version || r.git_revision != first.git_revision) {
      m.status = Status::InvalidArgument(fmt::format(
          "{} comes from deltacheck {} ({}), {} from {} ({}): merge reports of one build", src,
          r.tool_version, r.git_revision, sources.empty() ? "input 0" : sources[0],
          first.tool_version, first.git_revision));
      return m;
    }
    if (r.tolerance != first.tolerance) {
      m.status = Status::InvalidArgument(src + " was judged by another tolerance policy (" +
                                         r.tolerance + ")");
      return m;
    }
    if (r.selection != first.selection) out.selection = nullptr;
    if (r.fail_on != out.fail_on) out.fail_on.clear();  // the caller must choose
    if (r.started_at < out.started_at) out.started_at = r.started_at;
    out.seconds += r.seconds;
    for (const Machine& mc : r.machines)
      if (std::find(out.machines.begin(), out.machines.end(), mc) == out.machines.end())
        out.machines.push_back(mc);
    for (const std::string& b : r.backends)
      if (std::find(out.backends.begin(), out.backends.end(), b) == out.backends.end())
        out.backends.push_back(b);
    const std::string group = group_of(r);
    auto& [count, indices] = shard_groups[group];
    if (count != 0 && count != r.shard_count) {
      m.status = Status::InvalidArgument(
          fmt::format("{} is shard {}/{} but another report of the same run has {} shards", src,
                      r.shard_index, r.shard_count, count));
      return m;
    }
    count = r.shard_count;
    if (!indices.insert(r.shard_index).second) {
      m.status = Status::InvalidArgument(
          fmt::format("{}: shard {}/{} given twice", src, r.shard_index, r.shard_count));
      return m;
    }
    if (Status st = check_coverage(r, canonical[i], src, id_at[group]); !st.ok()) {
      m.status = st;
      return m;
    }
    for (const Entry& e : canonical[i]) {
      if (!seen.insert({e.result.case_id, e.result.backend}).second) {
        m.status = Status::InvalidArgument(fmt::format("{}: {} on {} is in two of the reports", src,
                                                       e.result.case_id, e.result.backend));
        return m;
      }
      entries.push_back({&e, 0});
    }
  }
  for (const auto& [group, shards] : shard_groups) {
    const auto& [count, indices] = shards;
    for (int s = 0; s < count; ++s)
      if (!indices.count(s)) {
        m.status = Status::InvalidArgument(
            fmt::format("shard {}/{} is missing (merge every shard of a run)", s, count));
        return m;
      }
  }
  for (auto& [e, rank] : entries)
    rank =
        static_cast<size_t>(std::find(out.backends.begin(), out.backends.end(), e->result.backend) -
                            out.backends.begin());
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.first->index != b.first->index ? a.first->index < b.first->index : a.second < b.second;
  });
  std::set<std::string> cases;
  for (const auto& [e, rank] : entries) {
    out.entries.push_back(*e);
    cases.insert(e->result.case_id);
  }
  out.selected_cases = static_cast<int64_t>(cases.size());
  return m;
}

}  // namespace deltacheck::reports
