// Golden fixtures: cases stored in an HDF5 file with their inputs and FP64 expected outputs
// (format: golden/README.md), what `deltacheck golden generate | verify | check | inspect` do.
// Write one with FixtureWriter and make_fixture_case; read one with FixtureReader (every case
// checked completely on read); judge a backend on a stored case with prepare_stored and
// run_case(PreparedCase, ...); regenerate a stored case from its id with check_drift.
#pragma once

#include <functional>
#include <string>

#include "cases/generator_version.h"
#include "core/status.h"
#include "deltacheck/case.h"
#include "deltacheck/runner.h"
#include "golden/fixtures.h"
#include "golden/format.h"

namespace deltacheck {

// One stored case: c, inputs, expected (FP64 per output), outputs (names, dtypes, shapes), and as
// read: generator_version, tolerance_policy, datasets.
using FixtureCase = golden::FixtureCase;
// A stored dataset as read: role ("inputs" | "expected"), name, dtype, shape, sha256.
using FixtureDataset = golden::DatasetInfo;
// A fixture file's attributes: format_version, generator_version, tolerance_policy, producer.
using FixtureFileInfo = golden::FileInfo;
// Writes a fixture file atomically: open(path, info), add(case) per case, commit(); on any early
// exit the destination is untouched.
using FixtureWriter = golden::FixtureWriter;
// Reads one: set_max_bytes(bytes) (refuses a case that would need more), open(path), info(),
// case_groups() (escaped ids, in file order), read(i) (verifies the case completely).
using FixtureReader = golden::FixtureReader;
// The file format's name, "deltacheck-golden".
constexpr const char* kFixtureFormatName = golden::kFormatName;
// The input generators' version this build writes into fixtures (a fixture of another version
// regenerates different inputs).
constexpr int kGeneratorVersion = cases::kGeneratorVersion;
// The tolerance policy's id this build writes into fixtures, e.g. "tol-v3".
std::string tolerance_policy_id();

// A case's fixture: inputs generated from its id, the FP64 expectation, this build's versions.
// Throws when the case cannot be generated.
using golden::make_fixture_case;
// Whether this build can judge a stored case (its operation declares exactly the stored outputs,
// each with expected values).
using golden::check_stored;
// A stored case ready for run_case(PreparedCase, ...): the stored inputs and expectation, the
// tolerance baseline recomputed from the stored inputs.
using golden::prepare_stored;
// A stored case regenerated from its id: inputs must be bit-identical, expected outputs within
// kDriftTolerance relative (exactly compared outputs identical). DriftReport: ok, problem,
// max_rel_deviation.
using DriftReport = golden::DriftReport;
constexpr double kDriftTolerance = golden::kDriftTolerance;
using golden::check_drift;
// A case group's name back to the stored id ("%2F" -> "/", "%25" -> "%").
using golden::unescape_case_id;

// Runs `fn` in a forked child process with a deadline: a crash, an early exit or a hang past
// timeout_s comes back as an error Status naming what happened (reading an untrusted fixture:
// the HDF5 library itself can hang or crash on a crafted file). What `fn` throws is rethrown here
// as std::runtime_error with the same message.
Status run_in_child(const std::function<Status()>& fn, double timeout_s);

}  // namespace deltacheck
