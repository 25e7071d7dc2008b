// Hunting (harness/hunt.h): weighted draws from each operation's schema, run, and the first
// failure of each class shrunk.
#include "harness/hunt.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>

#include "cases/id_filter.h"
#include "cases/op.h"
#include "cases/rng.h"
#include "harness/runner.h"

namespace deltacheck::harness {
namespace {

using cases::Case;
using cases::ParamSpec;

// Random words of one draw: Philox by (seed, "hunt/<index>"), one counter per word.
class Draw {
 public:
  Draw(uint64_t seed, uint64_t index, const char* what)
      : st_(seed, std::string("hunt/") + what + "/" + std::to_string(index)) {}
  double u() { return st_.uniform(next_++); }
  int64_t pick(int64_t n) { return std::min<int64_t>(n - 1, static_cast<int64_t>(u() * n)); }
  int64_t range(int64_t lo, int64_t hi) { return lo + pick(hi - lo + 1); }  // inclusive
  template <typename T>
  const T& one_of(const std::vector<T>& v) {
    return v[static_cast<size_t>(pick(static_cast<int64_t>(v.size())))];
  }

 private:
  cases::Stream st_;
  uint64_t next_ = 0;
};

// Lengths where bugs of 2026 lived: around the chunk sizes 16, 64 and 128.
const std::vector<int64_t> kEdgeLengths{1, 2, 15, 16, 17, 63, 64, 65, 127, 128, 129};

int64_t edge_or_random(Draw& d) { return d.u() < 0.7 ? d.one_of(kEdgeLengths) : d.range(1, 300); }

// A tail-sweep length: m full chunks of 64 and a tail of 1..16 or 63..65 tokens.
int64_t tail_sweep(Draw& d) {
  const int64_t tail = d.u() < 0.75 ? d.range(1, 16) : d.range(63, 65);
  return 64 * d.range(0, 2) + tail;
}

std::string packed(const std::vector<int64_t>& ls) {
  std::string s;
  for (int64_t l : ls) s += (s.empty() ? "" : ",") + std::to_string(l);
  return "packed[" + s + "]";
}

std::string draw_int(Draw& d, const ParamSpec& p) {
  if (p.key == "seed") return std::to_string(d.range(0, (int64_t{1} << 31) - 1));
  int64_t def = p.min;
  try {
    def = std::stoll(p.default_value);
  } catch (const std::exception&) {
  }
  if (p.max - p.min <= 8) return std::to_string(d.range(p.min, p.max));  // flags, small counts
  if (d.u() < 0.4) return p.default_value;
  // Around the default: halves, doubles, odd dims (64 -> 60, 100), the minimum; capped at twice
  // the default so a draw stays seconds, not minutes.
  const std::vector<int64_t> near{p.min,   def / 2, def * 2,         def + 1,
                                  def - 1, def - 4, def * 3 / 2 + 4, def * 4};
  const int64_t cap = std::max<int64_t>(def * 2, p.min + 3);
  const int64_t v = d.one_of(near);
  return std::to_string(std::clamp<int64_t>(v, p.min, std::min(p.max, cap)));
}

}  // namespace

std::string draw_layout(uint64_t seed, uint64_t index) {
  Draw d(seed, index, "layout");
  const double f = d.u();
  std::vector<int64_t> ls;
  if (f < 0.25) {  // tail sweeps
    if (d.u() < 0.5) return "single[" + std::to_string(tail_sweep(d)) + "]";
    for (int64_t i = d.range(2, 3); i > 0; --i) ls.push_back(tail_sweep(d));
  } else if (f < 0.40) {  // many tiny sequences
    for (int64_t i = d.range(8, 64); i > 0; --i) ls.push_back(d.range(1, 3));
  } else if (f < 0.60) {  // zero-length ones at the start, middle or end
    for (int64_t i = d.range(2, 4); i > 0; --i) ls.push_back(edge_or_random(d));
    const int64_t where = d.pick(3);
    const size_t at = where == 0 ? 0 : where == 1 ? ls.size() / 2 : ls.size();
    ls.insert(ls.begin() + static_cast<std::ptrdiff_t>(at), 0);
    if (d.u() < 0.3) ls.insert(ls.begin() + static_cast<std::ptrdiff_t>(at), 0);
  } else if (f < 0.70) {  // one long among short ones
    for (int64_t i = d.range(1, 4); i > 0; --i) ls.push_back(d.range(1, 20));
    ls.insert(ls.begin() + d.pick(static_cast<int64_t>(ls.size()) + 1), d.range(200, 1100));
  } else if (f < 0.80) {  // equal rows, no cu_seqlens
    return fmt::format("batch[{}x{}]", d.range(2, 4), edge_or_random(d));
  } else {  // a mix of edge lengths
    for (int64_t i = d.range(2, 6); i > 0; --i) ls.push_back(edge_or_random(d));
  }
  return packed(ls);
}

StatusOr<Case> draw_case(uint64_t seed, uint64_t index, const std::vector<std::string>& ops) {
  Draw d(seed, index, "case");
  std::vector<const cases::OpSchema*> schemas;
  for (const cases::OpSchema& s : cases::op_schemas())
    if (ops.empty() || std::find(ops.begin(), ops.end(), s.op) != ops.end()) schemas.push_back(&s);
  if (schemas.empty()) return Status::InvalidArgument("no operation to draw from");
  const cases::OpSchema& s = *d.one_of(schemas);
  std::vector<std::pair<std::string, std::string>> params;
  for (const ParamSpec& p : s.params) {
    std::string v = p.default_value;
    switch (p.kind) {
      case ParamSpec::Kind::kLayout:
        v = draw_layout(seed, index);
        break;
      case ParamSpec::Kind::kInt:
        v = draw_int(d, p);
        break;
      case ParamSpec::Kind::kChoice:
        if (d.u() >= 0.3 && !p.choices.empty()) v = d.one_of(p.choices);
        break;
      case ParamSpec::Kind::kText:
        break;
    }
    params.emplace_back(p.key, v);
  }
  return Case::make(s.op, params);
}

std::string HuntFinding::minimal_id() const {
  return shrunk.status.ok() && !shrunk.minimal.case_id.empty() ? shrunk.minimal.case_id
                                                               : found.case_id;
}

HuntResult hunt(Backend& backend, const HuntOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (const std::string& op : o.ops)
    if (StatusOr<const cases::OpSchema*> s = cases::lookup_schema(op); !s.ok())
      throw std::invalid_argument(s.status().message());
  if (o.shard_count < 1 || o.shard_index < 0 || o.shard_index >= o.shard_count)
    throw std::invalid_argument(
        fmt::format("shard {}/{}: expected 0 <= I < N", o.shard_index, o.shard_count));
  if (o.budget_seconds <= 0 && o.max_cases <= 0)
    throw std::invalid_argument("a hunt needs a budget (seconds) or a number of cases");
  std::optional<cases::IdFilter> filter;
  if (!o.filter.empty()) filter.emplace(o.filter, "--filter");
  RunOptions ro;
  ro.probes = o.probes;
  ro.max_memory_bytes = o.max_memory_bytes;
  HuntResult res;
  for (uint64_t k = 0;; ++k) {
    if ((o.budget_seconds > 0 && elapsed() >= o.budget_seconds) ||
        (o.max_cases > 0 && res.run >= o.max_cases) ||
        (o.max_findings > 0 && static_cast<int64_t>(res.findings.size()) >= o.max_findings))
      break;
    const uint64_t index = static_cast<uint64_t>(o.shard_index) + k * o.shard_count;
    ++res.drawn;
    StatusOr<Case> drawn = draw_case(o.seed, index, o.ops);
    if (!drawn.ok()) {
      ++res.rejected;
      continue;
    }
    const Case& c = drawn.value();
    if (filter && !filter->matches(c.id())) {
      ++res.filtered;
      continue;
    }
    CaseResult r = std::move(run_all({c}, {&backend}, ro, nullptr).front());
    // A draw whose every expected output is zero (state=none with beta=zero) cannot judge any
    // backend: the draw's fault, refused like a draw the schema refuses.
    if (r.verdict == Verdict::kError && r.message.rfind("degenerate expectation", 0) == 0) {
      ++res.rejected;
      continue;
    }
    ++res.run;
    if (r.verdict == Verdict::kUnsupported || r.verdict == Verdict::kSkipped) ++res.unsupported;
    if (is_failure(r.verdict)) {
      ++res.failures;
      const FailureClass cls = failure_class(r);
      const bool known = std::any_of(res.findings.begin(), res.findings.end(),
                                     [&](const HuntFinding& f) { return f.kind == cls; });
      if (!known) {
        HuntFinding f{r, cls, {}, res.run, elapsed()};
        if (o.shrink) {
          ShrinkOptions so = o.shrink_options;
          so.probes = o.probes;
          so.max_memory_bytes = o.max_memory_bytes;
          f.shrunk = shrink(c, backend, so);
        } else {
          f.shrunk.status = Status::Unsupported("not shrunk");
        }
        res.findings.push_back(std::move(f));
      }
    }
    if (o.on_case) o.on_case(r, res.run, static_cast<int64_t>(res.findings.size()));
  }
  res.seconds = elapsed();
  return res;
}

}  // namespace deltacheck::harness
