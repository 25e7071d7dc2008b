// deltacheck report merge: combines the report directories of CI shards (or of runs on different
// backends) into one, in every format, as if it had been one run; the exit code is the merged
// run's gate. One input re-renders a report directory from its report.json.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>

#include "tools/deltacheck/commands.h"

namespace deltacheck::cli {
namespace {

namespace fs = std::filesystem;

struct MergeArgs {
  std::vector<std::string> inputs;
  std::string out;
  std::vector<std::string> fail_on;
  bool quiet = false;
};

// The folder of a report input (a directory, or the one holding a report.json).
fs::path folder_of(const std::string& in) {
  std::error_code ec;
  return fs::is_directory(in, ec) ? fs::path(in) : fs::path(in).parent_path();
}

// The file a report's entry names as its dump, when it is a failure dump inside that report's
// own folder: "failures/<dump name>", resolving (links followed) to a regular file below the
// report's folder. Anything else in a report.json is refused: a merge copies only dumps.
std::optional<fs::path> dump_source(const std::string& in, const ReportEntry& e) {
  std::string path;
  if (Status st = find_dump(folder_of(in).string(), e.dump, &path); !st.ok())
    throw UsageError(fmt::format("{}: the result of {} on {} {}", in, e.result.case_id,
                                 e.result.backend, st.message()));
  if (path.empty()) return std::nullopt;
  return fs::path(path);
}

// Where each entry's dump comes from (the first input that has it), checked before anything is
// written; an entry whose dump is not found loses its link.
std::vector<std::optional<fs::path>> find_dumps(const std::vector<std::string>& inputs,
                                                Report& merged) {
  std::vector<std::optional<fs::path>> sources(merged.entries.size());
  for (size_t i = 0; i < merged.entries.size(); ++i) {
    ReportEntry& e = merged.entries[i];
    if (e.dump.empty()) continue;
    for (const std::string& in : inputs)
      if ((sources[i] = dump_source(in, e))) break;
    if (!sources[i]) e.dump.clear();
  }
  return sources;
}

// Copies the dumps into the merged report's (new) failures/ folder; names are unique per case
// and backend, so shards never collide.
int copy_dumps(const std::vector<std::optional<fs::path>>& sources, ReportDirWriter& out) {
  int copied = 0;
  for (const std::optional<fs::path>& src : sources) {
    if (!src) continue;
    std::string target;
    if (Status st = out.dump_path(src->filename().string(), &target); !st.ok())
      throw UsageError(st.message());
    std::error_code ec;
    fs::copy_file(*src, target, fs::copy_options::overwrite_existing, ec);
    if (ec) throw UsageError("cannot copy " + src->string() + ": " + ec.message());
    ++copied;
  }
  return copied;
}

int merge(const MergeArgs& a) {
  if (a.out.empty()) throw UsageError("report merge: -o OUT is required");
  std::vector<Report> loaded;
  for (const std::string& in : a.inputs) {
    LoadedReport lr = read_report(in);
    if (!lr.status.ok()) throw UsageError(lr.status.message());
    loaded.push_back(std::move(lr.report));
  }
  MergedReport m = merge_reports(loaded, a.inputs);
  if (!m.status.ok()) throw UsageError(m.status.message());
  Report& r = m.report;
  if (!a.fail_on.empty()) {
    if (Status st = parse_fail_on(split_commas(a.fail_on), r.fail_on); !st.ok())
      throw UsageError(st.message());
  } else if (r.fail_on.empty()) {
    throw UsageError("the reports were gated on different verdicts; choose with --fail-on");
  }
  r.command = this_command_line();
  if (loaded.size() == 1) {  // a re-render keeps the run's own provenance
    r.command = loaded.front().command;
    r.shard_index = loaded.front().shard_index;
    r.shard_count = loaded.front().shard_count;
    r.merged_from = loaded.front().merged_from;
  }
  // The merged report set is written into a staging folder of -o and swapped in as a whole.
  const std::vector<std::optional<fs::path>> sources = find_dumps(a.inputs, r);
  ReportDirWriter out;
  if (Status st = out.open(a.out); !st.ok()) throw UsageError("-o: " + st.message());
  const int dumps = copy_dumps(sources, out);
  const WrittenReport w = out.commit(r);
  if (!w.status.ok()) throw UsageError(w.status.message());

  std::vector<CaseResult> results;
  for (const ReportEntry& e : r.entries) {
    if (!a.quiet || e.result.verdict != Verdict::kPass)
      std::fputs(deltacheck::format_result(e.result, {false, a.quiet, r.fail_on}).c_str(), stdout);
    results.push_back(e.result);
  }
  std::fputs(deltacheck::format_summary(results, r.seconds, {false, a.quiet, r.fail_on}).c_str(),
             stdout);
  uintmax_t bytes = 0;
  for (const auto& f : w.files) bytes += f.bytes;
  std::printf("report: %s (also report.json, junit.xml, summary.md: %.1f kB in %.0f ms)\n",
              (fs::path(a.out) / "report.html").string().c_str(), bytes / 1e3, w.seconds * 1e3);
  if (dumps > 0)
    std::printf("failure dumps: %d in %s\n", dumps,
                (fs::path(a.out) / "failures").string().c_str());
  if (r.shard_count <= 1) print_step_summary(append_step_summary(r));
  return fails_gate(r) ? kExitFail : kExitPass;
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
      ->delimiter(',')
      ->allow_extra_args(false);  // a report folder after it is an input, not a verdict
  m->add_flag("--quiet,-q", args->quiet, "print only results that are not a pass");
  m->footer(R"(example:
  deltacheck run --suite gate --shard 0/2 --report-dir shard0
  deltacheck run --suite gate --shard 1/2 --report-dir shard1
  deltacheck report merge shard0 shard1 -o merged)");
  return {m, [args] { return merge(*args); }};  // `report diff` is report_diff.cc's
}

}  // namespace deltacheck::cli
