// Named suites of cases: smoke (seconds), gate (the CI gate), full (everything).
#pragma once

#include <string>
#include <vector>

#include "cases/case.h"

namespace deltacheck::cases {

struct SuiteInfo {
  std::string name;
  std::string help;
};

std::vector<SuiteInfo> list_suites();
// The cases of a suite, in a fixed order without duplicates; throws CaseIdError if unknown.
std::vector<Case> suite(const std::string& name);

// Layout families used by the suites (each entry is a layout string).
std::vector<std::string> layout_family(const std::string& family);

}  // namespace deltacheck::cases
