// A user's regular expression over case ids (--filter, golden --filter, the API's Selection
// filter and exclude), with RE2: matching takes time linear in the id's length whatever the
// pattern ('(.*)*Z' does not backtrack, '^(.|,)*$' on a 60 kB id does not recurse), and a
// pattern RE2 cannot match that way (backreferences, lookaround) is refused when compiled.
// Syntax: RE2's (https://github.com/google/re2/wiki/Syntax), which for the patterns case ids need
// is ECMAScript's.
#pragma once

#include <memory>
#include <string>

namespace deltacheck::cases {

class IdFilter {
 public:
  // Throws std::invalid_argument "<what> '<pattern>' is not a valid regex: <reason>".
  IdFilter(const std::string& pattern, const std::string& what);
  ~IdFilter();
  IdFilter(IdFilter&&) noexcept;
  IdFilter& operator=(IdFilter&&) noexcept;

  // Whether the pattern matches anywhere in `id` (std::regex_search semantics).
  bool matches(const std::string& id) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deltacheck::cases
