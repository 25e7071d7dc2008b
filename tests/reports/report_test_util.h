// Helpers for the report tests: running commands, scratch directories, reading files, and
// validating JUnit XML with xmllint against tests/reports/junit.xsd.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "deltacheck_test_paths.h"

namespace deltacheck::reports::testing {

namespace fs = std::filesystem;

struct CommandResult {
  int code = -1;
  std::string out;  // stdout and stderr together
};

// Runs a shell command; the sharding variables of an outer test runner are not passed on, so a
// sharded ctest or gtest-parallel run does not shard the runs inside the tests, and neither is a
// CI job's GITHUB_STEP_SUMMARY, which the tests' runs would append to.
inline CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  const std::string full =
      "env -u GTEST_TOTAL_SHARDS -u GTEST_SHARD_INDEX -u GITHUB_STEP_SUMMARY " + cmd + " 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline std::string deltacheck() { return std::string(DELTACHECK_BINARY_DIR) + "/deltacheck"; }

inline bool have_program(const std::string& name) {
  return std::system(("command -v " + name + " >/dev/null 2>&1").c_str()) == 0;
}

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_file(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

// A fresh directory per test, removed afterwards.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name)
      : path_(fs::temp_directory_path() /
              ("deltacheck_test_reports_" + name + "_" + std::to_string(getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  std::string operator/(const std::string& sub) const { return (path_ / sub).string(); }

 private:
  fs::path path_;
};

inline std::string junit_xsd() {
  return std::string(DELTACHECK_SOURCE_DIR) + "/tests/reports/junit.xsd";
}

// xmllint's verdict on a JUnit file: code 0 and "validates" when it conforms to the schema.
inline CommandResult validate_junit(const std::string& path) {
  return run_command("xmllint --noout --schema '" + junit_xsd() + "' '" + path + "'");
}

}  // namespace deltacheck::reports::testing
