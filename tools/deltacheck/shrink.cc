// deltacheck shrink: the smallest case that fails the same way; deltacheck hunt: draw cases from
// each operation's schema until they fail, shrink what fails, keep the minimal ids in a corpus.
// Also the shrink that `run --shrink` does at the end of a run (shrink_first_failures).
#include "deltacheck/shrink.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "deltacheck/golden.h"
#include "tools/deltacheck/commands.h"

namespace deltacheck::cli {

double parse_duration(const std::string& text, const std::string& what) {
  size_t used = 0;
  double v = -1;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = text.substr(used);
  const double scale = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : -1;
  if (used == 0 || scale < 0 || !(v > 0))
    throw UsageError(what + " '" + text + "': expected a duration such as 90s, 10m or 1h");
  return v * scale;
}

namespace {

void print_step(const ShrinkStep& s, size_t n) {
  std::printf("  %2zu. %-48s %s\n", n, printable_line(s.change, 48).c_str(), s.size.str().c_str());
  std::fflush(stdout);
}

void print_shrink(const ShrinkResult& s, const std::string& backend) {
  std::printf("minimal: %s\n", s.minimal.case_id.c_str());
  std::printf("  short: %s\n", short_id(parse_derived_case(s.minimal.case_id)).c_str());
  std::printf("  still %s: %s\n", s.kept.str().c_str(),
              printable_line(s.minimal.message, 400).c_str());
  std::printf("  %s -> %s: %zu steps, %d runs, %.1f s%s\n", s.before.str().c_str(),
              s.after.str().c_str(), s.trail.size(), s.runs, s.seconds,
              s.complete ? "" : " (budget spent: a smaller case may exist)");
  std::printf("rerun: %s\n", rerun_command(backend, s.minimal.case_id).c_str());
}

// The minimal case as a golden fixture (its inputs and FP64 expectation), written atomically.
void write_fixture(const std::string& path, const Case& c) {
  FixtureFileInfo info;
  info.generator_version = kGeneratorVersion;
  info.tolerance_policy = tolerance_policy_id();
  info.producer = std::string("deltacheck ") + DELTACHECK_VERSION + " shrink";
  FixtureWriter writer;
  if (Status st = writer.open(path, info); !st.ok()) throw UsageError(path + ": " + st.message());
  if (Status st = writer.add(make_fixture_case(c)); !st.ok())
    throw UsageError(path + ": " + st.message());
  if (Status st = writer.commit(); !st.ok()) throw UsageError(path + ": " + st.message());
  std::printf(
      "fixture: %s (the minimal case's inputs and expectation; deltacheck golden verify %s "
      "--backend B)\n",
      path.c_str(), path.c_str());
}

std::unique_ptr<Backend> one_backend(const BackendSelection& b, const std::string& command) {
  std::vector<std::unique_ptr<Backend>> owned = make_backends(b);
  if (owned.size() != 1)
    throw UsageError(command + " takes one --backend (got " + std::to_string(owned.size()) + ")");
  return std::move(owned.front());
}

// --- shrink ---------------------------------------------------------------------------------

struct ShrinkArgs {
  std::string case_id;
  BackendSelection backends;
  std::string output;
  std::string budget = "5m";
  int max_runs = 400;
  bool no_probes = false;
  bool quiet = false;
};

int run_shrink(const ShrinkArgs& a) {
  Case c = [&] {
    try {
      return parse_case(a.case_id);
    } catch (const CaseIdError& e) {
      throw UsageError(e.what());
    }
  }();
  refuse_if_too_big(c, max_memory_bytes(a.backends.max_memory));
  if (a.max_runs < 0) throw UsageError("--max-runs must be >= 0");
  ShrinkOptions o;
  o.probes = !a.no_probes;
  o.max_runs = a.max_runs;
  o.budget_seconds = parse_duration(a.budget, "--budget");
  o.max_memory_bytes = max_memory_bytes(a.backends.max_memory);
  size_t n = 0;
  if (!a.quiet) o.on_step = [&](const ShrinkStep& s) { print_step(s, ++n); };
  const std::unique_ptr<Backend> backend = one_backend(a.backends, "shrink");
  if (!a.quiet) std::printf("shrink %s on %s\n", c.id().c_str(), backend->name().c_str());
  const ShrinkResult s = shrink(c, *backend, o);
  if (!s.status.ok()) throw UsageError(s.status.message());
  print_shrink(s, backend->name());
  if (!a.output.empty()) write_fixture(a.output, parse_case(s.minimal.case_id));
  return kExitPass;
}

// --- hunt -----------------------------------------------------------------------------------

struct HuntArgs {
  BackendSelection backends;
  std::string budget = "1m";
  int64_t seed = 0;
  std::vector<std::string> ops;
  std::string filter;
  std::string corpus;
  std::string shard;
  int64_t max_cases = 0;
  int64_t max_findings = 0;
  bool no_shrink = false;
  bool no_probes = false;
  std::string shrink_budget = "2m";
  std::string progress = "auto";
};

std::pair<int, int> parse_hunt_shard(const std::string& s) {
  const size_t slash = s.find('/');
  try {
    if (slash == std::string::npos) throw std::invalid_argument(s);
    size_t u1 = 0, u2 = 0;
    const int i = std::stoi(s.substr(0, slash), &u1), n = std::stoi(s.substr(slash + 1), &u2);
    if (u1 != slash || u2 != s.size() - slash - 1 || n < 1 || i < 0 || i >= n)
      throw std::invalid_argument(s);
    return {i, n};
  } catch (const std::exception&) {
    throw UsageError("--shard '" + s + "': expected I/N with 0 <= I < N");
  }
}

int run_hunt(const HuntArgs& a) {
  HuntOptions o;
  o.seed = static_cast<uint64_t>(a.seed);
  o.ops = split_commas(a.ops);
  o.filter = a.filter;
  o.budget_seconds = parse_duration(a.budget, "--budget");
  o.max_cases = a.max_cases;
  o.max_findings = a.max_findings;
  if (a.max_findings < 0) throw UsageError("--max-findings must be >= 0");
  if (a.max_cases < 0) throw UsageError("--max-cases must be >= 0");
  if (!a.shard.empty()) std::tie(o.shard_index, o.shard_count) = parse_hunt_shard(a.shard);
  o.probes = !a.no_probes;
  o.shrink = !a.no_shrink;
  o.shrink_options.budget_seconds = parse_duration(a.shrink_budget, "--shrink-budget");
  o.max_memory_bytes = max_memory_bytes(a.backends.max_memory);
  if (a.progress != "auto" && a.progress != "bar" && a.progress != "lines")
    throw UsageError("--progress must be auto, bar or lines");
  for (const std::string& op : o.ops) {
    bool known = false;
    for (const OpSchema& schema : list_ops()) known = known || schema.op == op;
    if (!known) throw UsageError("--ops '" + op + "': no such operation (deltacheck list ops)");
  }
  if (!o.filter.empty()) make_id_filter(o.filter);  // a bad pattern: exit 2 before anything runs
  const std::unique_ptr<Backend> backend = one_backend(a.backends, "hunt");
  const bool bar = a.progress == "bar" || (a.progress == "auto" && isatty(fileno(stderr)));
  fmt::print("hunt on {}: seed {}{}, budget {}, {}\n", backend->name(), a.seed,
             o.shard_count > 1 ? fmt::format(", shard {}/{}", o.shard_index, o.shard_count) : "",
             a.budget,
             o.ops.empty() ? "every op" : "op " + fmt::format("{}", fmt::join(o.ops, ",")));
  std::fflush(stdout);
  int64_t failing = 0;
  o.on_case = [&](const CaseResult& r, int64_t run, int64_t found) {
    if (is_failure(r.verdict)) ++failing;
    if (bar) {
      std::fprintf(stderr, "\r  %lld cases run, %lld failing, %lld findings",
                   static_cast<long long>(run), static_cast<long long>(failing),
                   static_cast<long long>(found));
      std::fflush(stderr);
    } else if (run % 50 == 0) {
      std::fprintf(stderr, "  %lld cases run, %lld failing, %lld findings\n",
                   static_cast<long long>(run), static_cast<long long>(failing),
                   static_cast<long long>(found));
    }
  };
  HuntResult h;
  try {
    h = hunt(*backend, o);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  if (bar) std::fputc('\n', stderr);
  int added = 0;
  for (size_t i = 0; i < h.findings.size(); ++i) {
    const HuntFinding& f = h.findings[i];
    std::printf("\nfinding %zu: %s, after %lld cases, %.1f s\n  found: %s\n", i + 1,
                f.kind.str().c_str(), static_cast<long long>(f.after_cases), f.after_seconds,
                f.found.case_id.c_str());
    if (f.shrunk.status.ok())
      print_shrink(f.shrunk, backend->name());
    else
      std::printf("rerun: %s\n", rerun_command(backend->name(), f.found.case_id).c_str());
    if (!a.corpus.empty()) {
      bool is_new = false;
      const Case minimal = parse_case(f.minimal_id());
      if (Status st = write_corpus_case(
              a.corpus, minimal,
              {"backend " + backend->name(), "class " + f.kind.str(), "found " + f.found.case_id,
               fmt::format("hunt seed {} shard {}/{}", a.seed, o.shard_index, o.shard_count)},
              &is_new);
          !st.ok())
        throw UsageError(st.message());
      added += is_new;
    }
  }
  std::printf(
      "\nhunt: %lld drawn, %lld refused by their schema, %lld filtered out, %lld run (%lld "
      "unsupported), %lld failing, %zu finding%s in %.1f s\n",
      static_cast<long long>(h.drawn), static_cast<long long>(h.rejected),
      static_cast<long long>(h.filtered), static_cast<long long>(h.run),
      static_cast<long long>(h.unsupported), static_cast<long long>(h.failures), h.findings.size(),
      h.findings.size() == 1 ? "" : "s", h.seconds);
  if (!a.corpus.empty())
    std::printf("corpus: %s (%d new; replay: deltacheck run --suite corpus:%s --backend %s)\n",
                a.corpus.c_str(), added, a.corpus.c_str(), backend->name().c_str());
  return h.findings.empty() ? kExitPass : kExitFail;
}

}  // namespace

// `run --shrink`: the first failure of each backend, shrunk within `budget_seconds` each.
void shrink_first_failures(const std::vector<CaseResult>& results,
                           const std::vector<Backend*>& backends, double budget_seconds,
                           bool probes, int64_t max_memory) {
  for (Backend* b : backends) {
    for (const CaseResult& r : results) {
      if (r.backend != b->name() || !is_failure(r.verdict)) continue;
      std::printf("\nshrink the first failure on %s: %s\n", b->name().c_str(), r.case_id.c_str());
      ShrinkOptions o;
      o.probes = probes;
      o.budget_seconds = budget_seconds;
      o.max_memory_bytes = max_memory;
      size_t n = 0;
      o.on_step = [&](const ShrinkStep& s) { print_step(s, ++n); };
      const ShrinkResult s = shrink(parse_derived_case(r.case_id), *b, o);
      if (s.status.ok())
        print_shrink(s, b->name());
      else
        std::printf("  not shrunk: %s\n", printable_line(s.status.message()).c_str());
      break;
    }
  }
}

Command add_shrink_command(CLI::App& app) {
  auto args = std::make_shared<ShrinkArgs>();
  CLI::App* cmd = app.add_subcommand(
      "shrink", "reduce a failing case to the smallest one that fails the same way");
  cmd->add_option("--case", args->case_id, "the failing case id")->required();
  add_backend_options(cmd, args->backends);
  cmd->add_option("-o,--output", args->output, "write the minimal case as a golden fixture (HDF5)");
  cmd->add_option("--budget", args->budget, "wall time at most (90s, 10m, 1h)")
      ->capture_default_str();
  cmd->add_option("--max-runs", args->max_runs, "candidate cases run at most (0: no limit)")
      ->capture_default_str();
  cmd->add_flag("--no-probes", args->no_probes, "judge candidates without the leakage probes");
  cmd->add_flag("--quiet,-q", args->quiet, "print the minimal case only, not the trail");
  cmd->footer(R"(example:
  deltacheck shrink --case 'gdr(layout=packed[1*40,2*30,3*20],HV=8)' --backend wrong:ignore-cu-seqlens -o min.h5
exit codes: 0 shrunk (the minimal case fails as the given one did), 2 usage error or a case that
does not fail)");
  return {cmd, [args] { return run_shrink(*args); }};
}

Command add_hunt_command(CLI::App& app) {
  auto args = std::make_shared<HuntArgs>();
  CLI::App* cmd = app.add_subcommand(
      "hunt", "draw cases from each operation's parameter space, run them, shrink what fails");
  add_backend_options(cmd, args->backends);
  cmd->add_option("--budget", args->budget, "wall time (90s, 10m, 1h)")->capture_default_str();
  cmd->add_option("--seed", args->seed, "the hunt's seed: the same seed draws the same cases")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 62))
      ->capture_default_str();
  cmd->add_option("--ops", args->ops, "draw from these operations only (repeatable, or a,b)")
      ->allow_extra_args(false);
  cmd->add_option("--filter,-f", args->filter, "run only drawn ids matching this regex (RE2)");
  cmd->add_option("--corpus", args->corpus,
                  "add each minimal failing id to this folder (replay: --suite corpus:DIR)");
  cmd->add_option("--shard", args->shard, "draw shard I of N: draws i % N == I (disjoint)")
      ->type_name("I/N");
  cmd->add_option("--max-cases", args->max_cases, "cases run at most (0: until the budget)");
  cmd->add_option("--max-findings", args->max_findings,
                  "stop after this many findings (0: until the budget)");
  cmd->add_option("--shrink-budget", args->shrink_budget, "wall time per shrink")
      ->capture_default_str();
  cmd->add_flag("--no-shrink", args->no_shrink, "report what fails without shrinking it");
  cmd->add_flag("--no-probes", args->no_probes, "skip the oracle-free leakage probes");
  cmd->add_option("--progress", args->progress, "auto (a line on a terminal), bar, lines")
      ->capture_default_str();
  cmd->footer(R"(example:
  deltacheck hunt --backend wrong:ignore-cu-seqlens --budget 30s --seed 1 --ops gdr --corpus found/
  deltacheck run --suite corpus:found/ --backend wrong:ignore-cu-seqlens
exit codes: 0 nothing failed, 1 a finding, 2 usage error)");
  return {cmd, [args] { return run_hunt(*args); }};
}

}  // namespace deltacheck::cli
