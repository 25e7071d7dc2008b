// The report of a run, or of several runs merged (CI shards): the model that report.json holds and
// that every other format (JUnit, Markdown, HTML) is written from. A merged report is therefore
// rendered exactly like a single run, and a report directory can be re-rendered from its JSON.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "harness/result.h"

namespace deltacheck::reports {

// report.json's schema; bump on any incompatible change (readers refuse newer versions).
constexpr int kReportSchemaVersion = 1;

struct Machine {
  std::string hostname;
  int cores = 0;
  std::string cpu_model;
  bool operator==(const Machine& o) const {
    return hostname == o.hostname && cores == o.cores && cpu_model == o.cpu_model;
  }
};

// One (case, backend) result with what a report adds to it.
struct Entry {
  harness::CaseResult result;
  int64_t index = 0;   // the case's position in the unsharded selection (merge order)
  int64_t seed = -1;   // the case's seed (-1 when its op has none)
  std::string family;  // op + layout kind + cache mode, e.g. "gdr packed cache=prefill"
  std::string rerun;   // one command that reruns exactly this case on this backend (non-pass)
  std::string dump;    // failure dump relative to the report directory; "" when none
};

struct Report {
  // What the run was; equal for the shards of one run and for their merge.
  std::string tool_version;
  std::string git_revision;
  std::string tolerance;             // harness::describe_policy()
  nlohmann::ordered_json selection;  // how cases were chosen: suite, cases, filter, seed
  std::vector<std::string> backends;
  std::vector<harness::Verdict> fail_on;
  int64_t selected_cases = 0;  // cases selected before sharding
  std::vector<Machine> machines;
  std::vector<Entry> entries;  // in selection order, backends in the order given

  // Provenance and timing: differ between equivalent runs.
  std::string command;
  int shard_index = 0, shard_count = 1;
  std::vector<std::string> merged_from;
  std::string started_at;  // UTC, ISO 8601
  double seconds = 0.0;    // wall time (sum over the inputs of a merge)
};

// A result as a report entry: family and seed from the id, the rerun command for results that
// fail, and per-token error curves kept for results that are not a pass only, rounded to three
// significant digits (all a plot needs; keeps report.json small). A report and its JSON round
// trip therefore hold the same numbers.
Entry make_entry(harness::CaseResult r, int64_t index, const std::string& backend_options = "");

// What a report records of a run besides its results. Both front ends fill one: the tool
// (`deltacheck run`, `golden verify`) and the library's deltacheck::make_report.
struct RunRecord {
  nlohmann::ordered_json selection;   // suite, cases, filter, seed (exclude); null when unknown
  std::vector<std::string> backends;  // as requested: the report's backends when no result ran
  std::vector<harness::Verdict> fail_on;
  std::map<std::string, int64_t> index_of;  // case id -> position in the unsharded selection
  int64_t selected = -1;                    // cases selected before sharding; -1: unknown
  int shard_index = 0, shard_count = 1;
  std::string backend_options;  // repeated in rerun commands ("--device cuda")
  // Backends whose failing results get a rerun command (the tool's own); nullopt: every one.
  std::optional<std::set<std::string>> rerunnable;
  std::map<std::pair<std::string, std::string>, std::string> dumps;  // (case, backend) -> file
  std::string started_at;                                            // UTC, ISO 8601
  double seconds = 0.0;                                              // wall time
};
// The one assembly of a report: provenance of this build and machine, the run record, and one
// entry per result in the order given. Backends are named as the results name them (in order of
// appearance; the requested ones when there is no result). A result's case takes its position in
// the selection; a case outside it takes the next free position, in order of appearance, and
// counts as selected.
Report assemble_report(const std::vector<harness::CaseResult>& results, const RunRecord& run);

// The gate: verdicts that fail a run unless --fail-on says otherwise.
std::vector<harness::Verdict> default_fail_on();
// "fail,leak" -> verdicts; InvalidArgument naming the bad entry ("pass" cannot fail a gate).
Status parse_fail_on(const std::vector<std::string>& names, std::vector<harness::Verdict>& out);
std::string fail_on_string(const std::vector<harness::Verdict>& v);
bool fails_gate(const Report& r);
bool in(const std::vector<harness::Verdict>& set, harness::Verdict v);

// The family a case belongs to for the verdict matrix: op + layout kind + cache mode, derived
// from the id ("gdr(layout=packed[63,0,65],...,cache=prefill,...)" -> "gdr packed cache=prefill").
std::string case_family(const std::string& case_id);
// The seed parameter of a case id, -1 when there is none.
int64_t case_seed(const std::string& case_id);
// "deltacheck run --backend B --case 'ID'" (plus backend options), quoted for a POSIX shell.
std::string rerun_command(const std::string& backend, const std::string& case_id,
                          const std::string& backend_options = "");
std::string shell_quote(const std::string& s);

// Provenance of this build and machine (the git revision is taken at configure time).
std::string tool_version();
std::string git_revision();
Machine this_machine();
std::string this_command_line();  // from /proc/self/cmdline, shell-quoted
std::string utc_now_iso8601();

// report.json. Non-finite numbers are written as the strings "NaN", "Infinity", "-Infinity".
std::string format_json(const Report& r);
struct LoadedReport {
  Status status;
  Report report;
};
LoadedReport parse_json(const std::string& text, const std::string& source);

// The other formats, each a pure function of the report.
std::string format_junit(const Report& r);
std::string format_markdown(const Report& r);
// GitHub Actions' job summary: appends format_markdown(r) to the file $GITHUB_STEP_SUMMARY names.
// path is "" (and nothing is written) when the variable is unset or empty.
struct StepSummary {
  Status status;
  std::string path;
};
StepSummary append_step_summary(const Report& r);
std::string format_html(const Report& r);

// The files of a report directory.
struct WrittenFile {
  std::string path;
  uintmax_t bytes = 0;
};
struct WrittenReport {
  Status status;
  std::vector<WrittenFile> files;  // report.json, junit.xml, summary.md, report.html
  double seconds = 0.0;            // time spent formatting and writing
};
// The report set replaced as a whole, with the same rules as a run's (report_dir.h): written
// into a staging folder in `dir`, then renamed into place; a previous run's failure dumps are
// removed (the report names none of them).
WrittenReport write_report_files(const Report& r, const std::string& dir);
// The report with every string valid UTF-8 and names and one-line fields free of control
// characters (cases/safe_text.h); write_report_files() writes this form.
Report sanitized(Report r);
LoadedReport read_report(const std::string& dir_or_file);

// Merges reports (shards of one run, or runs of different backends): entries ordered by case
// position then backend, timing summed. Refuses reports of different builds or tolerance
// policies, the same (case, backend) twice, and incomplete shard sets.
struct MergedReport {
  Status status;
  Report report;
};
MergedReport merge_reports(const std::vector<Report>& inputs,
                           const std::vector<std::string>& sources);

}  // namespace deltacheck::reports
