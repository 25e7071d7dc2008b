// Known findings and drift: pinned verdicts (`deltacheck run --expect FILE`, `--expect-write
// FILE`: a gate over a backend with known bugs stays green until a verdict flips, either way) and
// the difference of two reports (`deltacheck report diff OLD NEW`: verdict changes, margins grown
// by a factor while passing). docs/shrinking.md.
#pragma once

#include "deltacheck/report.h"
#include "reports/pins.h"
#include "reports/report_diff.h"

namespace deltacheck {

// A pin: backend ("*": any), verdict, case_id or regex, line. parse_pins(text, source) /
// read_pins(path) (InvalidArgument naming FILE:LINE), format_pins(results) / write_pins(results,
// path), check_pins(pins, results) -> PinCheck{held, flips (PinFlip: pin, result), unpinned,
// unused, ok()}, format_pin_check(check, source).
using Pin = reports::Pin;
using PinCheck = reports::PinCheck;
using PinFlip = reports::PinFlip;
using reports::check_pins;
using reports::format_pin_check;
using reports::format_pins;
using reports::parse_pins;
using reports::read_pins;
using reports::write_pins;
// diff_reports(old, new, DiffOptions{margin_factor, min_margin}) -> ReportDiff{verdict_changes,
// margin_growth, added, gone, compared, drifted()}; format_diff_text / format_diff_markdown.
using DiffOptions = reports::DiffOptions;
using ReportDiff = reports::ReportDiff;
using reports::diff_reports;
using reports::format_diff_markdown;
using reports::format_diff_text;

}  // namespace deltacheck
