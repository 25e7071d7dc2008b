// Outside text made safe for reports and terminals (safe_text.h).
#include "cases/safe_text.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>

namespace deltacheck::cases {
namespace {

constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the well-formed UTF-8 sequence at s[i] (1..4), 0 when none starts there
// (RFC 3629: no overlong forms, no surrogates, nothing beyond U+10FFFF).
size_t sequence_length(std::string_view s, size_t i, uint32_t* code_point) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const uint8_t c = b(0);
  const size_t left = s.size() - i;
  auto cont = [&](size_t k, uint8_t lo = 0x80, uint8_t hi = 0xBF) {
    return k < left && b(k) >= lo && b(k) <= hi;
  };
  if (c < 0x80) {
    *code_point = c;
    return 1;
  }
  if (c >= 0xC2 && c <= 0xDF && cont(1)) {
    *code_point = (c & 0x1Fu) << 6 | (b(1) & 0x3Fu);
    return 2;
  }
  if (c >= 0xE0 && c <= 0xEF) {
    const uint8_t lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    if (cont(1, lo, hi) && cont(2)) {
      *code_point = (c & 0x0Fu) << 12 | (b(1) & 0x3Fu) << 6 | (b(2) & 0x3Fu);
      return 3;
    }
    return 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const uint8_t lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    if (cont(1, lo, hi) && cont(2) && cont(3)) {
      *code_point = (c & 0x07u) << 18 | (b(1) & 0x3Fu) << 12 | (b(2) & 0x3Fu) << 6 | (b(3) & 0x3Fu);
      return 4;
    }
  }
  return 0;
}

bool is_control(uint32_t cp) { return cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F); }

std::string escape(uint32_t cp) {
  switch (cp) {
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
  }
  char buf[16];
  std::snprintf(buf, sizeof buf, cp < 0x80 ? "\\x%02X" : "\\u%04X", static_cast<unsigned>(cp));
  return buf;
}

// valid_utf8, with control characters escaped unless `keep` says otherwise.
template <typename Keep>
std::string clean(std::string_view s, size_t max_bytes, Keep keep) {
  std::string out;
  out.reserve(std::min(s.size(), max_bytes) + 8);
  size_t i = 0;
  while (i < s.size() && i < max_bytes) {
    uint32_t cp = 0;
    const size_t n = sequence_length(s, i, &cp);
    if (n == 0) {
      out += kReplacement;
      ++i;
    } else if (is_control(cp) && !keep(cp)) {
      out += escape(cp);
      i += n;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  if (i < s.size()) out += "...";
  return out;
}

}  // namespace

std::string valid_utf8(std::string_view s) {
  return clean(s, s.size(), [](uint32_t) { return true; });
}

std::string printable_line(std::string_view s, size_t max_bytes) {
  return clean(s, max_bytes, [](uint32_t) { return false; });
}

}  // namespace deltacheck::cases
