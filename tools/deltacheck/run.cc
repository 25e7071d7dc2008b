// deltacheck run: run cases on backends and report verdicts.
#include <fmt/format.h>

#include <memory>

#include "deltacheck/pins.h"
#include "tools/deltacheck/commands.h"

namespace deltacheck::cli {
namespace {

struct RunArgs {
  Selection sel;
  BackendSelection backends;
  OutputOptions output;
  int jobs = 1;
  bool no_probes = false;
  bool prepare_ahead = false;
  std::string cache_dir;
  bool shrink = false;  // --shrink: each backend's first failure, shrunk at the end
  std::string shrink_budget = "1m";
  std::string expect;        // --expect FILE: pinned verdicts decide the exit code
  std::string expect_write;  // --expect-write FILE: this run's verdicts become the pins
};

// The exit code with pins: 1 when a pin flipped or an unpinned result fails the gate.
int check_expectations(const std::vector<Pin>& pins, const std::string& source,
                       const std::vector<CaseResult>& results,
                       const std::vector<std::string>& fail_on) {
  const PinCheck check = check_pins(pins, results);
  std::fputs(format_pin_check(check, source).c_str(), stdout);
  std::vector<Verdict> gate;
  if (Status st = parse_fail_on(split_commas(fail_on), gate); !st.ok())
    throw UsageError(st.message());
  std::vector<CaseResult> unpinned;
  for (const CaseResult* r : check.unpinned) unpinned.push_back(*r);
  return !check.ok() || fails(unpinned, gate) ? kExitFail : kExitPass;
}

int run(const RunArgs& a) {
  const SelectedCases sel = select_sharded(a.sel);
  const std::vector<Case>& cs = sel.cases;
  // An empty shard (more shards than cases) is a valid, empty run; an empty selection is not.
  if (sel.total == 0) throw UsageError("no case selected (check --suite, --case and --filter)");
  if (a.jobs < 1 || a.jobs > 1024) throw UsageError("--jobs must be in [1, 1024]");
  if (a.prepare_ahead && a.jobs > 1)
    throw UsageError("--prepare-ahead is for one job: with --jobs " + std::to_string(a.jobs) +
                     " cases overlap already");
  // The expectation cache and its key are opened before anything is printed: an unusable one is
  // one line on stderr and exit 2, nothing on stdout.
  std::vector<Pin> pins;
  if (!a.expect.empty()) {
    StatusOr<std::vector<Pin>> read = read_pins(a.expect);
    if (!read.ok()) throw UsageError(read.status().message());
    pins = read.take();
  }
  const double shrink_budget = parse_duration(a.shrink_budget, "--shrink-budget");
  RunOptions ropt;
  ropt.cache = open_expectation_cache(a.cache_dir);
  // Cases named explicitly must fit (exit 2 before anything runs); a suite's case that does not
  // is skipped by the runner with the reason.
  const int64_t max_memory = max_memory_bytes(a.backends.max_memory);
  if (!a.sel.case_ids.empty())
    for (const Case& c : cs) refuse_if_too_big(c, max_memory, ropt.cache != nullptr);
  const auto owned = make_backends(a.backends);
  std::vector<Backend*> backends;
  for (const auto& b : owned) backends.push_back(b.get());
  ResultSink sink(
      a.output,
      fmt::format("{} cases x {} backends{}", cs.size(), backends.size(),
                  sel.shard_count > 1 ? fmt::format(" (shard {}/{} of {} cases)", sel.shard_index,
                                                    sel.shard_count, sel.total)
                                      : ""));
  sink.describe_run(a.sel, sel, a.backends);
  ropt.on_failure = sink.failure_hook();
  ropt.jobs = a.jobs;
  ropt.probes = !a.no_probes;
  ropt.max_memory_bytes = max_memory;
  ropt.prepare_ahead = a.prepare_ahead;
  // The user asked for the probes (their comparisons bit for bit): a pass needs them.
  ropt.require_probes = a.backends.options.deterministic || a.backends.options.batch_invariant;
  const auto results =
      deltacheck::run(cs, backends, ropt, [&](const auto& r) { sink.on_result(r); });
  int code = sink.finish(results);
  if (a.shrink) shrink_first_failures(results, backends, shrink_budget, ropt.probes, max_memory);
  if (!a.expect_write.empty()) {
    if (Status st = write_pins(results, a.expect_write); !st.ok()) throw UsageError(st.message());
    std::printf("pins: %zu verdicts written to %s (deltacheck run --expect %s)\n", results.size(),
                a.expect_write.c_str(), a.expect_write.c_str());
    if (a.expect.empty()) code = kExitPass;  // recording the known verdicts is the point
  }
  if (!a.expect.empty()) code = check_expectations(pins, a.expect, results, a.output.fail_on);
  return code;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "run cases on backends and report verdicts");
  add_selection_options(cmd, args->sel);
  add_backend_options(cmd, args->backends);
  add_output_options(cmd, args->output);
  cmd->add_option("--jobs,-j", args->jobs, "cases run concurrently")->capture_default_str();
  cmd->add_flag("--no-probes", args->no_probes,
                "skip the oracle-free leakage probes (repeat, isolation, alone, order, split)");
  cmd->add_flag("--prepare-ahead", args->prepare_ahead,
                "prepare the next case, and each probe call's inputs, on another thread while a "
                "call runs: less waiting for a backend that leaves a core idle (an external "
                "program, a GPU); the same results");
  cmd->add_option("--cache-dir", args->cache_dir,
                  "keep inputs, FP64 expectations and baselines here across runs of the same "
                  "build, encrypted and authenticated with the key in DELTACHECK_CACHE_KEY_FILE "
                  "(default ~/.local/state/deltacheck/cache.key, made on first use; "
                  "docs/performance.md; verdicts are the same without it)")
      ->envname("DELTACHECK_CACHE_DIR");
  cmd->add_flag("--shrink", args->shrink,
                "at the end, shrink each backend's first failure to the smallest case that fails "
                "the same way (deltacheck shrink)");
  cmd->add_option("--shrink-budget", args->shrink_budget, "wall time per shrink (90s, 10m)")
      ->capture_default_str();
  cmd->add_option("--expect", args->expect,
                  "pinned verdicts (a file of '<backend> <verdict> <case id | re:REGEX>' lines): "
                  "exit 0 while every pin holds and no unpinned result fails, 1 when a verdict "
                  "differs from its pin, either way");
  cmd->add_option("--expect-write", args->expect_write,
                  "write this run's verdicts as pins to FILE (exit 0 unless --expect is given)");
  return {cmd, [args] { return run(*args); }};
}

}  // namespace deltacheck::cli
