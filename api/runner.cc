// Running cases on backends (include/deltacheck/runner.h): the harness's streaming runner.
#include "deltacheck/runner.h"

#include "harness/runner.h"

namespace deltacheck {
namespace {

harness::RunOptions harness_options(const RunOptions& o) {
  harness::RunOptions h;
  h.jobs = o.jobs < 1 ? 1 : o.jobs;
  h.probes = o.probes;
  h.max_memory_bytes = o.max_memory_bytes;
  h.on_failure = o.on_failure;
  h.cache = o.cache ? o.cache : harness::open_expectation_cache(o.cache_dir);
  h.prepare_ahead = o.prepare_ahead;
  h.require_probes = o.require_probes;
  return h;
}

}  // namespace

CaseResult run_case(const Case& c, Backend& backend, const RunOptions& options) {
  // run_all checks supports() before preparing, and turns a case that cannot be prepared into
  // verdict error: the same result as `deltacheck run` gives.
  std::vector<CaseResult> r = harness::run_all({c}, {&backend}, harness_options(options), nullptr);
  return std::move(r.front());
}

CaseResult run_case(const PreparedCase& prepared, Backend& backend, const RunOptions& options) {
  return harness::run_case(prepared, backend, options.probes, options.on_failure, false,
                           options.require_probes);
}

std::vector<CaseResult> run(const std::vector<Case>& cases, const std::vector<Backend*>& backends,
                            const RunOptions& options, const ResultCallback& on_result) {
  return harness::run_all(cases, backends, harness_options(options), on_result);
}

std::vector<CaseResult> run(const Selection& selection, Backend& backend, const RunOptions& options,
                            const ResultCallback& on_result) {
  return run(select(selection), {&backend}, options, on_result);
}

}  // namespace deltacheck
