// A candidate that replaces its stderr.txt during its call (issue #35, E1-E4): with a link to a
// file of the user's (a canary here), a FIFO nobody writes, or a link to /dev/zero. deltacheck
// holds the stderr file it made and reads the candidate's last line through its own descriptor,
// so whatever stands at the name afterwards is never truncated (E1), read into a message or
// report (E2), blocked on (E3) or read without end (E4). Both --cmd (one program per call: its
// TMPDIR is the case's folder, stderr.txt in it) and --serve (one worker: TMPDIR is tmp/ of its
// folder, stderr.txt beside it).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "backends/registry.h"
#include "golden_test_util.h"
#include "tests/deadline.h"

namespace deltacheck::golden {
namespace {

using harness::Verdict;
using testing::run_cli;
using testing::TempDir;

constexpr const char* kCanary = "CANARY first line\nCANARY-SECRET the user's last line\n";
const char* kSmallCase = " --no-probes -q --case 'gdr(layout=packed[5,7],H=1,HV=2,K=8,V=8,seed=1)'";

// Quoted for /bin/sh, quotes inside included.
std::string sh_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

std::string slurp(const std::string& path) {
  std::ostringstream s;
  s << std::ifstream(path, std::ios::binary).rdbuf();
  return s.str();
}

// What the candidate puts in stderr.txt's place (after writing a line of its own to stderr).
struct Replacement {
  const char* what;
  std::string shell;  // run with $f set to the stderr.txt path
};

class HostileStderr : public ::testing::Test {
 protected:
  void SetUp() override {
    pc_ = std::make_unique<harness::PreparedCase>(harness::prepare(
        cases::Case::parse("gdr(layout=packed[6,0,9],H=1,HV=2,K=8,V=8,dtype=bf16,seed=2)")));
    ASSERT_TRUE(std::filesystem::create_directory(dir_ / "tmp"));
    canary_ = dir_ / "canary.txt";
    std::ofstream(canary_) << kCanary;
    setenv("TMPDIR", (dir_ / "tmp").c_str(), 1);
  }
  void TearDown() override {
    backend_.reset();
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_ / "tmp"), {}), 0)
        << "temporary folder left behind";
    unsetenv("TMPDIR");
    EXPECT_EQ(slurp(canary_), kCanary) << "the user's file was changed";
  }

  Replacement link_to_canary() const {
    return {"a link to a file outside", "ln -s '" + canary_ + "' \"$f\""};
  }
  static Replacement fifo() { return {"a FIFO", "mkfifo \"$f\""}; }
  static Replacement dev_zero() { return {"a link to /dev/zero", "ln -s /dev/zero \"$f\""}; }

  // --cmd: writes a line to stderr, replaces stderr.txt, exits 3.
  static std::string program(const Replacement& r) {
    return "echo 'its own words' >&2; f=\"$TMPDIR/stderr.txt\"; rm -f \"$f\"; " + r.shell +
           "; exit 3; : {in} {out}";
  }
  // --serve: a worker whose first call writes a line to stderr, replaces stderr.txt and answers
  // an error; every later call answers an error; with `exit_on_first`, it exits 3 instead.
  std::string worker(const Replacement& r, bool exit_on_first) {
    const std::string script = dir_ / ("worker" + std::to_string(++scripts_) + ".sh");
    std::ofstream(script) << "echo 'deltacheck-serve 1'\nn=0\n"
                          << "while read -r line; do\n  n=$((n + 1))\n"
                          << "  if [ $n -eq 1 ]; then\n    echo 'its own words' >&2\n"
                          << "    f=\"$TMPDIR/../stderr.txt\"; rm -f \"$f\"; " << r.shell << "\n"
                          << (exit_on_first ? "    exit 3\n" : "")
                          << "  fi\n  echo \"error call $n\"\ndone\n";
    return "exec sh '" + script + "'";
  }
  harness::CaseResult run_cmd(const std::string& cmd) {
    harness::BackendOptions o;
    o.cmd = cmd;
    backend_ = backends::make_backend("external", o);
    return harness::run_case(*pc_, *backend_);
  }
  harness::Backend& serve(const std::string& program) {
    harness::BackendOptions o;
    o.serve = program;
    backend_ = backends::make_backend("external", o);
    return *backend_;
  }
  harness::CaseResult call() { return harness::run_case(*pc_, *backend_); }

  TempDir dir_;
  std::string canary_;
  std::unique_ptr<harness::PreparedCase> pc_;
  std::unique_ptr<harness::Backend> backend_;
  int scripts_ = 0;
};

// E1: a worker's stderr is emptied before each call: the file deltacheck made, never what a link
// in its place points at.
TEST_F(HostileStderr, AServeWorkersLinkedStderrIsNotTruncated) {
  serve(worker(link_to_canary(), /*exit_on_first=*/false));
  for (int i = 1; i <= 3; ++i) {
    const harness::CaseResult r = call();
    EXPECT_EQ(r.verdict, Verdict::kError) << r.message;
    EXPECT_NE(r.message.find("external worker: call " + std::to_string(i)), std::string::npos)
        << r.message;
    EXPECT_EQ(slurp(canary_), kCanary) << "truncated before call " << i + 1;
  }
}

// E2: the message (and so report.json) carries the candidate's own last line, never the canary's.
TEST_F(HostileStderr, ALinkedStderrPutsNothingOfItsTargetIntoTheMessage) {
  harness::CaseResult r = run_cmd(program(link_to_canary()));
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.message.find("external program exited with code 3: its own words"), std::string::npos)
      << r.message;
  EXPECT_EQ(r.message.find("CANARY"), std::string::npos) << r.message;
  serve(worker(link_to_canary(), /*exit_on_first=*/true));
  r = call();
  EXPECT_NE(r.message.find("external worker exited with code 3: its own words"), std::string::npos)
      << r.message;
  EXPECT_EQ(r.message.find("CANARY"), std::string::npos) << r.message;
}

TEST_F(HostileStderr, ALinkedStderrPutsNothingOfItsTargetIntoReportJson) {
  for (const std::string how : {"--cmd", "--serve"}) {
    const std::string report = dir_ / ("report" + how);
    const std::string candidate =
        how == "--cmd" ? program(link_to_canary()) : worker(link_to_canary(), true);
    const auto r = run_cli("run --backend external " + how + " " + sh_quote(candidate) +
                               kSmallCase + " --report-dir " + sh_quote(report),
                           dir_);
    EXPECT_EQ(r.exit_code, 1) << how << ": " << r.out << r.err;
    const std::string json = slurp(report + "/report.json");
    EXPECT_NE(json.find("its own words"), std::string::npos) << how << ": " << json;
    for (const std::string& text : {r.out, r.err, json})
      EXPECT_EQ(text.find("CANARY"), std::string::npos) << how << ": " << text;
  }
}

// E3: a FIFO nobody writes in stderr.txt's place is never opened: the call ends with the
// candidate's own last line (a hang here was not helped by --timeout: the program had ended).
TEST_F(HostileStderr, AFifoInPlaceOfStderrDoesNotHang) {
  harness::CaseResult r = deltacheck::testing::within_deadline(
      "--cmd whose stderr.txt became a FIFO", [&] { return run_cmd(program(fifo())); });
  EXPECT_NE(r.message.find("external program exited with code 3: its own words"), std::string::npos)
      << r.message;
  serve(worker(fifo(), /*exit_on_first=*/false));
  for (int i = 1; i <= 2; ++i) {  // the second call empties stderr: through the file, not the FIFO
    r = deltacheck::testing::within_deadline("--serve whose stderr.txt became a FIFO",
                                             [&] { return call(); });
    EXPECT_NE(r.message.find("external worker: call " + std::to_string(i)), std::string::npos)
        << r.message;
  }
  serve(worker(fifo(), /*exit_on_first=*/true));
  r = deltacheck::testing::within_deadline(
      "--serve worker exiting after its stderr.txt became a "
      "FIFO",
      [&] { return call(); });
  EXPECT_NE(r.message.find("external worker exited with code 3: its own words"), std::string::npos)
      << r.message;
}

// E4: /dev/zero in stderr.txt's place is never read; the run completes under an address-space
// limit that reading it whole (one endless line) would break with std::bad_alloc.
TEST_F(HostileStderr, DevZeroInPlaceOfStderrIsNotReadWithoutEnd) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  const std::string limit;  // a sanitizer reserves terabytes of address space
#else
  const std::string limit = "ulimit -v 2000000; ";  // 2 GB
#endif
  for (const std::string how : {"--cmd", "--serve"}) {
    const std::string candidate =
        how == "--cmd" ? program(dev_zero()) : worker(dev_zero(), /*exit_on_first=*/true);
    const std::string cmd = limit + "exec " + std::string(DELTACHECK_BINARY_DIR) +
                            "/deltacheck run --backend external " + how + " " +
                            sh_quote(candidate) + kSmallCase + " --max-memory 100M";
    const std::string out = dir_ / "e4.out";
    const int status =
        std::system(("sh -c " + sh_quote(cmd) + " >" + out + " 2>&1 </dev/null").c_str());
    const std::string text = slurp(out);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << how << ": " << text;
    EXPECT_NE(text.find(how == "--cmd" ? "external program exited with code 3: its own words"
                                       : "external worker exited with code 3: its own words"),
              std::string::npos)
        << how << ": " << text.substr(0, 2000);
    EXPECT_EQ(text.find("bad_alloc"), std::string::npos) << how << ": " << text.substr(0, 2000);
  }
  // Reading /dev/zero up to the limit took gigabytes: the largest child stayed small.
  struct rusage ru {};
  ASSERT_EQ(getrusage(RUSAGE_CHILDREN, &ru), 0);
  EXPECT_LT(ru.ru_maxrss, 512 * 1024) << "KiB: /dev/zero was read";
}

}  // namespace
}  // namespace deltacheck::golden
