// Cases, suites and selections of the public API (include/deltacheck/case.h).
#include "deltacheck/case.h"

#include <stdexcept>

#include "cases/id_filter.h"
#include "cases/selection.h"
#include "core/half.h"

namespace deltacheck {

Case parse_case(const std::string& id) { return Case::parse(id); }

Case parse_derived_case(const std::string& id) {
  StatusOr<Case> c = Case::from_id(id, /*given=*/false);
  if (!c.ok()) throw cases::CaseIdError(c.status().message());
  return c.take();
}

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

namespace {

void check_storage_type(const char* what, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16)
    throw std::invalid_argument(std::string(what) + ": " + dtype_name(dtype) +
                                " is not a storage type (fp32, bf16, fp16)");
}

}  // namespace

void store_floats(const float* src, int64_t n, DType dtype, void* dst) {
  check_storage_type("store_floats", dtype);
  for (int64_t i = 0; i < n; ++i) store_from_float(dst, dtype, i, src[i]);
}

void load_floats(const void* src, int64_t n, DType dtype, float* dst) {
  check_storage_type("load_floats", dtype);
  for (int64_t i = 0; i < n; ++i) dst[i] = load_as_float(src, dtype, i);
}

const std::vector<OpSchema>& list_ops() { return cases::op_schemas(); }

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

SelectedCases select_with_positions(const Selection& s, const std::string& filter_name,
                                    const std::string& exclude_name) {
  cases::SelectionSpec spec;
  spec.suite = s.suite_name();
  spec.ids = s.ids();
  spec.filters = s.filters();
  spec.excludes = s.excludes();
  spec.seed = s.seed_override();
  spec.shard_index = s.shard_index();
  spec.shard_count = s.shard_count();
  spec.filter_name = filter_name;
  spec.exclude_name = exclude_name;
  return cases::select(spec);
}

std::vector<Case> select(const Selection& s) { return select_with_positions(s).cases; }

}  // namespace deltacheck
