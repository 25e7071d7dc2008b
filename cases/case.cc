// Case ids: parsing, canonical formatting, validation against the op schemas.
#include "cases/case.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <limits>
#include <utility>

namespace deltacheck::cases {
namespace {

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

bool parse_int(const std::string& s, int64_t& out) {
  if (s.empty() || s.size() > 20) return false;
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size()) return false;
  int64_t v = 0;
  for (; i < s.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
    const int d = s[i] - '0';
    // A hostile id may hold any number of digits: refuse what int64 cannot hold (no overflow).
    if (v > (std::numeric_limits<int64_t>::max() - d) / 10) return false;
    v = v * 10 + d;
  }
  out = s[0] == '-' ? -v : v;
  return true;
}

// User text quoted in an error: at most ~120 characters, control bytes escaped, so that a
// hostile id still gives one short line.
std::string excerpt(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 120; ++i) {
    const unsigned char ch = static_cast<unsigned char>(s[i]);
    if (ch < 0x20 || ch >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", ch);
      out += buf;
    } else {
      out += s[i];
    }
  }
  if (s.size() > 120) out += "... (" + std::to_string(s.size()) + " characters)";
  return out;
}

Status id_error(std::string message) { return Status::InvalidArgument(std::move(message)); }

// Case ids travel through shells, file names, HDF5 group names and JSON reports: printable
// ASCII only.
Status check_printable(const std::string& id) {
  for (size_t i = 0; i < id.size(); ++i) {
    const unsigned char ch = static_cast<unsigned char>(id[i]);
    if (ch < 0x20 || ch >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "0x%02X", ch);
      return id_error("case id '" + excerpt(id) + "': byte " + buf + " at position " +
                      std::to_string(i) + " is not printable ASCII");
    }
  }
  return Status::Ok();
}

// Splits "a=1,b=packed[1,2],c=3" at top-level commas.
StatusOr<std::vector<std::string>> split_top(const std::string& s, const std::string& whole) {
  std::vector<std::string> parts;
  int depth = 0;
  std::string cur;
  for (char ch : s) {
    if (ch == '[') ++depth;
    if (ch == ']' && --depth < 0)
      return id_error("case id '" + excerpt(whole) + "': unbalanced ']'");
    if (ch == ',' && depth == 0) {
      parts.push_back(trim(cur));
      cur.clear();
    } else {
      cur += ch;
    }
  }
  if (depth != 0) return id_error("case id '" + excerpt(whole) + "': unbalanced '['");
  if (!trim(cur).empty() || !parts.empty()) parts.push_back(trim(cur));
  return parts;
}

StatusOr<std::string> canonical_value(const ParamSpec& spec, const std::string& raw,
                                      const std::string& op) {
  const std::string where = "parameter '" + spec.key + "' of " + op;
  switch (spec.kind) {
    case ParamSpec::Kind::kInt: {
      int64_t v = 0;
      if (!parse_int(raw, v)) {
        // Digits that int64 cannot hold are a number out of range, not "not an integer".
        const size_t digits = raw.find_first_not_of("0123456789", raw[0] == '-' ? 1 : 0);
        if (digits == std::string::npos && raw.size() > (raw[0] == '-' ? 1u : 0u))
          return id_error(where + ": " + excerpt(raw) + " is outside [" + std::to_string(spec.min) +
                          ", " + std::to_string(spec.max) + "]");
        return id_error(where + ": '" + excerpt(raw) + "' is not an integer");
      }
      if (v < spec.min || v > spec.max)
        return id_error(where + ": " + raw + " is outside [" + std::to_string(spec.min) + ", " +
                        std::to_string(spec.max) + "]");
      return std::to_string(v);
    }
    case ParamSpec::Kind::kChoice: {
      if (std::find(spec.choices.begin(), spec.choices.end(), raw) == spec.choices.end()) {
        std::string list;
        for (const auto& c : spec.choices) list += (list.empty() ? "" : "|") + c;
        return id_error(where + ": '" + excerpt(raw) + "' is not one of " + list);
      }
      return raw;
    }
    case ParamSpec::Kind::kLayout: {
      StatusOr<Layout> layout = Layout::from_text(raw);
      if (!layout.ok()) return layout.status();
      return layout.value().str();
    }
    case ParamSpec::Kind::kText:
      if (raw.find_first_of("(),=") != std::string::npos)
        return id_error(where + ": '" + excerpt(raw) + "' may not contain ( ) , =");
      return raw;
  }
  return raw;
}

}  // namespace

// The edge between errors as values and callers that take exceptions: CaseIdError with the
// status's message.
template <typename T>
T value_or_throw(StatusOr<T> v) {
  if (!v.ok()) throw CaseIdError(v.status().message());
  return v.take();
}

StatusOr<const OpSchema*> lookup_schema(const std::string& op) {
  for (const OpSchema& s : op_schemas())
    if (s.op == op) return &s;
  std::string known;
  for (const OpSchema& s : op_schemas()) known += (known.empty() ? "" : ", ") + s.op;
  return id_error("unknown operation '" + excerpt(op) + "' (known: " + known + ")");
}

const OpSchema& find_schema(const std::string& op) { return *value_or_throw(lookup_schema(op)); }

StatusOr<Case> Case::make(std::string op,
                          const std::vector<std::pair<std::string, std::string>>& params) {
  return build(std::move(op), params, true);
}

StatusOr<Case> Case::derive(std::string op,
                            const std::vector<std::pair<std::string, std::string>>& params) {
  return build(std::move(op), params, false);
}

StatusOr<Case> Case::build(std::string op,
                           const std::vector<std::pair<std::string, std::string>>& params,
                           bool given) {
  StatusOr<const OpSchema*> found = lookup_schema(op);
  if (!found.ok()) return found.status();
  const OpSchema& schema = *found.value();
  Case c;
  c.op_ = std::move(op);
  for (const auto& param : params) {
    const std::string& key = param.first;  // a plain reference: lambdas may capture it (clang)
    const bool known = std::any_of(schema.params.begin(), schema.params.end(),
                                   [&](const ParamSpec& p) { return p.key == key; });
    if (!known) return id_error("unknown parameter '" + excerpt(key) + "' for " + c.op_);
    int seen = 0;
    for (const auto& kv : params) seen += kv.first == key;
    if (seen > 1) return id_error("parameter '" + key + "' given twice for " + c.op_);
  }
  c.id_ = c.op_ + "(";
  for (const ParamSpec& spec : schema.params) {
    std::string raw = spec.default_value;
    for (const auto& [key, value] : params)
      if (key == spec.key) raw = value;
    if (spec.kind == ParamSpec::Kind::kLayout && spec.key == "layout") {
      StatusOr<Layout> layout = Layout::from_text(trim(raw));
      if (!layout.ok()) return layout.status();
      c.layout_ = std::make_shared<const Layout>(layout.take());
      c.params_.emplace_back(spec.key, c.layout_->str());
    } else {
      StatusOr<std::string> value = canonical_value(spec, trim(raw), c.op_);
      if (!value.ok()) return value.status();
      if (spec.absent_by_default) {
        const StatusOr<std::string> fallback = canonical_value(spec, spec.default_value, c.op_);
        if (fallback.ok() && value.value() == fallback.value()) continue;
      }
      c.params_.emplace_back(spec.key, value.take());
    }
    c.id_ += (c.params_.size() > 1 ? "," : "") + spec.key + "=" + c.params_.back().second;
  }
  c.id_ += ")";
  if (Status st = check_printable(c.id_); !st.ok()) return st;
  if (schema.check)
    if (Status st = schema.check(c); !st.ok()) return st;
  if (given && schema.check_given)
    if (Status st = schema.check_given(c); !st.ok()) return st;
  return c;
}

Case::Case(std::string op, const std::vector<std::pair<std::string, std::string>>& params)
    : Case(value_or_throw(make(std::move(op), params))) {}

StatusOr<Case> Case::from_id(const std::string& text, bool given) {
  const std::string id = trim(text);
  if (Status st = check_printable(id); !st.ok()) return st;
  const size_t open = id.find('(');
  if (open == std::string::npos || id.back() != ')')
    return id_error("case id '" + excerpt(id) + "': expected op(key=value,...)");
  const std::string op = trim(id.substr(0, open));
  std::vector<std::pair<std::string, std::string>> params;
  StatusOr<std::vector<std::string>> parts =
      split_top(id.substr(open + 1, id.size() - open - 2), id);
  if (!parts.ok()) return parts.status();
  for (const std::string& part : parts.value()) {
    const size_t eq = part.find('=');
    if (eq == std::string::npos || eq == 0)
      return id_error("case id '" + excerpt(id) + "': '" + excerpt(part) + "' is not key=value");
    params.emplace_back(trim(part.substr(0, eq)), trim(part.substr(eq + 1)));
  }
  StatusOr<Case> c = given ? make(op, params) : derive(op, params);
  if (!c.ok()) return id_error("case id '" + excerpt(id) + "': " + c.status().message());
  return c;
}

Case Case::parse(const std::string& id) { return value_or_throw(from_id(id)); }

const std::string& Case::get(const std::string& key) const {
  for (const auto& kv : params_)
    if (kv.first == key) return kv.second;
  throw CaseIdError("case " + id_ + " has no parameter '" + key + "'");
}

int64_t Case::get_int(const std::string& key) const {
  int64_t v = 0;
  if (!parse_int(get(key), v)) throw CaseIdError("parameter '" + key + "' is not an integer");
  return v;
}

bool Case::has(const std::string& key) const {
  for (const auto& kv : params_)
    if (kv.first == key) return true;
  return false;
}

const Layout& Case::layout() const {
  if (!layout_) throw CaseIdError("case " + id_ + " has no layout");
  return *layout_;
}

Case Case::with(const std::string& key, const std::string& value) const {
  return with(std::vector<std::pair<std::string, std::string>>{{key, value}});
}

Case Case::with(const std::vector<std::pair<std::string, std::string>>& changes) const {
  auto p = params_;
  for (const auto& [key, value] : changes) {
    bool found = false;
    for (auto& kv : p)
      if (kv.first == key) kv.second = value, found = true;
    if (!found) p.emplace_back(key, value);
  }
  return value_or_throw(derive(op_, p));
}

int64_t Layout::row_length() const {
  if (kind == Kind::kBatch) return lengths.empty() ? 0 : lengths[0];
  return total_tokens();
}

std::string Layout::str() const {
  switch (kind) {
    case Kind::kSingle:
      return "single[" + std::to_string(lengths.at(0)) + "]";
    case Kind::kBatch:
      return "batch[" + std::to_string(lengths.size()) + "x" + std::to_string(lengths.at(0)) + "]";
    case Kind::kPacked: {
      std::string s = "packed[";
      for (size_t i = 0; i < lengths.size();) {
        size_t j = i;
        while (j < lengths.size() && lengths[j] == lengths[i]) ++j;
        const size_t run = j - i;
        if (i) s += ",";
        if (run >= 3) {
          s += std::to_string(lengths[i]) + "*" + std::to_string(run);
          i = j;
        } else {
          s += std::to_string(lengths[i]);
          ++i;
        }
      }
      return s + "]";
    }
  }
  return "";
}

namespace {

// The kind and the lengths of a layout.
StatusOr<std::vector<int64_t>> parse_layout(const std::string& text, Layout::Kind& kind_out) {
  const std::string s = trim(text);
  const size_t open = s.find('[');
  const std::string where = "layout '" + excerpt(s) + "'";
  if (open == std::string::npos || s.back() != ']')
    return id_error(where + ": expected single[T], batch[BxT] or packed[l0,l1,...]");
  const std::string kind = s.substr(0, open), body = s.substr(open + 1, s.size() - open - 2);
  constexpr int64_t kMaxTokens = int64_t{1} << 31;
  std::vector<int64_t> lengths;
  int64_t v = 0;
  if (kind == "single") {
    kind_out = Layout::Kind::kSingle;
    if (!parse_int(body, v) || v < 0 || v >= kMaxTokens)
      return id_error(where + ": length must be an integer in [0, 2^31)");
    lengths = {v};
  } else if (kind == "batch") {
    kind_out = Layout::Kind::kBatch;
    const size_t x = body.find('x');
    int64_t b = 0;
    if (x == std::string::npos || !parse_int(body.substr(0, x), b) ||
        !parse_int(body.substr(x + 1), v) || b < 1 || b > 65536 || v < 0 || v >= kMaxTokens ||
        b * v >= kMaxTokens)
      return id_error(where + ": expected batch[BxT] with 1 <= B <= 65536, T >= 0, B*T < 2^31");
    lengths.assign(static_cast<size_t>(b), v);
  } else if (kind == "packed") {
    kind_out = Layout::Kind::kPacked;
    constexpr int64_t kMaxSeqs = 1000000;
    int64_t total = 0;  // a running sum: a list of a million entries stays linear
    StatusOr<std::vector<std::string>> parts = split_top(body, s);
    if (!parts.ok()) return parts.status();
    for (const std::string& part : parts.value()) {
      const size_t star = part.find('*');
      int64_t reps = 1;
      if (!parse_int(part.substr(0, star), v) || v < 0 ||
          (star != std::string::npos && (!parse_int(part.substr(star + 1), reps) || reps < 1)))
        return id_error(where + ": '" + excerpt(part) + "' is not a length or L*N");
      if (reps > kMaxSeqs || static_cast<int64_t>(lengths.size()) + reps > kMaxSeqs)
        return id_error(where + ": more than " + std::to_string(kMaxSeqs) + " sequences");
      if (v >= kMaxTokens || (total += v * reps) >= kMaxTokens)
        return id_error(where + ": more than 2^31 tokens");
      lengths.insert(lengths.end(), static_cast<size_t>(reps), v);
    }
    if (lengths.empty()) return id_error(where + ": no sequences");
  } else {
    return id_error(where + ": unknown layout kind '" + excerpt(kind) + "'");
  }
  return lengths;
}

}  // namespace

Layout Layout::with_lengths(std::vector<int64_t> lengths) const {
  Layout out = *this;
  std::vector<int64_t> cu(1, 0);
  cu.reserve(lengths.size() + 1);
  for (int64_t l : lengths) cu.push_back(cu.back() + l);
  out.cu_ = std::make_shared<const std::vector<int64_t>>(std::move(cu));
  out.lengths = SeqLengths(std::move(lengths));
  return out;
}

StatusOr<Layout> Layout::from_text(const std::string& text) {
  // The last few layouts parsed on this thread: the probes and the runner parse the same case's
  // layout once per sequence, which must not cost O(sequences) each time.
  constexpr size_t kRemembered = 4;
  thread_local std::vector<std::pair<std::string, Layout>> recent;
  for (const auto& [s, L] : recent)
    if (s == text) return L;
  Layout L;
  StatusOr<std::vector<int64_t>> lengths = parse_layout(text, L.kind);
  if (!lengths.ok()) return lengths.status();
  L = L.with_lengths(lengths.take());
  if (recent.size() == kRemembered) recent.erase(recent.begin());
  recent.emplace_back(text, L);
  return L;
}

Layout Layout::parse(const std::string& text) { return value_or_throw(from_text(text)); }

}  // namespace deltacheck::cases
