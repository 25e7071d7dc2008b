// Console output, the progress bar, report files, failure dumps and the exit code of commands that
// run cases; backend selection.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>

#include "tools/deltacheck/commands.h"

namespace deltacheck::cli {

void add_output_options(CLI::App* app, OutputOptions& o) {
  app->add_flag("--quiet,-q", o.quiet, "print only cases that are not a pass");
  app->add_option("--report-dir", o.report_dir,
                  "write report.json, junit.xml, summary.md, report.html and failures/*.h5 "
                  "(failure dumps) into this directory");
  app->add_option("--fail-on", o.fail_on,
                  "verdicts that fail the run (exit code 1), comma-separated: fail, leak, error, "
                  "unsupported, skipped")
      ->delimiter(',')
      ->allow_extra_args(false)  // as --backend: FILE after it is not a verdict
      ->capture_default_str();
  app->add_option("--progress", o.progress,
                  "bar: one progress line (passing rows folded into it), lines: a line per result, "
                  "auto: bar when stderr is a terminal")
      ->check(CLI::IsMember({"auto", "bar", "lines"}))
      ->capture_default_str();
  app->add_option("--max-dumps", o.max_dumps, "failure dumps written at most (with --report-dir)")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
}

// What a report needs beyond the results, the progress bar, and the failure dumps written so far
// (the dump hook runs on worker threads; on_result and finish on the reporting thread).
struct ResultSink::State {
  // What the report records besides the results (fail_on, selection, positions, backend options
  // repeated in rerun commands, start time, failure dumps written so far: under `mu`); its
  // seconds are filled in by finish().
  RunRecord run;
  // Progress.
  bool bar = false;
  size_t expected = 0, seen = 0;
  std::map<Verdict, int> counts;
  // The report set (report files and failure dumps) is written into a private staging folder
  // and replaces the previous one as a whole when the run finishes (reports/report_dir.h).
  ReportDirWriter dir;
  // A failing result's dump waits here until the case's last call has returned (on_result):
  // nothing a candidate could read exists while it runs.
  struct PendingDump {
    PreparedCase pc;
    TensorMap outputs;
    CaseResult r;
  };
  std::mutex mu;
  int dumps_started = 0, dumps_skipped = 0;
  std::map<std::pair<std::string, std::string>, PendingDump> pending;  // (case, backend)
  std::vector<std::string> dump_errors;
};

namespace {

namespace fs = std::filesystem;

std::string backend_option_args(const BackendSelection& b) {
  const BackendOptions defaults;
  std::string s;
  auto add = [&](const std::string& flag, const std::string& value) {
    s += (s.empty() ? "" : " ") + flag + " " + shell_quote(value);
  };
  if (b.options.device != defaults.device) add("--device", b.options.device);
  if (!b.options.cmd.empty()) add("--cmd", b.options.cmd);
  if (!b.options.serve.empty()) add("--serve", b.options.serve);
  if (b.options.timeout_s != defaults.timeout_s)
    add("--timeout", fmt::format("{}", b.options.timeout_s));
  if (!b.options.library.empty()) add("--library", b.options.library);
  if (!b.options.op.empty()) add("--op", b.options.op);
  if (b.options.profile != defaults.profile) add("--profile", profile_name(b.options.profile));
  if (b.options.deterministic) s += (s.empty() ? "" : " ") + std::string("--deterministic");
  if (b.options.batch_invariant) s += (s.empty() ? "" : " ") + std::string("--batch-invariant");
  if (b.isolate) s += (s.empty() ? "" : " ") + std::string("--isolate");
  return s;
}

}  // namespace

ResultSink::ResultSink(const OutputOptions& o, std::string title)
    : options_(o),
      color_(isatty(fileno(stdout))),
      start_(std::chrono::steady_clock::now()),
      state_(std::make_unique<State>()) {
  // Check what can be checked before anything runs: a bad --fail-on or an unwritable report
  // directory should not cost a whole run.
  if (Status st = parse_fail_on(split_commas(o.fail_on), state_->run.fail_on); !st.ok())
    throw UsageError(st.message());
  if (!o.report_dir.empty())
    if (Status st = state_->dir.open(o.report_dir); !st.ok())
      throw UsageError("--report-dir: " + st.message());
  state_->run.started_at = utc_now_iso8601();
  state_->bar =
      o.progress == "bar" || (o.progress == "auto" && isatty(fileno(stderr)) &&
                              std::getenv("TERM") && std::string(std::getenv("TERM")) != "dumb");
  std::printf("deltacheck %s: %s; tolerance %s\n", DELTACHECK_VERSION, title.c_str(),
              tolerance_policy().c_str());
  std::fflush(stdout);
}

// A run that ended early (an exception) leaves no staging folder behind (~ReportDirWriter).
ResultSink::~ResultSink() = default;

void ResultSink::describe_run(const Selection& s, const SelectedCases& sel,
                              const BackendSelection& b) {
  State& st = *state_;
  st.run.selection = {
      {"suite", s.case_ids.empty() ? nlohmann::ordered_json(s.suite) : nullptr},
      {"cases", s.case_ids},
      {"filter", s.filter},
      {"seed", s.seed >= 0 ? nlohmann::ordered_json(s.seed) : nullptr},
  };
  if (!s.excludes.empty()) st.run.selection["exclude"] = s.excludes;
  st.run.backends = split_commas(b.names);
  for (size_t i = 0; i < sel.cases.size(); ++i)
    st.run.index_of.emplace(sel.cases[i].id(), sel.indices[i]);
  st.run.selected = sel.total;
  st.run.shard_index = sel.shard_index;
  st.run.shard_count = sel.shard_count;
  st.run.backend_options = backend_option_args(b);
  st.expected = sel.cases.size() * st.run.backends.size();
}

FailureCallback ResultSink::failure_hook() {
  if (options_.report_dir.empty() || options_.max_dumps == 0) return nullptr;
  return [this](const PreparedCase& pc, const TensorMap& outputs, const CaseResult& r) {
    State& st = *state_;
    {
      std::lock_guard<std::mutex> lock(st.mu);
      if (st.dumps_started >= options_.max_dumps) {
        ++st.dumps_skipped;
        return;
      }
      ++st.dumps_started;
    }
    State::PendingDump copy{pc, outputs, r};  // outside the lock: other workers go on
    std::lock_guard<std::mutex> lock(st.mu);
    st.pending.insert_or_assign({r.case_id, r.backend}, std::move(copy));
  };
}

void ResultSink::write_pending_dump(const CaseResult& r) {
  State& st = *state_;
  std::unique_lock<std::mutex> lock(st.mu);
  const auto it = st.pending.find({r.case_id, r.backend});
  if (it == st.pending.end()) return;
  const State::PendingDump d = std::move(it->second);
  st.pending.erase(it);
  lock.unlock();
  const std::string name = dump_file_name(r.case_id, r.backend);
  std::string path;
  Status s = st.dir.dump_path(name, &path);
  if (s.ok())
    s = write_failure_dump(path, d.pc, d.outputs, d.r,
                           rerun_command(r.backend, r.case_id, st.run.backend_options));
  lock.lock();
  if (s.ok())
    st.run.dumps[{r.case_id, r.backend}] = "failures/" + name;
  else
    st.dump_errors.push_back(s.message());
}

namespace {

std::string progress_line(size_t seen, size_t expected, const std::map<Verdict, int>& n,
                          double secs) {
  constexpr int kWidth = 28;
  const double frac = expected > 0 ? std::min(1.0, static_cast<double>(seen) / expected) : 0.0;
  const int full = static_cast<int>(frac * kWidth);
  std::string bar = std::string(full, '#') + std::string(kWidth - full, '.');
  std::string tally;
  for (Verdict v : {Verdict::kFail, Verdict::kLeak, Verdict::kError, Verdict::kUnsupported}) {
    const auto it = n.find(v);
    if (it != n.end() && it->second > 0)
      tally += fmt::format("  {} {}", it->second, verdict_name(v));
  }
  return expected > 0 ? fmt::format("[{}] {}/{}{}  {:.1f} s", bar, seen, expected, tally, secs)
                      : fmt::format("{} results{}  {:.1f} s", seen, tally, secs);
}

}  // namespace

void ResultSink::on_result(const CaseResult& r) {
  State& st = *state_;
  // Every call of this case has returned (callers report a case after all its backends ran).
  write_pending_dump(r);
  ++st.seen;
  ++st.counts[r.verdict];
  const bool pass = r.verdict == Verdict::kPass;
  // On a terminal the bar stands for the passing rows; everything else is printed above it.
  if (st.bar) std::fputs("\r\033[K", stderr);
  if (!(pass && (options_.quiet || st.bar))) {
    ConsoleOptions c{color_, options_.quiet, st.run.fail_on};
    std::string text = deltacheck::format_result(r, c);
    if (is_failure(r.verdict) && !options_.report_dir.empty()) {
      std::lock_guard<std::mutex> lock(st.mu);
      const auto it = st.run.dumps.find({r.case_id, r.backend});
      if (it != st.run.dumps.end())
        text += fmt::format("{:12}dump: {}\n", "",
                            (fs::path(options_.report_dir) / it->second).string());
      text += fmt::format("{:12}rerun: {}\n", "",
                          rerun_command(r.backend, r.case_id, st.run.backend_options));
    }
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  }
  if (st.bar) {
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::fputs(progress_line(st.seen, st.expected, st.counts, secs).c_str(), stderr);
    std::fflush(stderr);
  }
}

int ResultSink::finish(const std::vector<CaseResult>& results) {
  State& st = *state_;
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (st.bar) std::fputs("\r\033[K", stderr);
  ConsoleOptions c{color_, options_.quiet, st.run.fail_on};
  std::fputs(deltacheck::format_summary(results, secs, c).c_str(), stdout);
  const CaseResult* first_failure = nullptr;
  for (const auto& r : results)
    if (std::find(st.run.fail_on.begin(), st.run.fail_on.end(), r.verdict) !=
        st.run.fail_on.end()) {
      first_failure = &r;
      break;
    }

  if (!options_.report_dir.empty()) {
    st.run.seconds = secs;
    const Report rep = assemble_report(results, st.run);
    for (const std::string& e : st.dump_errors)
      std::fprintf(stderr, "deltacheck: warning: no failure dump: %s\n", e.c_str());
    const WrittenReport w = st.dir.commit(rep);
    if (!w.status.ok()) throw UsageError(w.status.message());
    uintmax_t bytes = 0;
    for (const auto& f : w.files) bytes += f.bytes;
    std::printf("report: %s (also report.json, junit.xml, summary.md: %.1f kB in %.0f ms)\n",
                (fs::path(options_.report_dir) / "report.html").string().c_str(), bytes / 1e3,
                w.seconds * 1e3);
    // A shard's summary is partial: the job summary comes from `report merge`.
    if (rep.shard_count <= 1) print_step_summary(append_step_summary(rep));
    if (!st.run.dumps.empty())
      std::printf("failure dumps: %zu in %s\n", st.run.dumps.size(),
                  (fs::path(options_.report_dir) / "failures").string().c_str());
    if (st.dumps_skipped > 0)
      std::printf("%d more failures were not dumped (--max-dumps %d)\n", st.dumps_skipped,
                  options_.max_dumps);
  }
  if (first_failure) {
    std::printf(
        "rerun the first failing case: %s\n",
        rerun_command(first_failure->backend, first_failure->case_id, st.run.backend_options)
            .c_str());
    return kExitFail;
  }
  return kExitPass;
}

void print_step_summary(const StepSummary& s) {
  if (!s.status.ok())
    std::fprintf(stderr, "deltacheck: warning: %s\n", s.status.message().c_str());
  else if (!s.path.empty())
    std::printf("job summary: appended to %s\n", s.path.c_str());
}

void add_backend_options(CLI::App* app, BackendSelection& b) {
  // One value per occurrence (--backend a,b or --backend a --backend b): a vector option would
  // otherwise take every word up to the next option, a positional FILE included.
  app->add_option("--backend,-b", b.names, "backends, comma-separated (deltacheck list)")
      ->allow_extra_args(false)
      ->capture_default_str();
  app->add_option("--device", b.options.device, "torch backend device: cpu | cuda")
      ->capture_default_str();
  app->add_option("--cmd", b.options.cmd,
                  "external backend: command, e.g. 'python3 x.py {in} {out}'");
  app->add_option("--serve", b.options.serve,
                  "external backend: one long-lived program for all calls (one per --jobs "
                  "thread), e.g. 'python3 x.py'; it answers requests on stdin (docs/external.md)");
  app->add_option("--timeout", b.options.timeout_s,
                  "external backend, and every backend under --isolate: seconds per backend call "
                  "before it is killed (verdict error)")
      ->capture_default_str();
  app->add_flag("--isolate", b.isolate,
                "run each backend call in a forked child process: a crash (abort, segfault, "
                "exit) or a hang past --timeout is the verdict error for that case, and the run "
                "continues (external programs are always separate processes)");
  add_max_memory_option(app, b.max_memory);
  app->add_option("--library", b.options.library, "torch-op backend: shared library to load");
  app->add_option("--op", b.options.op, "torch-op backend: operator, e.g. myns::my_op");
  app->add_option_function<std::string>(
         "--matmul-precision",
         [&b](const std::string& v) {
           try {
             b.options.profile.matmul = matmul_precision_from_name(v);
           } catch (const std::invalid_argument& e) {
             throw CLI::ValidationError("--matmul-precision", e.what());
           }
         },
         "external, torch-op: what the candidate's matmuls do with fp32 operands: fp32 | tf32 "
         "(tf32 cases are judged against the TF32 baseline; printed with every result); the "
         "same as --profile tf32")
      ->type_name("fp32|tf32");
  app->add_option_function<std::string>(
         "--profile",
         [&b](const std::string& v) {
           try {
             b.options.profile = merged(profile_from_name(v), b.options.profile);
           } catch (const std::invalid_argument& e) {
             throw CLI::ValidationError("--profile", e.what());
           }
         },
         "external, torch-op: the candidate's precision profile, the formulation choices it "
         "makes, comma-separated: tf32, chunk=N, cumsum=independent, l2norm=act, operands=fp32, "
         "autodiff=act "
         "(judged against that profile's baselines, printed with every result; "
         "docs/tolerance.md), e.g. --profile chunk=128,cumsum=independent")
      ->type_name("CHOICES");
  app->add_flag("--deterministic", b.options.deterministic,
                "external, torch-op: the candidate promises bit-identical results for identical "
                "inputs (two runs that differ then fail; otherwise the repeat probe measures it); "
                "a pass then needs its probes: one whose every probe was declined is an error");
  app->add_flag("--batch-invariant", b.options.batch_invariant,
                "external, torch-op: the candidate promises that a sequence's bits do not depend "
                "on the rest of its batch (the leakage probes then compare bit for bit and catch "
                "leaks below the tolerance; otherwise they compare with the tolerance); a pass "
                "then needs its probes, as with --deterministic");
}

std::vector<std::unique_ptr<Backend>> make_backends(const BackendSelection& b) {
  std::vector<std::unique_ptr<Backend>> out;
  const std::vector<std::string> names = split_commas(b.names);
  for (size_t i = 0; i < names.size(); ++i)  // results are keyed by (case, backend)
    if (std::find(names.begin(), names.begin() + i, names[i]) != names.begin() + i)
      throw UsageError("--backend: '" + names[i] + "' is given twice");
  for (const std::string& name : names) {
    if (name == "external" && !b.options.serve.empty()) {
      if (!b.options.cmd.empty())
        throw UsageError("--backend external: give --cmd or --serve, not both");
      if (b.options.serve.find("{in}") != std::string::npos ||
          b.options.serve.find("{out}") != std::string::npos)
        throw UsageError(
            "--serve takes the program without {in} and {out}: each call names them on its "
            "stdin (docs/external.md)");
    } else if (name == "external" && b.options.cmd.empty()) {
      throw UsageError(
          "--backend external needs --cmd 'PROGRAM {in} {out}' (golden/README.md) or --serve "
          "'PROGRAM' (docs/external.md)");
    } else if (name == "external") {
      for (const char* slot : {"{in}", "{out}"})
        if (b.options.cmd.find(slot) == std::string::npos)
          throw UsageError(std::string("--cmd must contain ") + slot +
                           " (replaced by the case's input and output files: 'PROGRAM {in} "
                           "{out}', golden/README.md)");
    }
    if ((name == "external" || b.isolate) && !(b.options.timeout_s > 0))
      throw UsageError("--timeout must be a positive number of seconds");
    try {
      out.push_back(deltacheck::make_backend(name, b.options));
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    if (b.isolate && name != "external")  // a program is a separate process already
      out.back() = isolated_backend(std::move(out.back()), b.options.timeout_s);
  }
  if (out.empty()) throw UsageError("no backend given (--backend cpu)");
  return out;
}

}  // namespace deltacheck::cli
