// Text from outside deltacheck (a candidate's stderr, an `unsupported` reason, dataset names in a
// file, --filter, --cmd, host names) made safe for where it goes: JSON and XML need valid UTF-8,
// a terminal must not receive control sequences. Every place such text enters a report or the
// console goes through one of these (docs/reliability.md, "Text from outside").
#pragma once

#include <string>
#include <string_view>

namespace deltacheck::cases {

// Valid UTF-8: each byte that does not start or continue a well-formed sequence (overlong forms,
// surrogates and code points beyond U+10FFFF included) becomes U+FFFD. Control characters stay.
std::string valid_utf8(std::string_view s);

// Valid UTF-8 without control characters: C0 controls (newline, carriage return, escape, ...),
// DEL and the C1 controls (U+0080..U+009F) are written as visible escapes ("\n", "\x1B"), so
// the text prints as one line and cannot move the cursor, recolour the terminal or start a
// line of its own. At most `max_bytes` bytes of `s` are kept ("..." marks a cut).
std::string printable_line(std::string_view s, size_t max_bytes = 4096);

}  // namespace deltacheck::cases
