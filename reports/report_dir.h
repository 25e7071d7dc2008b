// A report directory replaced as a whole (docs/reliability.md, "Report directories"). A run's
// report files and failure dumps are written into a private staging folder inside the directory
// (".deltacheck-staging-XXXXXX", mode 0700, locked by the writing process, a name no candidate is
// told); only when everything is written do they replace the previous set by rename: the four
// report files, then failures/ swapped with the staging folder's. A full disk, an error or a
// crash therefore leaves the previous report set as it was, never a mix of two runs.
//
// failures/ is deltacheck's: it must be absent or a real folder holding only failure dumps
// (dump_file_name()). A symbolic link or a folder with anything else in it is refused before
// anything runs: deltacheck never follows a link there and never deletes a file it did not
// write. Staging folders of runs that died are removed by the next run in the same directory
// once their lock is free (the owner is dead, not merely another PID).
#pragma once

#include <string>

#include "core/status.h"
#include "reports/report.h"

namespace deltacheck::reports {

class ReportDirWriter {
 public:
  ReportDirWriter() = default;
  ~ReportDirWriter();  // removes an uncommitted staging folder
  ReportDirWriter(const ReportDirWriter&) = delete;
  ReportDirWriter& operator=(const ReportDirWriter&) = delete;

  // Creates `dir` when missing, checks its failures/ (see above), removes staging folders of
  // dead runs and creates this one's.
  Status open(const std::string& dir);
  // Where the failure dump `name` (a dump_file_name()) is written: the staging folder's
  // failures/, created on first use.
  Status dump_path(const std::string& name, std::string* path);
  // Writes the report files (sanitized(r)) into the staging folder, then swaps the report set in.
  // On an error nothing in the directory has changed.
  WrittenReport commit(const Report& r);

  const std::string& dir() const { return dir_; }

 private:
  std::string dir_, staging_;
  int lock_fd_ = -1;
};

// Whether `name` is a failure dump's file name as dump_file_name() makes them.
bool is_dump_file_name(const std::string& name);

// The file a report entry names as its failure dump (`dump`, e.g. "failures/<name>.h5"), for
// `report merge`: it must be "failures/" and a dump_file_name(), and resolve (links followed) to a
// regular file inside `report_folder`; anything else is InvalidArgument naming the problem. A
// dump that does not exist is no error: `path` is left empty.
Status find_dump(const std::string& report_folder, const std::string& dump, std::string* path);

// OK when `dir`/failures is absent or a real folder of failure dumps only; otherwise the reason,
// naming the link or the first file deltacheck did not write.
Status check_failures_folder(const std::string& dir);

}  // namespace deltacheck::reports
