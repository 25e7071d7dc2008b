// Comparing two benchmark runs.
#include "harness/bench_compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

namespace deltacheck::harness {
namespace {

double seconds_per_unit(const std::string& unit) {
  if (unit == "ns") return 1e-9;
  if (unit == "us") return 1e-6;
  if (unit == "ms") return 1e-3;
  if (unit == "s") return 1.0;
  return 0.0;
}

double number_or_zero(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const size_t n = x.size();
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

const BenchFigure* find_prefix(const BenchRun& r, const std::string& prefix) {
  for (const BenchFigure& f : r.figures)
    if (f.name.rfind(prefix, 0) == 0 && !f.error) return &f;
  return nullptr;
}

// The value compared for one figure: lower is better for seconds, higher for fractions.
struct Value {
  double v;
  const char* unit;
  bool higher_is_better;
};

Value value_of(const BenchFigure& f, const BenchRun& run, BenchMetric metric) {
  if (metric == BenchMetric::kCeilingFraction) {
    const BenchFigure* matmul = find_prefix(run, "ceiling/matmul_fp32");
    const BenchFigure* copy = find_prefix(run, "ceiling/copy");
    if (f.flops > 0 && matmul && matmul->flops > 0 && &f != matmul)
      return {f.flops / matmul->flops, "of matmul", true};
    if (f.bytes > 0 && copy && copy->bytes > 0 && &f != copy)
      return {f.bytes / copy->bytes, "of copy", true};
  }
  return {f.seconds, "s", false};
}

}  // namespace

Status parse_bench_json(const std::string& text, BenchRun* out) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument("not JSON");
  if (!j.is_object() || !j.contains("benchmarks") || !j["benchmarks"].is_array())
    return Status::InvalidArgument("no \"benchmarks\" array (not Google Benchmark JSON output)");
  *out = BenchRun{};
  if (j.contains("context") && j["context"].is_object()) {
    out->host = j["context"].value("host_name", "");
    out->date = j["context"].value("date", "");
  }
  // Per run name: the iteration runs and the aggregates, so repetitions reduce to their median.
  struct Samples {
    std::vector<double> seconds, flops, bytes;
    double median_seconds = -1, median_flops = 0, median_bytes = 0;
    bool error = false;
  };
  std::vector<std::string> order;
  std::map<std::string, Samples> by_name;
  for (const nlohmann::json& b : j["benchmarks"]) {
    if (!b.is_object() || !b.contains("name") || !b["name"].is_string())
      return Status::InvalidArgument("a benchmark entry without a name");
    const std::string name = b.value("run_name", b["name"].get<std::string>());
    if (!by_name.count(name)) order.push_back(name);
    Samples& s = by_name[name];
    if (b.value("error_occurred", false)) {
      s.error = true;
      continue;
    }
    const double unit = seconds_per_unit(b.value("time_unit", "ns"));
    if (unit == 0.0) return Status::InvalidArgument("unknown time_unit in '" + name + "'");
    const double seconds = number_or_zero(b, "real_time") * unit;
    if (b.value("run_type", "iteration") == "aggregate") {
      if (b.value("aggregate_name", "") != "median") continue;
      s.median_seconds = seconds;
      s.median_flops = number_or_zero(b, "FLOP/s");
      s.median_bytes = number_or_zero(b, "bytes_per_second");
      continue;
    }
    s.seconds.push_back(seconds);
    s.flops.push_back(number_or_zero(b, "FLOP/s"));
    s.bytes.push_back(number_or_zero(b, "bytes_per_second"));
  }
  for (const std::string& name : order) {
    const Samples& s = by_name[name];
    BenchFigure f;
    f.name = name;
    f.error = s.error;
    if (s.median_seconds >= 0) {
      f.seconds = s.median_seconds, f.flops = s.median_flops, f.bytes = s.median_bytes;
    } else if (!s.seconds.empty()) {
      f.seconds = median(s.seconds), f.flops = median(s.flops), f.bytes = median(s.bytes);
    } else {
      f.error = true;
    }
    out->figures.push_back(f);
  }
  return Status::Ok();
}

BenchComparison compare_bench(const BenchRun& old_run, const BenchRun& new_run, double threshold,
                              BenchMetric metric) {
  BenchComparison c;
  std::map<std::string, const BenchFigure*> old_by_name;
  for (const BenchFigure& f : old_run.figures) old_by_name[f.name] = &f;
  for (const BenchFigure& nf : new_run.figures) {
    auto it = old_by_name.find(nf.name);
    if (it == old_by_name.end()) {
      c.only_new.push_back(nf.name);
      continue;
    }
    const BenchFigure& of = *it->second;
    old_by_name.erase(it);
    if (nf.error || of.error) {
      c.errors.push_back(nf.name);
      continue;
    }
    const Value o = value_of(of, old_run, metric), n = value_of(nf, new_run, metric);
    BenchDelta d;
    d.name = nf.name;
    d.old_value = o.v;
    d.new_value = n.v;
    // Both runs must agree on what is compared (a ceiling missing in one falls back to time).
    if (o.unit != n.unit) {
      d.old_value = of.seconds, d.new_value = nf.seconds;
      d.unit = "s";
    } else {
      d.unit = n.unit;
    }
    const bool higher_is_better = std::string(d.unit) != "s";
    if (d.old_value > 0 && d.new_value > 0)
      d.slowdown =
          higher_is_better ? d.old_value / d.new_value - 1.0 : d.new_value / d.old_value - 1.0;
    // Against the ceilings, the ceilings themselves are the yardstick, shown but not judged.
    const bool yardstick =
        metric == BenchMetric::kCeilingFraction && d.name.rfind("ceiling/", 0) == 0;
    d.regression = !yardstick && d.slowdown > threshold;
    c.regressions += d.regression;
    c.rows.push_back(d);
  }
  for (const BenchFigure& f : old_run.figures)
    if (old_by_name.count(f.name)) c.only_old.push_back(f.name);
  return c;
}

std::string format_bench_comparison(const BenchComparison& c, double threshold) {
  auto show = [](double v, const std::string& unit) {
    if (unit != "s") return fmt::format("{:.3f} {}", v, unit);
    if (v >= 1.0) return fmt::format("{:.3f} s", v);
    if (v >= 1e-3) return fmt::format("{:.3f} ms", v * 1e3);
    return fmt::format("{:.3f} us", v * 1e6);
  };
  size_t width = 40;
  for (const BenchDelta& d : c.rows) width = std::max(width, d.name.size());
  std::string out =
      fmt::format("{:<{}}  {:>18}  {:>18}  {:>8}\n", "benchmark", width, "old", "new", "slower");
  for (const BenchDelta& d : c.rows)
    out += fmt::format("{:<{}}  {:>18}  {:>18}  {:>+7.1f}%{}\n", d.name, width,
                       show(d.old_value, d.unit), show(d.new_value, d.unit), 100.0 * d.slowdown,
                       d.regression ? "  REGRESSION" : "");
  for (const std::string& n : c.only_old) out += fmt::format("{:<{}}  only in old\n", n, width);
  for (const std::string& n : c.only_new) out += fmt::format("{:<{}}  only in new\n", n, width);
  for (const std::string& n : c.errors) out += fmt::format("{:<{}}  error in a run\n", n, width);
  out += fmt::format("{} of {} figures more than {:.0f}% slower{}\n", c.regressions, c.rows.size(),
                     100.0 * threshold, c.regressions ? " — REGRESSION" : "");
  return out;
}

}  // namespace deltacheck::harness
