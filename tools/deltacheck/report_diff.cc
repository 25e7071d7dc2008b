// deltacheck report diff OLD NEW: verdict changes between two report directories, and passing
// cases whose margin grew by a factor (text; Markdown for a CI job summary).
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <memory>

#include "deltacheck/pins.h"
#include "tools/deltacheck/commands.h"

namespace deltacheck::cli {
namespace {

struct DiffArgs {
  std::string old_report, new_report;
  double factor = 2.0;
  double min_margin = 0.0;
  std::string markdown;
  bool summary = false;
};

Report load(const std::string& in) {
  LoadedReport lr = read_report(in);
  if (!lr.status.ok()) throw UsageError(lr.status.message());
  return std::move(lr.report);
}

int diff(const DiffArgs& a) {
  if (!(a.factor > 1.0)) throw UsageError("--factor must be > 1");
  if (a.min_margin < 0) throw UsageError("--min-margin must be >= 0");
  const Report old_report = load(a.old_report), new_report = load(a.new_report);
  DiffOptions o;
  o.margin_factor = a.factor;
  o.min_margin = a.min_margin;
  const ReportDiff d = diff_reports(old_report, new_report, o);
  std::fputs(format_diff_text(d, a.old_report, a.new_report).c_str(), stdout);
  const std::string md = format_diff_markdown(d, a.old_report, a.new_report);
  if (!a.markdown.empty()) {
    const std::string tmp = a.markdown + ".tmp";
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << md;
    f.close();
    if (!f || std::rename(tmp.c_str(), a.markdown.c_str()) != 0) {
      std::remove(tmp.c_str());
      throw UsageError("--markdown: cannot write '" + a.markdown + "'");
    }
  }
  if (const char* path = std::getenv("GITHUB_STEP_SUMMARY"); path && *path && a.summary) {
    std::ofstream f(path, std::ios::app);
    f << md;
    if (f) std::printf("job summary: appended to %s\n", path);
  }
  return d.drifted() ? kExitFail : kExitPass;
}

}  // namespace

Command add_report_diff_command(CLI::App& app) {
  auto args = std::make_shared<DiffArgs>();
  CLI::App* report = app.get_subcommand("report");
  CLI::App* cmd = report->add_subcommand(
      "diff", "verdict changes between two reports, and passes whose margin grew by a factor");
  cmd->add_option("old", args->old_report, "the earlier report directory (or report.json)")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_option("new", args->new_report, "the later one")->required()->check(CLI::ExistingPath);
  cmd->add_option("--factor", args->factor,
                  "a pass whose margin (error / threshold) grew this many times is drift")
      ->capture_default_str();
  cmd->add_option("--min-margin", args->min_margin,
                  "... and whose new margin is at least this (ignores noise far below 1)")
      ->capture_default_str();
  cmd->add_option("--markdown", args->markdown, "also write the diff as Markdown to this file");
  cmd->add_flag("--step-summary", args->summary,
                "append the Markdown to $GITHUB_STEP_SUMMARY when it is set");
  cmd->footer(R"(example:
  deltacheck run --suite gate --backend cuda --report-dir before
  deltacheck run --suite gate --backend cuda --report-dir after
  deltacheck report diff before after --factor 5 --markdown diff.md
exit codes: 0 no verdict changed and no margin grew, 1 drift, 2 usage error)");
  return {cmd, [args] { return diff(*args); }};
}

}  // namespace deltacheck::cli
