// Shrinking a failing case by its operation's schema (harness/shrink.h): greedy, first candidate
// that keeps the failure class wins, candidates in a fixed order, so the result is a function of
// the case and the backend's verdicts.
#include "harness/shrink.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <set>

#include "cases/op.h"
#include "harness/limits.h"
#include "harness/runner.h"

namespace deltacheck::harness {
namespace {

using cases::Case;
using cases::Layout;
using cases::ParamSpec;

// The message's kind: up to its first ':' or '(', numbers replaced by N ("left N of N elements of
// 'o' unwritten"), so that the same error on a smaller case has the same kind.
std::string message_kind(const std::string& m) {
  std::string out;
  for (size_t i = 0; i < m.size(); ++i) {
    const char ch = m[i];
    if (ch == ':' || ch == '(' || ch == ';') break;
    if (std::isdigit(static_cast<unsigned char>(ch))) {
      while (i + 1 < m.size() &&
             (std::isdigit(static_cast<unsigned char>(m[i + 1])) || m[i + 1] == '.' ||
              m[i + 1] == 'e' || m[i + 1] == '-' || m[i + 1] == '+'))
        ++i;
      out += 'N';
      continue;
    }
    out += ch;
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == ',')) out.pop_back();
  return out;
}

std::string layout_text(Layout::Kind kind, const std::vector<int64_t>& lengths) {
  std::string s;
  for (int64_t l : lengths) s += (s.empty() ? "" : ",") + std::to_string(l);
  if (kind == Layout::Kind::kSingle) return "single[" + s + "]";
  if (kind == Layout::Kind::kBatch)
    return fmt::format("batch[{}x{}]", lengths.size(), lengths.empty() ? 0 : lengths.front());
  return "packed[" + s + "]";
}

// Shorter lengths for one sequence of `l` tokens, smallest first: 1, half, 64 fewer (keeps the
// tail chunk's length: T % 64 is where the bugs of tail chunks live), ..., one fewer.
std::vector<int64_t> shorter(int64_t l) {
  std::vector<int64_t> out;
  // Then ever smaller cuts (a quarter, an eighth, ...): where only a long sequence fails, the
  // search takes logarithmically many steps, not one per token.
  for (int64_t s : {int64_t{1}, l / 2, l - 64, l - l / 4, l - l / 8, l - l / 16, l - l / 32, l - 1})
    if (s >= 1 && s < l && std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  return out;
}

void add_unique(std::vector<std::string>& out, std::string s, const std::string& not_this) {
  if (s != not_this && std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
}

// A choice's rank: the default 0, the others 1 + their place in the list.
int choice_rank(const ParamSpec& p, const std::string& v) {
  if (v == p.default_value) return 0;
  for (size_t i = 0; i < p.choices.size(); ++i)
    if (p.choices[i] == v) return 1 + static_cast<int>(i);
  return 1 + static_cast<int>(p.choices.size());
}

// Smaller values of one parameter, smallest first (empty: nothing to try).
std::vector<std::string> smaller_values(const ParamSpec& p, const std::string& v) {
  std::vector<std::string> out;
  if (p.key == "seed") return out;  // other inputs, not a smaller case
  if (p.kind == ParamSpec::Kind::kInt) {
    const int64_t x = std::stoll(v);
    int64_t def = x;
    try {
      def = std::stoll(p.default_value);
    } catch (const std::exception&) {
    }
    // A flag (a range of a few values) at its default stays: the default is the plain case.
    if (x == def && p.max - p.min <= 8) return out;
    for (int64_t s : {p.min, def, x / 2, x - x / 4, x - x / 8, x - 1})
      if (s >= p.min && s < x) add_unique(out, std::to_string(s), v);
  } else if (p.kind == ParamSpec::Kind::kChoice) {
    std::vector<std::pair<int, std::string>> ranked;
    for (const std::string& c : p.choices)
      if (choice_rank(p, c) < choice_rank(p, v)) ranked.emplace_back(choice_rank(p, c), c);
    std::sort(ranked.begin(), ranked.end());
    for (auto& rc : ranked) out.push_back(rc.second);
  } else if (p.kind == ParamSpec::Kind::kLayout) {
    out = smaller_layouts(v);
  }
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

CaseResult run_one(const Case& c, Backend& backend, const ShrinkOptions& o) {
  RunOptions ro;
  ro.probes = o.probes;
  ro.max_memory_bytes = o.max_memory_bytes;
  return std::move(run_all({c}, {&backend}, ro, nullptr).front());
}

}  // namespace

std::string FailureClass::str() const {
  return kind.empty() ? verdict_name(verdict)
                      : std::string(verdict_name(verdict)) + " (" + kind + ")";
}

FailureClass failure_class(const CaseResult& r) {
  FailureClass f{r.verdict, ""};
  if (r.verdict == Verdict::kFail || r.verdict == Verdict::kLeak) {
    for (const TensorReport& t : r.tensors)
      if (!t.ok) {
        f.kind = t.name;
        return f;
      }
    for (const ProbeReport& p : r.probes)
      if (p.verdict == r.verdict) {
        f.kind = "probe " + p.name;
        return f;
      }
  }
  if (r.verdict == Verdict::kFail || r.verdict == Verdict::kLeak || r.verdict == Verdict::kError)
    f.kind = message_kind(r.message);
  return f;
}

std::string CaseSize::str() const {
  return fmt::format("{} seq{}, {} token{}, {} of inputs", sequences, sequences == 1 ? "" : "s",
                     tokens, tokens == 1 ? "" : "s",
                     format_bytes(static_cast<double>(input_bytes)));
}

CaseSize case_size(const Case& c) {
  CaseSize s;
  if (c.has_layout()) {
    s.sequences = c.layout().num_seqs();
    s.tokens = c.layout().total_tokens();
  }
  const cases::OpDefinition& d = cases::find_op(c.op());
  if (d.input_bytes) s.input_bytes = d.input_bytes(c);
  s.id_chars = static_cast<int64_t>(c.id().size());
  return s;
}

std::vector<std::string> smaller_layouts(const std::string& text) {
  const Layout l = Layout::parse(text);
  const std::vector<int64_t> len = l.lengths;
  const size_t n = len.size();
  std::vector<std::string> out;
  const std::string canonical = l.str();
  auto add = [&](Layout::Kind k, const std::vector<int64_t>& ls) {
    if (!ls.empty()) add_unique(out, Layout::parse(layout_text(k, ls)).str(), canonical);
  };
  if (l.kind == Layout::Kind::kPacked) {
    // Fewer sequences: drop halves, quarters, ... then single ones (delta debugging's order).
    for (size_t chunk = n / 2; chunk >= 1; chunk /= 2) {
      for (size_t at = 0; at < n; at += chunk) {
        std::vector<int64_t> rest(len.begin(), len.begin() + at);
        rest.insert(rest.end(), len.begin() + std::min(n, at + chunk), len.end());
        add(l.kind, rest);
      }
      if (chunk == 1) break;
    }
    if (n == 1 && len[0] > 0) add(Layout::Kind::kSingle, len);  // no cu_seqlens
    // Shorter sequences, one at a time (once there are few: a pack of thousands loses sequences
    // first, and each candidate is a layout of its size).
    for (size_t i = 0; i < n && n <= 64; ++i)
      for (int64_t s : shorter(len[i])) {
        std::vector<int64_t> ls = len;
        ls[i] = s;
        add(l.kind, ls);
      }
  } else if (l.kind == Layout::Kind::kBatch) {
    for (size_t b : {size_t{1}, n / 2, n - 1})
      if (b >= 1 && b < n) add(l.kind, std::vector<int64_t>(b, len[0]));
    if (n == 1 && len[0] > 0) add(Layout::Kind::kSingle, len);
    for (int64_t s : shorter(len.empty() ? 0 : len[0])) add(l.kind, std::vector<int64_t>(n, s));
  } else {
    for (int64_t s : shorter(len.empty() ? 0 : len[0])) add(l.kind, {s});
  }
  return out;
}

std::vector<std::pair<std::string, Case>> shrink_candidates(const Case& c) {
  std::vector<std::pair<std::string, Case>> out;
  const cases::OpSchema& schema = cases::find_schema(c.op());
  // The layout first (the biggest reductions), then the parameters in schema order.
  std::vector<const ParamSpec*> order;
  for (const ParamSpec& p : schema.params)
    if (p.kind == ParamSpec::Kind::kLayout) order.push_back(&p);
  for (const ParamSpec& p : schema.params)
    if (p.kind != ParamSpec::Kind::kLayout) order.push_back(&p);
  for (const ParamSpec* p : order) {
    if (!c.has(p->key)) continue;
    const std::string& now = c.get(p->key);
    for (const std::string& v : smaller_values(*p, now)) {
      std::vector<std::pair<std::string, std::string>> params = c.params();
      bool found = false;
      for (auto& kv : params)
        if (kv.first == p->key) kv.second = v, found = true;
      if (!found) params.emplace_back(p->key, v);
      StatusOr<Case> made = Case::make(c.op(), params);
      if (!made.ok() || made.value().id() == c.id()) continue;
      out.emplace_back(p->key + " " + now + " -> " + v, made.take());
    }
  }
  return out;
}

ShrinkResult shrink(const Case& c, Backend& backend, const ShrinkOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  ShrinkResult res;
  res.original = run_one(c, backend, o);
  res.minimal = res.original;
  res.kept = failure_class(res.original);
  res.before = res.after = case_size(c);
  if (!is_failure(res.original.verdict)) {
    res.status = Status::InvalidArgument(fmt::format(
        "case '{}' is {} on {}: nothing to shrink (shrink takes a case that fails, leaks or "
        "errors)",
        c.id(), verdict_name(res.original.verdict), backend.name()));
    res.seconds = seconds_since(t0);
    return res;
  }
  Case now = c;
  std::set<std::string> tried{c.id()};
  for (bool progress = true; progress;) {
    progress = false;
    for (const auto& [change, cand] : shrink_candidates(now)) {
      if (!tried.insert(cand.id()).second) continue;
      // A parameter at its default leaves it only to make the case smaller: one the case does not
      // use (calls for cache=prefill) stays, and the minimal id says only what matters.
      const std::string key = change.substr(0, change.find(' '));
      const cases::OpSchema& schema = cases::find_schema(now.op());
      const CaseSize was = case_size(now), would = case_size(cand);
      const bool at_default =
          std::any_of(schema.params.begin(), schema.params.end(), [&](const ParamSpec& p) {
            return p.key == key && p.kind == ParamSpec::Kind::kInt &&
                   now.get(key) == p.default_value;
          });
      if (at_default && would.input_bytes >= was.input_bytes && would.tokens >= was.tokens)
        continue;
      if ((o.max_runs > 0 && res.runs >= o.max_runs) ||
          (o.budget_seconds > 0 && seconds_since(t0) >= o.budget_seconds)) {
        res.complete = false;
        break;
      }
      ++res.runs;
      CaseResult r = run_one(cand, backend, o);
      if (failure_class(r) != res.kept) continue;
      now = cand;
      res.minimal = std::move(r);
      res.trail.push_back({change, now.id(), case_size(now), res.minimal.message});
      if (o.on_step) o.on_step(res.trail.back());
      progress = true;
      break;
    }
    if (!res.complete) break;
  }
  res.after = case_size(now);
  res.seconds = seconds_since(t0);
  return res;
}

}  // namespace deltacheck::harness
