// Case-id filters with RE2 (id_filter.h).
#include "cases/id_filter.h"

#include <re2/re2.h>

#include <stdexcept>

#include "cases/safe_text.h"

namespace deltacheck::cases {

struct IdFilter::Impl {
  explicit Impl(const std::string& pattern, const RE2::Options& o) : re(pattern, o) {}
  RE2 re;
};

namespace {

RE2::Options options() {
  RE2::Options o;
  // Case ids are printable ASCII; Latin-1 takes any bytes in a pattern without a UTF-8 error.
  o.set_encoding(RE2::Options::EncodingLatin1);
  o.set_log_errors(false);
  return o;
}

}  // namespace

IdFilter::IdFilter(const std::string& pattern, const std::string& what)
    : impl_(std::make_unique<Impl>(pattern, options())) {
  if (!impl_->re.ok())
    throw std::invalid_argument(what + " '" + printable_line(pattern, 200) +
                                "' is not a valid regex: " + impl_->re.error());
}

IdFilter::~IdFilter() = default;
IdFilter::IdFilter(IdFilter&&) noexcept = default;
IdFilter& IdFilter::operator=(IdFilter&&) noexcept = default;

bool IdFilter::matches(const std::string& id) const { return RE2::PartialMatch(id, impl_->re); }

}  // namespace deltacheck::cases
