// deltacheck golden: golden fixtures in HDF5 (format: golden/README.md).
//   generate  cases -> a fixture file, written atomically
//   verify    backends run on the stored inputs, judged against the stored expectations
//   check     every stored case regenerated from its id: inputs bit-identical, expected within
//   1e-12 inspect   cases, datasets, shapes, dtypes and checksums
// A file that is not a valid fixture (truncated, corrupted, checksum mismatch, unknown version,
// unparsable case id, missing dataset) is rejected before anything runs: one line, exit code 2.
#include "deltacheck/golden.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>

#include "tools/deltacheck/commands.h"

namespace deltacheck::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string size_string(double bytes) {
  if (bytes >= 1e6) return fmt::format("{:.1f} MB", bytes / 1e6);
  return fmt::format("{:.1f} kB", bytes / 1e3);
}

double file_size(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<double>(st.st_size) : 0.0;
}

// Errors in a fixture are input errors: "<file>: <problem>", exit code 2.
[[noreturn]] void bad_file(const std::string& file, const std::string& problem) {
  throw UsageError(file + ": " + problem);
}

struct Selected {
  std::vector<size_t> index;  // positions in the file
  std::vector<Case> cases;
};

// Opens a fixture and reads every case once, so that a bad file is rejected before any output;
// returns the cases whose id matches `filter`.
Selected validate_in_process(FixtureReader& reader, const std::string& file,
                             const std::string& filter, bool need_expected, int64_t max_memory) {
  reader.set_max_bytes(max_memory);
  if (Status st = reader.open(file); !st.ok()) bad_file(file, st.message());
  const IdFilter re = make_id_filter(filter);
  Selected selected;
  for (size_t i = 0; i < reader.case_groups().size(); ++i) {
    StatusOr<FixtureCase> fc = reader.read(i);
    if (!fc.ok()) bad_file(file, fc.status().message());
    if (need_expected) {
      if (Status st = check_stored(fc.value()); !st.ok()) bad_file(file, st.message());
    }
    if (filter.empty() || re.matches(fc.value().c.id())) {
      // Running it needs more than reading it (outputs, baseline, probes): refused up front.
      if (need_expected) {
        if (std::string why = memory_refusal(fc.value().c, max_memory); !why.empty())
          bad_file(file, "case '" + fc.value().c.id() + "': " + why);
      }
      selected.index.push_back(i);
      selected.cases.push_back(fc.value().c);
    }
  }
  if (reader.case_groups().empty()) bad_file(file, "no cases");
  return selected;
}

// The same, after a first pass in a child process with a deadline: the HDF5 library itself can
// hang or crash on a crafted file (fuzzing found a 12 kB file on which it loops forever), and
// that must be an input error, not a hung or crashed gate.
Selected open_and_validate(FixtureReader& reader, const std::string& file,
                           const std::string& filter, bool need_expected, double timeout_s,
                           int64_t max_memory = default_max_memory_bytes()) {
  if (!(timeout_s > 0)) throw UsageError("--timeout must be a positive number of seconds");
  Status st;
  try {
    st = run_in_child(
        [&] {
          FixtureReader first;
          validate_in_process(first, file, filter, need_expected, max_memory);
          return Status::Ok();
        },
        timeout_s);
  } catch (const std::runtime_error& e) {  // the child's UsageError: the file's problem
    throw UsageError(e.what());
  }
  if (!st.ok())
    bad_file(file, "reading it " + st.message() +
                       " (a file the HDF5 library cannot read safely: crafted or corrupted)");
  return validate_in_process(reader, file, filter, need_expected, max_memory);
}

FixtureCase read_validated(const FixtureReader& reader, const std::string& file, size_t i) {
  StatusOr<FixtureCase> fc = reader.read(i);
  if (!fc.ok()) bad_file(file, fc.status().message());  // changed since it was validated
  return fc.take();
}

// --- generate -------------------------------------------------------------------------------

struct GenerateArgs {
  Selection sel;
  std::string cases_from;
  std::string output;
  std::string max_memory;
};

// Case ids from a file, one per line; '#' starts a comment.
std::vector<std::string> read_case_list(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw UsageError(path + ": cannot read the case list");
  std::vector<std::string> ids;
  for (std::string line; std::getline(f, line);) {
    line = line.substr(0, line.find('#'));
    const size_t b = line.find_first_not_of(" \t\r"), e = line.find_last_not_of(" \t\r");
    if (b != std::string::npos) ids.push_back(line.substr(b, e - b + 1));
  }
  if (ids.empty()) throw UsageError(path + ": no case ids in the case list");
  return ids;
}

int generate(GenerateArgs a) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!a.cases_from.empty())
    for (std::string& id : read_case_list(a.cases_from)) a.sel.case_ids.push_back(std::move(id));
  const std::vector<Case> cs = select_cases(a.sel);
  if (cs.empty()) throw UsageError("no case selected (check --suite, --case and --filter)");
  const int64_t max_memory = max_memory_bytes(a.max_memory);
  for (const Case& c : cs) refuse_if_too_big(c, max_memory);
  FixtureFileInfo info;
  info.generator_version = kGeneratorVersion;
  info.tolerance_policy = tolerance_policy_id();
  info.producer = std::string("deltacheck ") + DELTACHECK_VERSION;
  // The writer removes its temporary file on every early exit: the destination is either the
  // complete new file or untouched.
  FixtureWriter writer;
  if (Status st = writer.open(a.output, info); !st.ok()) bad_file(a.output, st.message());
  for (const Case& c : cs) {
    FixtureCase fc = [&] {
      try {
        return make_fixture_case(c);
      } catch (const std::exception& e) {
        throw UsageError("case '" + c.id() + "': " + e.what());
      }
    }();
    if (Status st = writer.add(fc); !st.ok()) bad_file(a.output, st.message());
  }
  if (Status st = writer.commit(); !st.ok()) bad_file(a.output, st.message());
  std::printf("%s: %zu cases, %s, written in %.1f s\n", a.output.c_str(), cs.size(),
              size_string(file_size(a.output)).c_str(), seconds_since(t0));
  return kExitPass;
}

// --- verify ---------------------------------------------------------------------------------

struct VerifyArgs {
  std::string file;
  std::string filter;
  BackendSelection backends;
  OutputOptions output;
  bool no_probes = false;
};

int verify(const VerifyArgs& a) {
  FixtureReader reader;
  const Selected selected =
      open_and_validate(reader, a.file, a.filter, true, a.backends.options.timeout_s,
                        max_memory_bytes(a.backends.max_memory));
  if (selected.index.empty()) throw UsageError("no case of " + a.file + " matches --filter");
  const auto owned = make_backends(a.backends);
  std::vector<Backend*> backends;
  for (const auto& b : owned) backends.push_back(b.get());
  ResultSink sink(a.output, fmt::format("{}: {} cases x {} backends", a.file, selected.index.size(),
                                        backends.size()));
  // The report records the fixture's cases as an explicit selection (reruns: deltacheck run
  // --case, which `golden check` guarantees to regenerate the same case).
  Selection as_selection;
  SelectedCases sel;
  sel.cases = selected.cases;
  for (size_t j = 0; j < sel.cases.size(); ++j) {
    as_selection.case_ids.push_back(sel.cases[j].id());
    sel.indices.push_back(static_cast<int64_t>(j));
  }
  sel.total = static_cast<int64_t>(sel.cases.size());
  sink.describe_run(as_selection, sel, a.backends);
  RunOptions options;
  options.probes = !a.no_probes;
  options.on_failure = sink.failure_hook();
  options.require_probes = a.backends.options.deterministic || a.backends.options.batch_invariant;
  std::vector<CaseResult> results;
  for (size_t i : selected.index) {
    StatusOr<PreparedCase> pc = prepare_stored(read_validated(reader, a.file, i));
    if (!pc.ok()) bad_file(a.file, pc.status().message());
    // Reported once every backend has run the case: its failure dumps are written then.
    const size_t first = results.size();
    for (Backend* b : backends) results.push_back(deltacheck::run_case(pc.value(), *b, options));
    for (size_t k = first; k < results.size(); ++k) sink.on_result(results[k]);
  }
  return sink.finish(results);
}

// --- check ----------------------------------------------------------------------------------

struct CheckArgs {
  std::string file;
  std::string filter;
  bool quiet = false;
  std::string max_memory;
  double timeout_s = 120.0;
};

int check(const CheckArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  FixtureReader reader;
  const Selected selected = open_and_validate(reader, a.file, a.filter, true, a.timeout_s,
                                              max_memory_bytes(a.max_memory));
  if (selected.index.empty()) throw UsageError("no case of " + a.file + " matches --filter");
  int drifted = 0;
  double worst = 0.0;
  for (size_t i : selected.index) {
    const FixtureCase fc = read_validated(reader, a.file, i);
    DriftReport r;
    try {
      r = check_drift(fc);
    } catch (const std::exception& e) {
      r.ok = false;
      r.problem = std::string("cannot regenerate: ") + e.what();
    }
    worst = std::max(worst, r.max_rel_deviation);
    if (!r.ok) ++drifted;
    if (r.ok && a.quiet) continue;
    std::printf("%-6s %s\n", r.ok ? "OK" : "DRIFT", fc.c.id().c_str());
    if (!r.ok) std::printf("       %s\n", r.problem.c_str());
  }
  std::printf(
      "\ndeltacheck golden check: %zu cases of %s regenerated: %d drifted; inputs %s, largest "
      "expected deviation %.1e (limit %.0e) in %.1f s — %s\n",
      selected.index.size(), a.file.c_str(), drifted,
      drifted ? "or expectations differ" : "bit-identical", worst, kDriftTolerance,
      seconds_since(t0), drifted ? "FAILED" : "OK");
  return drifted ? kExitFail : kExitPass;
}

// --- inspect --------------------------------------------------------------------------------

struct InspectArgs {
  std::string file;
  std::string case_id;
  double timeout_s = 120.0;
};

int inspect(const InspectArgs& a) {
  FixtureReader reader;
  open_and_validate(reader, a.file, "", false, a.timeout_s);
  const FixtureFileInfo& info = reader.info();
  std::string want;
  if (!a.case_id.empty()) {
    try {
      want = parse_case(a.case_id).id();
    } catch (const std::exception& e) {
      throw UsageError(e.what());
    }
  }
  if (want.empty())
    std::printf("%s: %s format %lld, generator version %lld, tolerance %s, %zu cases, %s%s\n",
                a.file.c_str(), kFixtureFormatName, static_cast<long long>(info.format_version),
                static_cast<long long>(info.generator_version), info.tolerance_policy.c_str(),
                reader.case_groups().size(), size_string(file_size(a.file)).c_str(),
                info.producer.empty() ? "" : (", made by " + info.producer).c_str());
  bool found = false;
  for (size_t i = 0; i < reader.case_groups().size(); ++i) {
    const FixtureCase fc = read_validated(reader, a.file, i);
    const std::string stored_id = unescape_case_id(reader.case_groups()[i]);
    if (!want.empty() && fc.c.id() != want && stored_id != a.case_id) continue;
    found = true;
    std::printf("%s\n", stored_id.c_str());
    if (!want.empty())
      std::printf("  group %s, seed %llu, generator version %lld, tolerance %s\n",
                  reader.case_groups()[i].c_str(), static_cast<unsigned long long>(fc.c.seed()),
                  static_cast<long long>(fc.generator_version), fc.tolerance_policy.c_str());
    for (const FixtureDataset& d : fc.datasets) {
      std::string out_dtype;
      for (const auto& o : fc.outputs)
        if (d.role == "expected" && o.name == d.name)
          out_dtype = std::string(" (output ") + dtype_name(o.dtype) + ")";
      std::printf("  %-8s/%-17s %-5s %-18s sha256 %s%s\n", d.role.c_str(), d.name.c_str(),
                  d.dtype.c_str(), shape_string(d.shape).c_str(),
                  want.empty() ? d.sha256.substr(0, 16).c_str() : d.sha256.c_str(),
                  out_dtype.c_str());
    }
  }
  if (!found) throw UsageError(a.file + ": case '" + a.case_id + "' is not in the file");
  return kExitPass;
}

}  // namespace

constexpr const char* kReadTimeoutHelp =
    "seconds the first reading of the file (in a child process) may take: a file that makes "
    "the HDF5 library hang or crash is an input error (exit 2)";

Command add_golden_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("golden",
                                     "golden fixtures in HDF5: generate, verify, check, "
                                     "inspect (format: golden/README.md)");
  cmd->require_subcommand(1);
  cmd->footer(R"(examples:
  deltacheck golden generate --suite gate -o gate.h5
  deltacheck golden generate --cases-from golden/fixtures.cases -o golden/fixtures.h5
  deltacheck golden verify golden/fixtures.h5 --backend cpu
  deltacheck golden check golden/fixtures.h5
  deltacheck golden inspect golden/fixtures.h5 'gdr(layout=packed[63,0,65],dtype=bf16,seed=5)'
bad fixtures (truncated, corrupted, checksum mismatch, unknown format version) exit with code 2)");

  auto gen = std::make_shared<GenerateArgs>();
  CLI::App* g = cmd->add_subcommand(
      "generate",
      "write the selected cases' inputs and FP64 expected outputs to a fixture file "
      "(atomically: a temporary file renamed into place)");
  add_selection_options(g, gen->sel);
  g->add_option("--cases-from", gen->cases_from,
                "case ids from a file, one per line, '#' comments (like --case; e.g. "
                "golden/fixtures.cases)");
  g->add_option("-o,--output", gen->output, "fixture file to write, e.g. golden/gate.h5")
      ->required();
  add_max_memory_option(g, gen->max_memory);

  auto ver = std::make_shared<VerifyArgs>();
  CLI::App* v = cmd->add_subcommand(
      "verify",
      "run backends on a fixture's stored inputs and judge them against its stored "
      "expectations (same verdicts and report as run)");
  v->add_option("file", ver->file, "fixture file")->required();
  v->add_option("--filter,-f", ver->filter, "only cases whose id matches this regex");
  add_backend_options(v, ver->backends);
  add_output_options(v, ver->output);
  v->add_flag("--no-probes", ver->no_probes, "skip the oracle-free leakage probes");

  auto chk = std::make_shared<CheckArgs>();
  CLI::App* c = cmd->add_subcommand(
      "check",
      "regenerate every stored case from its id and seed: inputs must be bit-identical, "
      "expected outputs within 1e-12 relative (catches generator or reference drift)");
  c->add_option("file", chk->file, "fixture file")->required();
  c->add_option("--filter,-f", chk->filter, "only cases whose id matches this regex");
  c->add_flag("--quiet,-q", chk->quiet, "print only drifted cases");
  add_max_memory_option(c, chk->max_memory);
  c->add_option("--timeout", chk->timeout_s, kReadTimeoutHelp)->capture_default_str();

  auto ins = std::make_shared<InspectArgs>();
  CLI::App* in = cmd->add_subcommand(
      "inspect",
      "list a fixture's cases with their datasets' dtypes, shapes and SHA-256 (all "
      "verified); with CASE, that case in full");
  in->add_option("file", ins->file, "fixture file")->required();
  in->add_option("case", ins->case_id, "a case id in the file");
  in->add_option("--timeout", ins->timeout_s, kReadTimeoutHelp)->capture_default_str();

  return {cmd, [=] {
            if (g->parsed()) return generate(*gen);
            if (v->parsed()) return verify(*ver);
            if (c->parsed()) return check(*chk);
            return inspect(*ins);
          }};
}

}  // namespace deltacheck::cli
