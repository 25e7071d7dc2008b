// A candidate that replaces its stderr.txt during its call (issue #35, E1-E4): with a link to a
// file of the user's (a canary here), a FIFO nobody writes, or a link to /dev/zero. deltacheck
// holds the stderr file it made and reads the candidate's last line through its own descriptor,
// so whatever stands at the name afterwards is never truncated (E1), read into a message or
// report (E2), blocked on (E3) or read without end (E4). Both --cmd (one program per call: its
// TMPDIR is the case's folder, stderr.txt in it) and --serve (one worker: TMPDIR is tmp/ of its
// folder, stderr.txt beside it).
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

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
  // The second call empties stderr: through the file, not the FIFO. Both calls on one thread: a
  // worker belongs to the thread that started it and is stopped when that thread ends (one
  // within_deadline per call, each on a thread of its own, had the second call meet a new worker
  // whenever the first one's guard noticed its thread was gone in time).
  const std::vector<harness::CaseResult> both =
      deltacheck::testing::within_deadline("--serve whose stderr.txt became a FIFO", [&] {
        return std::vector<harness::CaseResult>{call(), call()};
      });
  for (int i = 1; i <= 2; ++i)
    EXPECT_NE(both[i - 1].message.find("external worker: call " + std::to_string(i)),
              std::string::npos)
        << both[i - 1].message;
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

// A worker still running when deltacheck removes its call folder (after each call) swaps a folder
// of it for a link to a folder of the user's the moment the removal opens it (seen with inotify;
// the swap is done by the test's thread, on the worker's cue, so that it lands every time). It
// also leaves links to that folder in the call folder and in its own case folder. The removal
// goes on in the folder it opened: every name, byte and mode in the user's folder stays, and
// nothing is left in TMPDIR once the worker is gone.
TEST_F(HostileStderr, AServeWorkersCallFolderSwappedMidRemovalLeavesTheUsersFolderAlone) {
  namespace fs = std::filesystem;
  const std::string user = dir_ / "user-folder", where = dir_ / "where", go = dir_ / "go";
  fs::create_directory(user);
  for (int i = 1; i <= 300; ++i) {
    const std::string d = user + "/d" + std::to_string(i);
    fs::create_directory(d);
    ::chmod(d.c_str(), 0755);
    std::ofstream(d + "/keep") << "keep";
    std::ofstream(user + "/f" + std::to_string(i)) << "keep";
  }
  ::chmod(user.c_str(), 0755);
  // The worker makes d/ with the user's names in its call folder, plants the links, tells the test
  // where d/ is, waits for its go, then answers.
  const std::string script = dir_ / "swap-worker.sh";
  std::ofstream(script)
      << "echo 'deltacheck-serve 1'\n"
      << "while IFS='\t' read -r cmd in out; do\n"
      << "  c=$(dirname \"$in\"); mkdir \"$c/d\"; cd \"$c/d\" || exit 1\n"
      << "  seq 300 | sed 's/^/d/' | xargs mkdir; seq 300 | sed 's/^/f/' | xargs touch\n"
      << "  cd / ; ln -s " << sh_quote(user) << " \"$c/link\"; ln -s " << sh_quote(user)
      << " \"$c/../link\"\n"
      << "  echo \"$c/d\" > " << sh_quote(where + ".tmp") << "; mv " << sh_quote(where + ".tmp")
      << " " << sh_quote(where) << "\n"
      << "  while [ ! -e " << sh_quote(go) << " ]; do sleep 0.01; done; rm -f " << sh_quote(go)
      << "\n  echo 'error the folder is set'\ndone\n";
  serve("exec sh '" + script + "'");
  bool swapped = false;
  std::thread swapper([&] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!fs::exists(where) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::string d = slurp(where);
    while (!d.empty() && d.back() == '\n') d.pop_back();
    const int in = inotify_init1(IN_CLOEXEC);
    const bool watched = !d.empty() && in >= 0 && inotify_add_watch(in, d.c_str(), IN_OPEN) >= 0;
    std::ofstream(go) << "go";
    pollfd p{in, POLLIN, 0};
    if (watched && ::poll(&p, 1, 30000) == 1)
      swapped = ::rename(d.c_str(), (d + ".moved").c_str()) == 0 &&
                ::symlink(user.c_str(), d.c_str()) == 0;
    if (in >= 0) ::close(in);
  });
  const harness::CaseResult r = call();
  swapper.join();
  EXPECT_EQ(r.verdict, Verdict::kError) << r.message;
  EXPECT_NE(r.message.find("the folder is set"), std::string::npos) << r.message;
  EXPECT_TRUE(swapped) << "the swap did not happen: the test proved nothing";
  backend_.reset();  // the worker ends, its folder goes (TearDown: nothing left in TMPDIR)
  EXPECT_EQ(fs::status(user).permissions(), static_cast<fs::perms>(0755));
  int names = 0;
  for (const auto& e : fs::directory_iterator(user)) names += e.path().empty() ? 0 : 1;
  EXPECT_EQ(names, 600) << "files of the user's folder were removed";
  for (int i = 1; i <= 300; ++i) {
    const std::string d = user + "/d" + std::to_string(i);
    EXPECT_EQ(fs::status(d).permissions(), static_cast<fs::perms>(0755)) << d;
    EXPECT_EQ(slurp(d + "/keep"), "keep") << d;
  }
}

}  // namespace
}  // namespace deltacheck::golden
