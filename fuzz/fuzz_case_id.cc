// Fuzz target: case ids (cases/case.h). Any text either parses into a case whose canonical id
// parses back to the same case, or is refused with a CaseIdError — never another exception, a
// crash, undefined behaviour (UBSan: integer overflow in a length or an estimate) or a hang.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cases/case.h"
#include "cases/generate.h"

using deltacheck::cases::Case;
using deltacheck::cases::CaseIdError;
using deltacheck::cases::Layout;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const Case c = Case::parse(text);
    // The canonical id is a fixed point: parse(format(c)) == c.
    const Case again = Case::parse(c.id());
    if (!(again == c) || again.id() != c.id()) std::abort();
    if (c.has("layout")) {
      const Layout l = Layout::parse(c.get("layout"));
      if (Layout::parse(l.str()).str() != l.str() || l.total_tokens() < 0) std::abort();
    }
    // The memory estimate that guards allocation must itself be sane.
    if (deltacheck::cases::estimate_input_bytes(c) < 0) std::abort();
  } catch (const CaseIdError&) {
  }
  return 0;
}
