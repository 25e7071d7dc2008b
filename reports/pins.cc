// Pinned verdicts (reports/pins.h).
#include "reports/pins.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "cases/case.h"
#include "cases/id_filter.h"
#include "cases/safe_text.h"

namespace deltacheck::reports {
namespace {

using harness::CaseResult;
using harness::Verdict;

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> w;
  std::istringstream in(line);
  for (std::string s; in >> s;) w.push_back(s);
  return w;
}

bool backend_matches(const Pin& p, const CaseResult& r) {
  return p.backend == "*" || p.backend == r.backend;
}

}  // namespace

StatusOr<std::vector<Pin>> parse_pins(const std::string& text, const std::string& source) {
  std::vector<Pin> pins;
  std::istringstream in(text);
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    line = line.substr(0, line.find('#'));
    const std::vector<std::string> w = words(line);
    if (w.empty()) continue;
    auto bad = [&](const std::string& why) {
      return Status::InvalidArgument(
          cases::printable_line(fmt::format("{}:{}: {}", source, n, why)));
    };
    if (w.size() != 3)
      return bad("expected '<backend> <verdict> <case id>' or '<backend> <verdict> re:<regex>'");
    Pin p;
    p.backend = w[0];
    p.line = n;
    try {
      p.verdict = harness::verdict_from_name(w[1]);
    } catch (const std::invalid_argument& e) {
      return bad(e.what());
    }
    if (w[2].rfind("re:", 0) == 0) {
      p.regex = w[2].substr(3);
      try {
        cases::IdFilter check(p.regex, "regex");
      } catch (const std::invalid_argument& e) {
        return bad(e.what());
      }
    } else {
      StatusOr<cases::Case> c = cases::Case::from_id(w[2], true);
      if (!c.ok()) return bad(c.status().message());
      p.case_id = c.value().id();
    }
    pins.push_back(std::move(p));
  }
  return pins;
}

StatusOr<std::vector<Pin>> read_pins(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::InvalidArgument("cannot read the pins file '" + path + "'");
  std::ostringstream text;
  text << f.rdbuf();
  return parse_pins(text.str(), path);
}

std::string format_pins(const std::vector<CaseResult>& results) {
  std::string out =
      "# deltacheck pins: <backend> <verdict> <case id> | <backend> <verdict> re:<regex>\n"
      "# (deltacheck run --expect FILE: exit 1 when a verdict differs from its pin)\n";
  for (const CaseResult& r : results)
    out += fmt::format("{} {} {}\n", r.backend, harness::verdict_name(r.verdict), r.case_id);
  return out;
}

Status write_pins(const std::vector<CaseResult>& results, const std::string& path) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, static_cast<long>(::getpid()));
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << format_pins(results);
    f.close();
    if (!f) {
      std::remove(tmp.c_str());
      return Status::InvalidArgument("cannot write the pins file '" + path + "'");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::InvalidArgument("cannot write the pins file '" + path + "'");
  }
  return Status::Ok();
}

PinCheck check_pins(const std::vector<Pin>& pins, const std::vector<CaseResult>& results) {
  PinCheck out;
  std::vector<std::unique_ptr<cases::IdFilter>> filters(pins.size());
  for (size_t i = 0; i < pins.size(); ++i)
    if (!pins[i].regex.empty()) filters[i] = std::make_unique<cases::IdFilter>(pins[i].regex, "re");
  // Case pins by id for a lookup per result (a pins file of a whole gate run has thousands).
  std::multimap<std::string, size_t> by_id;
  for (size_t i = 0; i < pins.size(); ++i)
    if (!pins[i].case_id.empty()) by_id.emplace(pins[i].case_id, i);
  std::vector<bool> used(pins.size(), false);
  for (const CaseResult& r : results) {
    const Pin* pin = nullptr;
    // A result's id is canonical already; pins were canonicalized when read.
    for (auto [it, end] = by_id.equal_range(r.case_id); it != end && !pin; ++it)
      if (backend_matches(pins[it->second], r)) pin = &pins[it->second];
    for (size_t i = 0; i < pins.size() && !pin; ++i)
      if (filters[i] && backend_matches(pins[i], r) && filters[i]->matches(r.case_id))
        pin = &pins[i];
    if (!pin) {
      out.unpinned.push_back(&r);
      continue;
    }
    used[static_cast<size_t>(pin - pins.data())] = true;
    if (pin->verdict == r.verdict)
      ++out.held;
    else
      out.flips.push_back({*pin, r});
  }
  for (size_t i = 0; i < pins.size(); ++i)
    if (!used[i]) out.unused.push_back(pins[i]);
  return out;
}

std::string format_pin_check(const PinCheck& check, const std::string& source) {
  std::string out;
  for (const PinFlip& f : check.flips)
    out +=
        fmt::format("FLIP  {}  {} -> {}  {} (pinned at {}:{})\n", f.result.backend,
                    harness::verdict_name(f.pin.verdict), harness::verdict_name(f.result.verdict),
                    f.result.case_id, source, f.pin.line);
  out += fmt::format("pins: {} held, {} flipped, {} result{} unpinned, {} pin{} unused ({})\n",
                     check.held, check.flips.size(), check.unpinned.size(),
                     check.unpinned.size() == 1 ? "" : "s", check.unused.size(),
                     check.unused.size() == 1 ? "" : "s", source);
  return out;
}

}  // namespace deltacheck::reports
