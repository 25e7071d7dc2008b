// Fuzz target: case ids (cases/case.h). Any text either parses into a case whose canonical id
// parses back to the same case, or is refused with an error value naming the problem — never an
// exception, a crash, undefined behaviour (UBSan: integer overflow in a length or an estimate) or
// a hang.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cases/case.h"
#include "cases/generate.h"

using deltacheck::StatusOr;
using deltacheck::cases::Case;
using deltacheck::cases::CaseIdError;
using deltacheck::cases::Layout;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // Errors come back as values (Case::from_id); anything thrown is a finding.
  const StatusOr<Case> parsed = Case::from_id(text);
  if (!parsed.ok()) {
    if (parsed.status().message().empty()) std::abort();  // every refusal names its problem
    return 0;
  }
  const Case& c = parsed.value();
  // The canonical id is a fixed point: parse(format(c)) == c.
  const StatusOr<Case> again = Case::from_id(c.id());
  if (!again.ok() || !(again.value() == c) || again.value().id() != c.id()) std::abort();
  if (c.has("layout")) {
    const Layout& l = c.layout();
    const StatusOr<Layout> reparsed = Layout::from_text(l.str());
    if (!reparsed.ok() || reparsed.value().str() != l.str() || l.total_tokens() < 0) std::abort();
  }
  // The memory estimate that guards allocation must itself be sane (an op's own refusal of the
  // case is a CaseIdError, as the runner takes it).
  try {
    if (deltacheck::cases::estimate_input_bytes(c) < 0) std::abort();
  } catch (const CaseIdError&) {
  }
  return 0;
}
