// The golden fixture format (HDF5, version kFormatVersion; described for users in
// golden/README.md): one group per case holding its inputs, its FP64 expected outputs and the
// attributes that say how they were made, with a SHA-256 of every dataset. The same format carries
// a case to an external program ({in}: a one-case file without expected values); exchange.h
// writes it and reads the program's outputs back ({out}).
//
// Every function returns errors as values: a message naming the dataset or attribute and the
// problem, never an HDF5 error stack on stderr. Nothing here runs an operation; fixtures.h joins
// the format to the harness (generation, the tolerance baseline, drift checks).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cases/case.h"
#include "cases/tensor.h"
#include "core/status.h"
#include "ops/operation.h"

namespace deltacheck::cases {
class SafeDir;  // cases/safe_file.h
}  // namespace deltacheck::cases

namespace deltacheck::golden {

constexpr const char* kFormatName = "deltacheck-golden";
constexpr int kFormatVersion = 1;

// One stored dataset as the reader found it (what `golden inspect` lists).
struct DatasetInfo {
  std::string role;  // "inputs" or "expected"
  std::string name;
  std::string dtype;  // the tensor's dtype name (expected: "fp64")
  std::vector<int64_t> shape;
  std::string sha256;
};

// Everything a fixture file holds for one case. The tolerance baseline is not stored: it belongs
// to the tolerance policy, not to the ground truth, and fixtures.h recomputes it from the inputs.
struct FixtureCase {
  cases::Case c;
  cases::TensorMap inputs;
  ops::Values expected;  // empty in an external program's {in} file
  std::vector<ops::OutputSpec> outputs;
  // As stored (filled by the reader; the writer records this build's versions).
  int64_t generator_version = 0;
  std::string tolerance_policy;
  std::vector<DatasetInfo> datasets;
};

// File-level attributes.
struct FileInfo {
  int64_t format_version = kFormatVersion;
  int64_t generator_version = 0;
  std::string tolerance_policy;
  std::string producer;  // e.g. "deltacheck 0.1.0"
};

// The group name of a case id: '%' -> "%25", '/' -> "%2F" (HDF5 names cannot hold '/').
std::string escape_case_id(const std::string& id);
std::string unescape_case_id(const std::string& name);

// Writes a fixture file atomically: cases go to a temporary file in the destination's folder,
// which commit() renames onto the destination. A writer destroyed before commit() removes the
// temporary file, so the destination is never partial and is untouched on failure.
class FixtureWriter {
 public:
  FixtureWriter();
  ~FixtureWriter();
  FixtureWriter(const FixtureWriter&) = delete;
  FixtureWriter& operator=(const FixtureWriter&) = delete;

  Status open(const std::string& path, const FileInfo& info);
  // The same for file `name` of a folder held open (one a candidate can write: {in} in a case
  // folder): the temporary file is made, written, checked and renamed relative to that folder's
  // descriptor, never through a link put in place of a name (cases/safe_file.h).
  Status open(const cases::SafeDir& dir, const std::string& name, const FileInfo& info);
  // Writes one case; its group holds `expected` only when the case has any.
  Status add(const FixtureCase& fc);
  // durable: the data is synced to disk before the file takes its name; false for a file nobody
  // keeps ({in}, removed after its call: a sync costs a disk flush per call).
  Status commit(bool durable = true);
  // The temporary file being written (empty before open() and after commit()).
  const std::string& temp_path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads a fixture file. open() checks the file-level attributes (format name and version); each
// read() checks one case completely: group name against its case id, that the id parses and is
// canonical, the seed, every dataset's dtype, shape and SHA-256, that every output has its
// expected dataset, and that the inputs fit the case (cases/input_checks.h: names, dtypes, shapes,
// cu_seqlens, state slots, finite values).
class FixtureReader {
 public:
  FixtureReader();
  ~FixtureReader();
  FixtureReader(const FixtureReader&) = delete;
  FixtureReader& operator=(const FixtureReader&) = delete;

  Status open(const std::string& path);
  // Refuses, before allocating, a case whose datasets (plus its inputs regenerated to check the
  // stored ones) would take more than `bytes` of memory (--max-memory). 0: no limit.
  void set_max_bytes(int64_t bytes);
  // false: reads {in} as an external program does (backends/external/serve_worker.cc):
  // the inputs as stored, not checked against those the case id generates (a probe's inputs and
  // those of a later call of a multi-call case differ from them).
  void set_check_inputs(bool check);
  const FileInfo& info() const;
  // Group names of the cases, in the order they were written (ids: unescape_case_id).
  const std::vector<std::string>& case_groups() const;
  StatusOr<FixtureCase> read(size_t index) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deltacheck::golden
