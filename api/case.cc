// Cases, suites and selections of the public API (include/deltacheck/case.h).
#include "deltacheck/case.h"

#include <stdexcept>

#include "cases/id_filter.h"

namespace deltacheck {

Case parse_case(const std::string& id) { return Case::parse(id); }

std::string short_id(const Case& c) {
  const cases::OpSchema& schema = cases::find_schema(c.op());
  std::string out = c.op() + "(";
  bool first = true;
  for (const auto& [key, value] : c.params()) {
    bool is_default = false;
    for (const cases::ParamSpec& p : schema.params)
      if (p.key == key) is_default = p.default_value == value;
    if (is_default) continue;
    out += (first ? "" : ",") + key + "=" + value;
    first = false;
  }
  return out + ")";
}

std::vector<SuiteInfo> list_suites() { return cases::list_suites(); }

std::vector<Case> suite(const std::string& name) { return cases::suite(name); }

Selection::Selection(std::string suite) : suite_(std::move(suite)) {}
Selection::Selection(const char* suite) : suite_(suite) {}

Selection Selection::case_ids(std::vector<std::string> ids) {
  Selection s("");
  s.ids_ = std::move(ids);
  return s;
}

Selection& Selection::filter(std::string regex) {
  filters_.push_back(std::move(regex));
  return *this;
}

Selection& Selection::exclude(std::string regex) {
  excludes_.push_back(std::move(regex));
  return *this;
}

Selection& Selection::seed(int64_t seed) {
  seed_ = seed;
  return *this;
}

Selection& Selection::shard(int index, int count) {
  shard_index_ = index;
  shard_count_ = count;
  return *this;
}

std::string Selection::describe() const {
  std::string s = ids_.empty() ? "suite " + suite_ : std::to_string(ids_.size()) + " case ids";
  for (const std::string& f : filters_) s += ", filter '" + f + "'";
  for (const std::string& e : excludes_) s += ", exclude '" + e + "'";
  if (seed_ >= 0) s += ", seed " + std::to_string(seed_);
  if (shard_count_ > 1)
    s += ", shard " + std::to_string(shard_index_) + "/" + std::to_string(shard_count_);
  return s;
}

std::vector<Case> select(const Selection& s) {
  if (s.shard_count() < 1 || s.shard_index() < 0 || s.shard_index() >= s.shard_count())
    throw std::invalid_argument("shard " + std::to_string(s.shard_index()) + "/" +
                                std::to_string(s.shard_count()) + ": expected 0 <= I < N");
  std::vector<cases::IdFilter> keep, drop;
  for (const std::string& f : s.filters()) keep.emplace_back(f, "filter");
  for (const std::string& e : s.excludes()) drop.emplace_back(e, "exclude");
  std::vector<Case> all;
  if (!s.ids().empty()) {
    for (const std::string& id : s.ids()) all.push_back(Case::parse(id));
  } else {
    all = cases::suite(s.suite_name());
  }
  std::vector<Case> out;
  size_t index = 0;  // position among the cases that passed the filters (sharding)
  for (Case& c : all) {
    if (s.seed_override() >= 0) c = c.with("seed", std::to_string(s.seed_override()));
    bool selected = true;
    for (const cases::IdFilter& re : keep) selected = selected && re.matches(c.id());
    for (const cases::IdFilter& re : drop) selected = selected && !re.matches(c.id());
    if (!selected) continue;
    if (static_cast<int>(index++ % static_cast<size_t>(s.shard_count())) == s.shard_index())
      out.push_back(std::move(c));
  }
  return out;
}

}  // namespace deltacheck
