// Pinned verdicts (`deltacheck run --expect FILE`, `--expect-write FILE`): a gate over a backend
// with known bugs stays green until something changes. A pin says which verdict a backend gets on
// a case, or on every case an id regex matches; a result whose verdict differs from its pin is a
// flip, in either direction (a known leak that now passes flips too, as xfail strict does).
// The file is text, one pin a line, '#' starts a comment:
//   <backend> <verdict> <case id>       e.g.  wrong:ignore-cu-seqlens leak gdr(layout=...,seed=7)
//   <backend> <verdict> re:<regex>      every case whose id matches (RE2, searched in the id)
// <backend> may be '*' (any backend). A case pin wins over a regex pin; among regex pins the first
// that matches wins.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "harness/result.h"

namespace deltacheck::reports {

struct Pin {
  std::string backend;  // "*": any
  harness::Verdict verdict = harness::Verdict::kPass;
  std::string case_id;  // canonical id; empty for a regex pin
  std::string regex;    // empty for a case pin
  int line = 0;         // in its file (messages)
};

// Parses a pins file's text (`source` names it in errors: "FILE:LINE: ..."); the case ids are read
// as given ids and stored canonical. InvalidArgument naming the first bad line.
StatusOr<std::vector<Pin>> parse_pins(const std::string& text, const std::string& source);
// Reads a pins file (InvalidArgument when it cannot be read or parsed).
StatusOr<std::vector<Pin>> read_pins(const std::string& path);
// The pins of a run: one case pin per result (pass and unsupported included), in result order.
std::string format_pins(const std::vector<harness::CaseResult>& results);
// Writes format_pins(results) to `path` atomically (a temporary file, then rename).
Status write_pins(const std::vector<harness::CaseResult>& results, const std::string& path);

struct PinFlip {
  Pin pin;
  harness::CaseResult result;
};

struct PinCheck {
  int held = 0;                                      // results whose pin holds
  std::vector<PinFlip> flips;                        // results whose verdict differs from their pin
  std::vector<const harness::CaseResult*> unpinned;  // results no pin names
  std::vector<Pin> unused;                           // pins that named no result (a case not run)
  bool ok() const { return flips.empty(); }
};

// Checks results against pins. The results must outlive the check (unpinned points into them).
PinCheck check_pins(const std::vector<Pin>& pins, const std::vector<harness::CaseResult>& results);
// The check in lines: each flip ("FLIP  backend  leak -> pass  id (pinned at FILE:LINE)"), then a
// summary line "pins: N held, M flipped, K results unpinned, U pins unused".
std::string format_pin_check(const PinCheck& check, const std::string& source);

}  // namespace deltacheck::reports
