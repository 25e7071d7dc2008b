// deltacheck report merge: combines the report directories of CI shards (or of runs on different
// backends) into one, in every format, as if it had been one run; the exit code is the merged
// run's gate. One input re-renders a report directory from its report.json.
#include "reports/report.h"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "harness/cli/commands.h"
#include "reports/console.h"

namespace deltacheck::cli {
namespace {

namespace fs = std::filesystem;

struct MergeArgs {
  std::vector<std::string> inputs;
  std::string out;
  std::vector<std::string> fail_on;
  bool quiet = false;
};

// Copies the inputs' failure dumps next to the merged report (names are unique per case and
// backend, so shards never collide); an entry whose dump is not found loses its link.
int copy_dumps(const std::vector<std::string>& inputs, reports::Report& merged,
               const std::string& out) {
  std::error_code ec;
  const fs::path dst = fs::path(out) / "failures";
  int copied = 0;
  for (reports::Entry& e : merged.entries) {
    if (e.dump.empty()) continue;
    bool found = false;
    for (const std::string& in : inputs) {
      const fs::path src =
          fs::path(fs::is_directory(in, ec) ? in : fs::path(in).parent_path().string()) / e.dump;
      if (!fs::exists(src, ec)) continue;
      fs::create_directories(dst, ec);
      const fs::path target = fs::path(out) / e.dump;
      if (!fs::equivalent(src, target, ec)) {
        fs::copy_file(src, target, fs::copy_options::overwrite_existing, ec);
        if (ec) throw UsageError("cannot copy " + src.string() + ": " + ec.message());
      }
      ++copied;
      found = true;
      break;
    }
    if (!found) e.dump.clear();
  }
  return copied;
}

int merge(const MergeArgs& a) {
  if (a.out.empty()) throw UsageError("report merge: -o OUT is required");
  std::vector<reports::Report> loaded;
  for (const std::string& in : a.inputs) {
    reports::LoadedReport lr = reports::read_report(in);
    if (!lr.status.ok()) throw UsageError(lr.status.message());
    loaded.push_back(std::move(lr.report));
  }
  reports::MergedReport m = reports::merge_reports(loaded, a.inputs);
  if (!m.status.ok()) throw UsageError(m.status.message());
  reports::Report& r = m.report;
  if (!a.fail_on.empty()) {
    if (Status st = reports::parse_fail_on(split_commas(a.fail_on), r.fail_on); !st.ok())
      throw UsageError(st.message());
  } else if (r.fail_on.empty()) {
    throw UsageError("the reports were gated on different verdicts; choose with --fail-on");
  }
  r.command = reports::this_command_line();
  if (loaded.size() == 1) {  // a re-render keeps the run's own provenance
    r.command = loaded.front().command;
    r.shard_index = loaded.front().shard_index;
    r.shard_count = loaded.front().shard_count;
    r.merged_from = loaded.front().merged_from;
  }
  const int dumps = copy_dumps(a.inputs, r, a.out);
  const reports::WrittenReport w = reports::write_report_files(r, a.out);
  if (!w.status.ok()) throw UsageError(w.status.message());

  std::vector<harness::CaseResult> results;
  for (const reports::Entry& e : r.entries) {
    if (!a.quiet || e.result.verdict != harness::Verdict::kPass)
      std::fputs(reports::format_result_line(e.result, {false, a.quiet, r.fail_on}).c_str(),
                 stdout);
    results.push_back(e.result);
  }
  std::fputs(reports::format_summary(results, r.seconds, {false, a.quiet, r.fail_on}).c_str(),
             stdout);
  uintmax_t bytes = 0;
  for (const auto& f : w.files) bytes += f.bytes;
  std::printf("report: %s (also report.json, junit.xml, summary.md: %.1f kB in %.0f ms)\n",
              (fs::path(a.out) / "report.html").string().c_str(), bytes / 1e3, w.seconds * 1e3);
  if (dumps > 0)
    std::printf("failure dumps: %d in %s\n", dumps,
                (fs::path(a.out) / "failures").string().c_str());
  if (r.shard_count <= 1) print_step_summary(reports::append_step_summary(r));
  return reports::fails_gate(r) ? kExitFail : kExitPass;
}

}  // namespace

Command add_report_command(CLI::App& app) {
  auto args = std::make_shared<MergeArgs>();
  CLI::App* cmd = app.add_subcommand("report", "work with report directories (--report-dir)");
  cmd->require_subcommand(1);
  CLI::App* m = cmd->add_subcommand(
      "merge",
      "merge the reports of CI shards (or of runs on other backends) into one, in every format");
  m->add_option("inputs", args->inputs, "report directories (or report.json files)")
      ->required()
      ->check(CLI::ExistingPath);
  m->add_option("-o,--output", args->out, "directory for the merged report")->required();
  m->add_option("--fail-on", args->fail_on,
                "verdicts that fail the merged run (default: those the inputs were run with)")
      ->delimiter(',');
  m->add_flag("--quiet,-q", args->quiet, "print only results that are not a pass");
  m->footer(R"(example:
  deltacheck run --suite gate --shard 0/2 --report-dir shard0
  deltacheck run --suite gate --shard 1/2 --report-dir shard1
  deltacheck report merge shard0 shard1 -o merged)");
  return {cmd, [args] { return merge(*args); }};
}

}  // namespace deltacheck::cli
