// Hostile files and machines on the fixture paths (docs/reliability.md): a disk that fills up
// while a fixture is written, {out} files and fixtures whose data lives outside the file, chunks
// and shapes that would exceed --max-memory before a byte is checked, and the leftovers and
// messages of issue 19.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "deltacheck_test_paths.h"
#include "golden_test_util.h"

namespace deltacheck::golden {
namespace {

using testing::quote;
using testing::run_cli;
using testing::TempDir;

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// --- 4: a full disk -------------------------------------------------------------------------

TEST(FullDisk, GoldenGenerateFailsWithOneCleanLineAndLeavesNothing) {
  TempDir dir;
  // Files over 100 kB cannot be written (SIGXFSZ ignored: writes fail with EFBIG, as on a full
  // disk). HDF5 cannot close such a file, and its exit handler used to crash on it (SIGSEGV).
  const std::string cmd = "cd " + dir.path() + " && (trap '' XFSZ; ulimit -f 200; " +
                          DELTACHECK_BINARY_DIR + "/deltacheck golden generate --case " +
                          quote("gdr(layout=packed[2000,3000],H=2,HV=4,K=64,V=64,seed=1)") +
                          " -o big.h5 >out.txt 2>err.txt)";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);  // not 139 (SIGSEGV)
  std::ostringstream err;
  err << std::ifstream(dir / "err.txt").rdbuf();
  EXPECT_EQ(lines(err.str()), 1) << err.str();
  EXPECT_NE(err.str().find("deltacheck: error: big.h5: cannot write dataset"), std::string::npos)
      << err.str();
  EXPECT_NE(err.str().find("File too large"), std::string::npos) << err.str();
  EXPECT_EQ(err.str().find("0x"), std::string::npos) << "an address in the message: " << err.str();
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name == "out.txt" || name == "err.txt") << "left behind: " << name;
  }
}

// --- 9: user regexes in linear time (RE2) --------------------------------------------------

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The tool's exit code, killed after 30 s (124).
int run_with_deadline(const std::string& args) {
  const int status = std::system(("timeout -s KILL 30 " + std::string(DELTACHECK_BINARY_DIR) +
                                  "/deltacheck " + args + " >/dev/null 2>&1")
                                     .c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(UserRegex, PatternsThatBacktrackOrRecurseFinishInLinearTime) {
  TempDir dir;
  // std::regex overflowed its stack here (SIGSEGV) on a 60 kB id.
  std::string id = "gdr(layout=packed[";
  for (int i = 0; i < 15000; ++i) id += i ? ",1,2" : "1,2";
  id += "],H=1,HV=1,K=1,V=1)";
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(run_with_deadline("list cases --case " + quote(id) + " --filter '^(.|,)*$'"), 0);
  EXPECT_LT(seconds_since(t0), 10.0);
  // ... and backtracked without bound here (minutes for the gate suite's ids).
  t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(run_with_deadline("list cases --suite gate --filter '(.*)*(.*)*(.*)*Z'"), 0);
  EXPECT_LT(seconds_since(t0), 10.0);
  // What RE2 cannot match in linear time is refused with one line.
  const auto r = run_cli("run --filter '(gdr)\\1'", dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--filter '(gdr)\\1' is not a valid regex: invalid escape sequence"),
            std::string::npos)
      << r.err;
}

// --- 7: time linear in the number of sequences ---------------------------------------------

TEST(ManySequences, AHundredThousandSequencesWithProbesRunInSeconds) {
  // Quadratic before (layouts rebuilt per sequence): about 160 s here.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(
      run_with_deadline("run -q --case 'gdr(layout=packed[1*100000],H=1,HV=1,K=4,V=4,seed=1)'"), 0);
  EXPECT_LT(seconds_since(t0), 30.0);
}

}  // namespace
}  // namespace deltacheck::golden
