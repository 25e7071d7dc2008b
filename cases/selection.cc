#include "cases/selection.h"

#include <stdexcept>

#include "cases/corpus.h"
#include "cases/id_filter.h"
#include "cases/suites.h"

namespace deltacheck::cases {

SelectedCases select(const SelectionSpec& s) {
  if (s.shard_count < 1 || s.shard_index < 0 || s.shard_index >= s.shard_count)
    throw std::invalid_argument("shard " + std::to_string(s.shard_index) + "/" +
                                std::to_string(s.shard_count) + ": expected 0 <= I < N");
  std::vector<IdFilter> keep, drop;
  for (const std::string& f : s.filters)
    if (!f.empty()) keep.emplace_back(f, s.filter_name);
  for (const std::string& e : s.excludes)
    if (!e.empty()) drop.emplace_back(e, s.exclude_name);
  std::vector<Case> all;
  if (!s.ids.empty()) {
    for (const std::string& id : s.ids) all.push_back(Case::parse(id));
  } else if (s.suite.rfind(kCorpusPrefix, 0) == 0) {  // a hunt's corpus replayed as a suite
    StatusOr<std::vector<Case>> corpus =
        read_corpus(s.suite.substr(std::string(kCorpusPrefix).size()));
    if (!corpus.ok()) throw CaseIdError(corpus.status().message());
    all = corpus.take();
  } else {
    all = suite(s.suite);
  }
  SelectedCases out;
  for (Case& c : all) {
    if (s.seed >= 0) c = c.with("seed", std::to_string(s.seed));
    bool selected = true;
    for (const IdFilter& re : keep) selected = selected && re.matches(c.id());
    for (const IdFilter& re : drop) selected = selected && !re.matches(c.id());
    if (!selected) continue;
    const int64_t index = out.total++;
    if (index % s.shard_count == s.shard_index) {
      out.cases.push_back(std::move(c));
      out.indices.push_back(index);
    }
  }
  return out;
}

}  // namespace deltacheck::cases
