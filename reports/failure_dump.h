// Failure dumps: one HDF5 file per failing (case, backend) with everything needed to study the
// failure away from the harness. The file is a golden fixture of the one case (golden/format.h:
// inputs, output specs, FP64 expected outputs; readable by `deltacheck golden` and from Python),
// and its case group additionally holds
//   actual/<output>    what the backend wrote, as float64 (exact for every dtype)
//   baseline/<output>  the same-precision baseline the tolerance is measured against, float64
// and the string attributes backend, verdict, message and rerun (the command that reruns it).
#pragma once

#include <optional>
#include <string>

#include "core/status.h"
#include "golden/format.h"
#include "harness/result.h"
#include "harness/runner.h"

namespace deltacheck::reports {

// A file name that is stable for a (case, backend) and safe on every file system, e.g.
// "gdr-wrong_ignore-cu-seqlens-3fa2b9c0d1e2f300.h5".
std::string dump_file_name(const std::string& case_id, const std::string& backend);

// Writes the dump atomically (temporary file, then rename). Safe to call from several threads:
// the HDF5 library here is not thread-safe, so calls are serialized.
Status write_failure_dump(const std::string& path, const harness::PreparedCase& pc,
                          const cases::TensorMap& outputs, const harness::CaseResult& r,
                          const std::string& rerun);

// A dump read back (tests; C++ tools). Python: h5py, group = the one root group.
struct FailureDump {
  Status status;
  std::optional<golden::FixtureCase> fixture;  // inputs, output specs, expected
  ops::Values actual, baseline;
  std::string backend, verdict, message, rerun;
};
FailureDump read_failure_dump(const std::string& path);

}  // namespace deltacheck::reports
