// Case selection shared by the subcommands.
#include <regex>

#include "cases/suites.h"
#include "harness/cli/commands.h"

namespace deltacheck::cli {

std::vector<std::string> split_commas(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const std::string& item : items) {
    size_t start = 0;
    while (start <= item.size()) {
      size_t comma = item.find(',', start);
      if (comma == std::string::npos) comma = item.size();
      if (comma > start) out.push_back(item.substr(start, comma - start));
      start = comma + 1;
    }
  }
  return out;
}

void add_selection_options(CLI::App* app, Selection& s) {
  app->add_option("--suite,-s", s.suite, "suite: smoke, gate, full")->capture_default_str();
  app->add_option("--case", s.case_ids, "exactly this case id (repeatable; overrides --suite)");
  app->add_option("--filter,-f", s.filter, "keep cases whose id matches this regex (ECMAScript)");
  app->add_option("--seed", s.seed, "replace every case's seed with this one");
}

std::vector<cases::Case> select_cases(const Selection& s) {
  std::vector<cases::Case> cs;
  try {
    if (!s.case_ids.empty()) {
      for (const auto& id : s.case_ids) cs.push_back(cases::Case::parse(id));
    } else {
      cs = cases::suite(s.suite);
    }
    if (s.seed >= 0)
      for (auto& c : cs) c = c.with("seed", std::to_string(s.seed));
  } catch (const cases::CaseIdError& e) {
    throw UsageError(e.what());
  }
  if (!s.filter.empty()) {
    std::regex re;
    try {
      re = std::regex(s.filter, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw UsageError("--filter '" + s.filter + "' is not a valid regex: " + e.what());
    }
    std::vector<cases::Case> kept;
    for (auto& c : cs)
      if (std::regex_search(c.id(), re)) kept.push_back(c);
    cs = std::move(kept);
  }
  return cs;
}

}  // namespace deltacheck::cli
