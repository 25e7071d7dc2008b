// deltacheck's public C++ API: all of it except the GoogleTest helper (deltacheck/gtest.h) and
// the optional components' headers (deltacheck/torch.h, deltacheck/cuda.h). Link it with
// deltacheck::deltacheck:
//   find_package(deltacheck 0.1 REQUIRED)
//   target_link_libraries(my_test PRIVATE deltacheck::deltacheck)
// Everything a user needs is in namespace deltacheck and documented in these headers; the
// namespaces deltacheck::cases, ::harness, ::reports and the headers under deltacheck/internal/
// are the implementation and may change without notice.
//
//   case.h     cases, suites and selections (Case, Selection, select)
//   backend.h  the backend interface and FunctionBackend; deltacheck's own backends
//   gdr.h      the gated delta rule as raw buffers (GdrProblem) and gdr_backend(name, kernel)
//   runner.h   run_case / run: a case or a selection against a backend
//   result.h   verdicts and metrics (CaseResult)
//   report.h   console lines, the gate, report.json / junit.xml / summary.md / report.html,
//              report directories with failure dumps, merging
//   golden.h   golden fixtures: write, read, judge and drift-check stored cases
//   shrink.h   the smallest failing case (shrink), hunting for one (hunt), corpora
//   pins.h     pinned verdicts (run --expect) and report diffs
//   bench.h    regressions between two deltacheck_bench runs
//   version.h  DELTACHECK_VERSION_STRING and version()
#pragma once

#include "deltacheck/backend.h"
#include "deltacheck/bench.h"
#include "deltacheck/case.h"
#include "deltacheck/gdr.h"
#include "deltacheck/golden.h"
#include "deltacheck/pins.h"
#include "deltacheck/report.h"
#include "deltacheck/result.h"
#include "deltacheck/runner.h"
#include "deltacheck/shrink.h"
#include "deltacheck/version.h"
