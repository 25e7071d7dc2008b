// Which cases run: a suite or exact ids, filters and excludes over the ids, a seed override and
// sharding. The one implementation behind the tool's options (--suite, --case, --filter,
// --exclude, --seed, --shard) and the public API's deltacheck::Selection.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cases/case.h"

namespace deltacheck::cases {

struct SelectionSpec {
  std::string suite = "smoke";           // used when `ids` is empty
  std::vector<std::string> ids;          // exactly these cases, in this order
  std::vector<std::string> filters;      // RE2 patterns searched in the id; all must match
  std::vector<std::string> excludes;     // a case whose id matches any of these is dropped
  int64_t seed = -1;                     // >= 0: replaces every case's seed (before filtering)
  int shard_index = 0, shard_count = 1;  // keep case i of the filtered cases when i % N == I
  // How a bad pattern is named in errors ("--filter" on the command line, "filter" in the API).
  std::string filter_name = "filter", exclude_name = "exclude";
};

struct SelectedCases {
  std::vector<Case> cases;       // this shard's cases, in suite (or id) order
  std::vector<int64_t> indices;  // each one's position among all selected cases (before sharding)
  int64_t total = 0;             // cases selected before sharding
};

// Throws CaseIdError (unknown suite, bad id) or std::invalid_argument (a pattern RE2 refuses, a
// shard outside 0 <= I < N).
SelectedCases select(const SelectionSpec& spec);

}  // namespace deltacheck::cases
