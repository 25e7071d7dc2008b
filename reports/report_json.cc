// report.json: writing and reading the report model. Reading restores everything the other
// formats need, so `report merge` renders shards exactly like one run. Token-error curves are kept
// only for results that are not a pass (they are what the plots show), which keeps the file small.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "reports/report.h"

namespace deltacheck::reports {
namespace {

using json = nlohmann::ordered_json;
using harness::Verdict;

constexpr const char* kSchemaName = "deltacheck-report";

// JSON has no NaN or infinity; they are written as strings and read back.
json num(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  return x;
}

double to_num(const json& j) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
    if (s == "Infinity") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
  }
  if (j.is_null()) return std::numeric_limits<double>::quiet_NaN();
  throw std::invalid_argument("expected a number, got " + j.dump());
}

json nums(const std::vector<double>& v) {
  json a = json::array();
  for (double x : v) a.push_back(num(x));
  return a;
}

std::vector<double> to_nums(const json& j) {
  std::vector<double> v;
  for (const json& x : j) v.push_back(to_num(x));
  return v;
}

json metrics_json(const harness::Metrics& m) {
  return {{"max_abs", num(m.max_abs)},         {"max_index", m.max_index},
          {"rel_rms", num(m.rel_rms)},         {"nmse", num(m.nmse)},
          {"ref_max_abs", num(m.ref_max_abs)}, {"count", m.count},
          {"non_finite", m.non_finite}};
}

// The rounding-bias check of an output stored in bf16 / fp16 (absent where it was not checked,
// and in reports written before it: read back as unchecked).
void add_bias(json& j, const harness::RoundingBias& b) {
  if (!b.checked) return;
  j["rounding_bias"] = {{"biased", b.biased},
                        {"direction", harness::bias_direction_name(b.direction)},
                        {"fraction", num(b.fraction)},
                        {"z", num(b.z)},
                        {"n", b.n},
                        {"rows", b.rows}};
}

harness::RoundingBias bias_from(const json& j) {
  harness::RoundingBias b;
  if (!j.contains("rounding_bias")) return b;
  const json& r = j.at("rounding_bias");
  b.checked = true;
  b.biased = r.at("biased").get<bool>();
  const std::string direction = r.at("direction").get<std::string>();
  bool known = false;
  for (harness::BiasDirection d :
       {harness::BiasDirection::kTowardZero, harness::BiasDirection::kAwayFromZero,
        harness::BiasDirection::kUp, harness::BiasDirection::kDown})
    if (direction == harness::bias_direction_name(d)) b.direction = d, known = true;
  if (!known) throw std::invalid_argument("unknown rounding-bias direction '" + direction + "'");
  b.fraction = to_num(r.at("fraction"));
  b.z = to_num(r.at("z"));
  b.n = r.at("n").get<int64_t>();
  b.rows = r.at("rows").get<int64_t>();
  return b;
}

harness::Metrics metrics_from(const json& j) {
  harness::Metrics m;
  m.max_abs = to_num(j.at("max_abs"));
  m.max_index = j.at("max_index").get<int64_t>();
  m.rel_rms = to_num(j.at("rel_rms"));
  m.nmse = to_num(j.at("nmse"));
  m.ref_max_abs = to_num(j.at("ref_max_abs"));
  m.count = j.at("count").get<int64_t>();
  m.non_finite = j.at("non_finite").get<int64_t>();
  return m;
}

json threshold_json(const harness::Threshold& t) {
  return {
      {"rel_rms", num(t.rel_rms)}, {"max_abs", num(t.max_abs)}, {"resolution", num(t.resolution)}};
}

harness::Threshold threshold_from(const json& j) {
  return {to_num(j.at("rel_rms")), to_num(j.at("max_abs")), to_num(j.at("resolution"))};
}

json tensor_json(const harness::TensorReport& t, bool curves) {
  json seqs = json::array();
  for (const harness::SeqReport& s : t.seqs) {
    seqs.push_back({{"seq", s.seq},
                    {"length", s.length},
                    {"ok", s.ok},
                    {"first_bad_token", s.first_bad_token},
                    {"metrics", metrics_json(s.metrics)},
                    {"threshold", threshold_json(s.threshold)}});
    add_bias(seqs.back(), s.bias);
  }
  json j = {{"name", t.name},
            {"dtype", t.dtype},
            {"ok", t.ok},
            {"exact", t.exact},
            {"mismatches", t.mismatches},
            {"metrics", metrics_json(t.metrics)},
            {"baseline", metrics_json(t.baseline)},
            {"baseline_name", t.baseline_name},
            {"threshold", threshold_json(t.threshold)},
            {"seqs", seqs}};
  add_bias(j, t.bias);
  if (curves && !t.token_error.empty()) j["token_error"] = nums(t.token_error);
  if (curves && !t.head_token_error.empty()) {
    json heads = json::array();
    for (const auto& h : t.head_token_error) heads.push_back(nums(h));
    j["head_token_error"] = heads;
  }
  return j;
}

harness::TensorReport tensor_from(const json& j) {
  harness::TensorReport t;
  t.name = j.at("name").get<std::string>();
  t.dtype = j.at("dtype").get<std::string>();
  t.ok = j.at("ok").get<bool>();
  t.exact = j.at("exact").get<bool>();
  t.mismatches = j.at("mismatches").get<int64_t>();
  t.metrics = metrics_from(j.at("metrics"));
  t.baseline = metrics_from(j.at("baseline"));
  t.baseline_name = j.value("baseline_name", std::string());
  t.threshold = threshold_from(j.at("threshold"));
  t.bias = bias_from(j);
  for (const json& s : j.at("seqs")) {
    harness::SeqReport sr;
    sr.seq = s.at("seq").get<int64_t>();
    sr.length = s.at("length").get<int64_t>();
    sr.ok = s.at("ok").get<bool>();
    sr.first_bad_token = s.at("first_bad_token").get<int64_t>();
    sr.metrics = metrics_from(s.at("metrics"));
    sr.threshold = threshold_from(s.at("threshold"));
    sr.bias = bias_from(s);
    t.seqs.push_back(sr);
  }
  if (j.contains("token_error")) t.token_error = to_nums(j.at("token_error"));
  if (j.contains("head_token_error"))
    for (const json& h : j.at("head_token_error")) t.head_token_error.push_back(to_nums(h));
  return t;
}

json entry_json(const Entry& e) {
  const harness::CaseResult& r = e.result;
  const bool curves = r.verdict != Verdict::kPass;
  json tensors = json::array();
  for (const auto& t : r.tensors) tensors.push_back(tensor_json(t, curves));
  json probes = json::array();
  for (const auto& p : r.probes)
    probes.push_back(
        {{"name", p.name}, {"verdict", harness::verdict_name(p.verdict)}, {"detail", p.detail}});
  json j = {{"index", e.index},
            {"case_id", r.case_id},
            {"op", r.op},
            {"family", e.family},
            {"seed", e.seed},
            {"backend", r.backend},
            {"precision", r.precision},
            {"verdict", harness::verdict_name(r.verdict)},
            {"message", r.message},
            {"worst",
             {{"tensor", r.worst_tensor},
              {"rel_rms", num(r.worst_rel_rms)},
              {"threshold", num(r.worst_threshold)}}},
            {"margin", num(r.margin)},
            {"leak", nullptr},
            {"seq_lengths", r.seq_lengths},
            {"tensors", tensors},
            {"probes", probes},
            {"rerun", e.rerun},
            {"dump", e.dump},
            {"seconds", {{"backend", r.seconds_backend}, {"total", r.seconds_total}}}};
  if (r.leak_seq >= 0)
    j["leak"] = {{"seq", r.leak_seq}, {"token", r.leak_token}, {"max_abs", num(r.leak_max_abs)}};
  return j;
}

Entry entry_from(const json& j) {
  Entry e;
  harness::CaseResult& r = e.result;
  e.index = j.at("index").get<int64_t>();
  r.case_id = j.at("case_id").get<std::string>();
  r.op = j.at("op").get<std::string>();
  e.family = j.at("family").get<std::string>();
  e.seed = j.at("seed").get<int64_t>();
  r.backend = j.at("backend").get<std::string>();
  r.precision = j.value("precision", std::string("fp32"));
  r.verdict = harness::verdict_from_name(j.at("verdict").get<std::string>());
  r.message = j.at("message").get<std::string>();
  const json& w = j.at("worst");
  r.worst_tensor = w.at("tensor").get<std::string>();
  r.worst_rel_rms = to_num(w.at("rel_rms"));
  r.worst_threshold = to_num(w.at("threshold"));
  r.margin = to_num(j.at("margin"));
  if (const json& l = j.at("leak"); !l.is_null()) {
    r.leak_seq = l.at("seq").get<int64_t>();
    r.leak_token = l.at("token").get<int64_t>();
    r.leak_max_abs = to_num(l.at("max_abs"));
  }
  r.seq_lengths = j.at("seq_lengths").get<std::vector<int64_t>>();
  for (const json& t : j.at("tensors")) r.tensors.push_back(tensor_from(t));
  for (const json& p : j.at("probes"))
    r.probes.push_back({p.at("name").get<std::string>(),
                        harness::verdict_from_name(p.at("verdict").get<std::string>()),
                        p.at("detail").get<std::string>()});
  e.rerun = j.at("rerun").get<std::string>();
  e.dump = j.at("dump").get<std::string>();
  r.seconds_backend = j.at("seconds").at("backend").get<double>();
  r.seconds_total = j.at("seconds").at("total").get<double>();
  return e;
}

}  // namespace

std::string format_json(const Report& r) {
  json machines = json::array();
  for (const Machine& m : r.machines)
    machines.push_back({{"hostname", m.hostname}, {"cores", m.cores}, {"cpu_model", m.cpu_model}});
  json fail_on = json::array();
  for (Verdict v : r.fail_on) fail_on.push_back(harness::verdict_name(v));
  // Totals per backend and verdict: redundant with the entries, there for readers (jq, CI).
  json totals = json::object();
  for (const std::string& b : r.backends) {
    json t = json::object();
    for (Verdict v : {Verdict::kPass, Verdict::kFail, Verdict::kLeak, Verdict::kError,
                      Verdict::kUnsupported, Verdict::kSkipped})
      t[harness::verdict_name(v)] = 0;
    totals[b] = t;
  }
  for (const Entry& e : r.entries) {
    // An entry's backend may be missing from r.backends (a merged or hand-edited report).
    json& t = totals[e.result.backend];
    if (!t.is_object()) t = json::object();
    const char* v = harness::verdict_name(e.result.verdict);
    t[v] = t.value(v, 0) + 1;
    // A pass needs its probes: those whose every probe the backend declined, counted apart.
    if (e.result.verdict == Verdict::kPass && !harness::declined_probes(e.result).empty())
      t["pass_without_probes"] = t.value("pass_without_probes", 0) + 1;
  }
  const json j = {
      {"schema", kSchemaName},
      {"schema_version", kReportSchemaVersion},
      {"tool",
       {{"name", "deltacheck"}, {"version", r.tool_version}, {"git_revision", r.git_revision}}},
      {"tolerance", r.tolerance},
      {"selection", r.selection},
      {"backends", r.backends},
      {"selected_cases", r.selected_cases},
      {"gate", {{"fail_on", fail_on}, {"failed", fails_gate(r)}}},
      {"totals", totals},
      {"machines", machines},
      {"run",
       {{"command", r.command},
        {"shard", r.shard_count > 1 ? json{{"index", r.shard_index}, {"count", r.shard_count}}
                                    : json(nullptr)},
        {"merged_from", r.merged_from},
        {"started_at", r.started_at},
        {"seconds", r.seconds}}},
  };
  // One result per line: greppable and diffable, and far smaller than one number per line.
  // Strings are valid UTF-8 by now (write_report_files cleans them); replacing what is not
  // keeps a direct caller from throwing after a whole run.
  constexpr auto kReplace = json::error_handler_t::replace;
  std::string text = j.dump(1, ' ', false, kReplace);
  text.resize(text.size() - 2);  // "\n}"
  text += ",\n \"results\": [";
  for (size_t i = 0; i < r.entries.size(); ++i)
    text += (i == 0 ? "\n  " : ",\n  ") + entry_json(r.entries[i]).dump(-1, ' ', false, kReplace);
  text += r.entries.empty() ? "]\n}\n" : "\n ]\n}\n";
  return text;
}

LoadedReport parse_json(const std::string& text, const std::string& source) {
  LoadedReport lr;
  Report& r = lr.report;
  try {
    const json j = json::parse(text);
    if (j.value("schema", "") != kSchemaName) {
      lr.status = Status::InvalidArgument(source + " is not a deltacheck report.json");
      return lr;
    }
    const int version = j.at("schema_version").get<int>();
    if (version != kReportSchemaVersion) {
      lr.status = Status::InvalidArgument(
          fmt::format("{} has report schema version {}; this deltacheck reads version {}", source,
                      version, kReportSchemaVersion));
      return lr;
    }
    r.tool_version = j.at("tool").at("version").get<std::string>();
    r.git_revision = j.at("tool").at("git_revision").get<std::string>();
    r.tolerance = j.at("tolerance").get<std::string>();
    r.selection = j.at("selection");
    r.backends = j.at("backends").get<std::vector<std::string>>();
    r.selected_cases = j.at("selected_cases").get<int64_t>();
    for (const json& v : j.at("gate").at("fail_on"))
      r.fail_on.push_back(harness::verdict_from_name(v.get<std::string>()));
    for (const json& m : j.at("machines"))
      r.machines.push_back({m.at("hostname").get<std::string>(), m.at("cores").get<int>(),
                            m.at("cpu_model").get<std::string>()});
    const json& run = j.at("run");
    r.command = run.at("command").get<std::string>();
    if (const json& s = run.at("shard"); !s.is_null()) {
      r.shard_index = s.at("index").get<int>();
      r.shard_count = s.at("count").get<int>();
    }
    r.merged_from = run.at("merged_from").get<std::vector<std::string>>();
    r.started_at = run.at("started_at").get<std::string>();
    r.seconds = run.at("seconds").get<double>();
    for (const json& e : j.at("results")) r.entries.push_back(entry_from(e));
  } catch (const std::exception& e) {
    lr.status = Status::InvalidArgument(source + ": malformed report.json: " + e.what());
  }
  return lr;
}

}  // namespace deltacheck::reports
