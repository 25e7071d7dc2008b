// The external backend's serve mode (docs/external.md): one worker answers many calls; a crash,
// a hang or a garbage answer is that call's error, the worker is killed with everything it
// started and the next call starts a new one; a correct worker passes (probes included) and a
// leaky one is a leak. The workers are /bin/sh scripts written here and deltacheck_serve_worker
// (backends/external/serve_worker.cc), which runs one of deltacheck's backends.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>

#include "backends/registry.h"
#include "golden/exchange.h"
#include "golden_test_util.h"
#include "tests/deadline.h"

namespace deltacheck::golden {
namespace {

using harness::Verdict;
using testing::TempDir;

const std::string kWorker = std::string(DELTACHECK_BINARY_DIR) + "/deltacheck_serve_worker";

int count_lines(const std::string& path) {
  std::ifstream f(path);
  int n = 0;
  for (std::string line; std::getline(f, line);) ++n;
  return n;
}

using testing::gone;

pid_t read_pid(const std::string& file) {
  std::ifstream f(file);
  pid_t pid = 0;
  return f >> pid ? pid : 0;
}

class ExternalServe : public ::testing::Test {
 protected:
  void SetUp() override {
    pc_ = std::make_unique<harness::PreparedCase>(harness::prepare(
        cases::Case::parse("gdr(layout=packed[6,0,9],H=1,HV=2,K=8,V=8,dtype=bf16,seed=2)")));
    cases::TensorMap right = harness::allocate_outputs(pc_->outputs);
    for (cases::Tensor& t : right.all()) {
      const std::vector<double>& e = pc_->expected.at(t.name());
      for (int64_t i = 0; i < t.numel(); ++i) t.set(i, e[i]);
    }
    ASSERT_TRUE(write_output_file(dir_ / "right.h5", right).ok());
    ASSERT_TRUE(std::filesystem::create_directory(dir_ / "tmp"));
    setenv("TMPDIR", (dir_ / "tmp").c_str(), 1);
  }
  void TearDown() override {
    backend_.reset();  // the workers go, and their folders with them
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_ / "tmp"), {}), 0)
        << "temporary folder left behind";
    unsetenv("TMPDIR");
  }

  // A serve-mode backend running `program`; each start appends a line to spawns.txt.
  harness::Backend& serve(const std::string& program, double timeout_s = 30) {
    harness::BackendOptions o;
    o.serve = "echo start >> '" + dir_ / "spawns.txt" + "'; " + program;
    o.timeout_s = timeout_s;
    backend_ = backends::make_backend("external", o);
    return *backend_;
  }
  // A worker in /bin/sh: the handshake, then per request `body` with $in and $out set, and $n
  // counting the requests this worker has had; each request appends a line to calls.txt.
  std::string sh_worker(const std::string& body) {
    const std::string script = dir_ / ("worker" + std::to_string(++scripts_) + ".sh");
    std::ofstream(script) << "echo 'deltacheck-serve 1'\nn=0\ntab=$(printf '\\t')\n"
                          << "while IFS=\"$tab\" read -r cmd in out; do\n  n=$((n + 1))\n"
                          << "  echo call >> '" << dir_ / "calls.txt"
                          << "'\n  " << body << "\ndone\n";
    return "exec sh '" + script + "'";
  }
  std::string answer_right() { return "cp '" + dir_ / "right.h5" + "' \"$out\"; echo ok"; }
  int spawns() { return count_lines(dir_ / "spawns.txt"); }
  void expect_pass() {
    const harness::CaseResult r = run();
    EXPECT_EQ(r.verdict, Verdict::kPass) << r.message;
  }
  harness::CaseResult run(bool probes = false, bool ahead = false) {
    return harness::run_case(*pc_, *backend_, probes, nullptr, ahead);
  }

  TempDir dir_;
  std::unique_ptr<harness::PreparedCase> pc_;
  std::unique_ptr<harness::Backend> backend_;
  int scripts_ = 0;
};

TEST_F(ExternalServe, OneWorkerAnswersEveryCall) {
  serve(sh_worker(answer_right()));
  for (int i = 0; i < 5; ++i) {
    const harness::CaseResult r = run();
    EXPECT_EQ(r.verdict, Verdict::kPass) << r.message;
  }
  EXPECT_EQ(spawns(), 1);
  EXPECT_EQ(count_lines(dir_ / "calls.txt"), 5);
}

TEST_F(ExternalServe, CorrectWorkerPassesWithProbesAndLeakyWorkerLeaks) {
  serve(kWorker + " --backend cpu");
  harness::CaseResult r = run(true);
  EXPECT_EQ(r.verdict, Verdict::kPass) << r.message;
  EXPECT_FALSE(r.probes.empty());  // the probes made their calls, to the same worker
  EXPECT_EQ(spawns(), 1);
  // The probe calls' inputs built one call ahead (--prepare-ahead): the same results.
  const harness::CaseResult ahead = run(true, true);
  EXPECT_EQ(ahead.verdict, Verdict::kPass) << ahead.message;
  ASSERT_EQ(ahead.probes.size(), r.probes.size());
  for (size_t i = 0; i < r.probes.size(); ++i)
    EXPECT_EQ(ahead.probes[i].detail, r.probes[i].detail) << r.probes[i].name;
  serve(kWorker + " --backend wrong:ignore-cu-seqlens");
  r = run(true);
  EXPECT_EQ(r.verdict, Verdict::kLeak) << r.message;
  EXPECT_EQ(run(true, true).message, r.message);
}

// gdr_grad travels the protocol like any op (docs/external.md, "Gradients"): the forward's
// inputs, do and dht in; dq ... dh0 out, judged per sequence, the tail bit for bit.
TEST_F(ExternalServe, GradientsTravelTheProtocol) {
  const auto judge = [&](const std::string& id, const std::string& backend, bool probes) {
    pc_ = std::make_unique<harness::PreparedCase>(harness::prepare(cases::Case::parse(id)));
    serve(kWorker + " --backend " + backend);
    return run(probes);
  };
  const std::string packed = "gdr_grad(layout=packed[6,0,9],H=1,HV=2,K=8,V=8,dht=rand,seed=2)";
  const std::string tail = "gdr_grad(layout=packed[5,3],H=1,HV=2,K=8,V=8,tail=4,seed=3)";
  for (const std::string& id : {packed, tail}) {
    const harness::CaseResult r = judge(id, "cpu", true);
    EXPECT_EQ(r.verdict, Verdict::kPass) << id << ": " << r.message;
  }
  harness::CaseResult r = judge(packed, "wrong:grad-carry-state", true);
  EXPECT_EQ(r.verdict, Verdict::kLeak) << r.message;
  r = judge(tail, "wrong:grad-tail-unwritten", false);  // the poison comes back as it went
  EXPECT_EQ(r.verdict, Verdict::kError) << r.message;
  EXPECT_NE(r.message.find("unwritten"), std::string::npos) << r.message;
}

TEST_F(ExternalServe, ACrashIsThatCallsErrorAndTheNextCallStartsANewWorker) {
  // The first worker crashes on its second call; the next one never does.
  const std::string once = dir_ / "crashed";
  serve(sh_worker("if [ $n -eq 2 ] && [ ! -e '" + once + "' ]; then touch '" + once +
                  "'; echo 'about to crash' >&2; kill -SEGV $$; fi; " + answer_right()));
  expect_pass();
  const harness::CaseResult r = run();
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.message.find("external worker crashed: killed by signal 11 (Segmentation fault): "
                           "about to crash (the next call starts a new one)"),
            std::string::npos)
      << r.message;
  expect_pass();
  expect_pass();
  EXPECT_EQ(spawns(), 2);
}

TEST_F(ExternalServe, AHangIsKilledWithEveryProcessItStarted) {
  // The first worker writes its PID, starts a daemon (its own session) and hangs in a child.
  const std::string hang = "if [ ! -e '" + dir_ / "hung" + "' ]; then touch '" + dir_ / "hung" +
                           "'; echo $$ > '" + dir_ / "worker.pid" + "'; setsid sh -c 'echo $$ > " +
                           dir_ / "daemon.pid" + "; exec sleep 300' & sleep 300; fi; ";
  serve(sh_worker(hang + answer_right()), 1.0);
  const harness::CaseResult r =
      deltacheck::testing::within_deadline("a call to a hanging worker", [&] { return run(); });
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.message.find("external worker timed out after 1 s (killed, with every process it "
                           "started; the next call starts a new one)"),
            std::string::npos)
      << r.message;
  const pid_t worker = read_pid(dir_ / "worker.pid"), daemon = read_pid(dir_ / "daemon.pid");
  ASSERT_GT(worker, 0);
  ASSERT_GT(daemon, 0);
  EXPECT_TRUE(gone(worker, 2.0)) << "the hung worker survived its timeout";
  EXPECT_TRUE(gone(daemon, 2.0)) << "the hung worker's daemon survived its timeout";
  expect_pass();
  EXPECT_EQ(spawns(), 2);
}

TEST_F(ExternalServe, GarbageAnswersAreErrors) {
  const std::string once = dir_ / "garbled";
  serve(sh_worker("if [ ! -e '" + once + "' ]; then touch '" + once + "'; echo 'yes, done'; else " +
                  answer_right() + "; fi"));
  harness::CaseResult r = run();
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.message.find("external worker answered garbage: 'yes, done', expected ok, error "
                           "<reason> or unsupported <reason>"),
            std::string::npos)
      << r.message;
  expect_pass();  // a new worker
  EXPECT_EQ(spawns(), 2);
  // Two answers to one request: the second is unasked, and the next call says so.
  serve(sh_worker(answer_right() + "; echo ok"));
  expect_pass();
  r = run();
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.message.find("external worker wrote to stdout between calls ('ok"), std::string::npos)
      << r.message;
  // An endless line.
  serve(sh_worker("head -c 200000 /dev/zero | tr '\\0' x"));
  r = run();
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.message.find("answered garbage: a line over 65536 bytes"), std::string::npos)
      << r.message;
}

TEST_F(ExternalServe, ErrorAndUnsupportedAnswersKeepTheWorker) {
  serve(
      sh_worker("case $n in 1) printf 'error no kernel for K=8 \\033[32mPASS\\n';; "
                "2) echo 'unsupported needs a GPU';; *) " +
                answer_right() + ";; esac"));
  harness::CaseResult r = run();
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_EQ(r.message.find('\x1b'), std::string::npos) << "a control character went through";
  EXPECT_NE(r.message.find("external worker: no kernel for K=8"), std::string::npos) << r.message;
  r = run();
  EXPECT_EQ(r.verdict, Verdict::kUnsupported);
  EXPECT_EQ(r.message, "needs a GPU");
  expect_pass();
  EXPECT_EQ(spawns(), 1);
}

TEST_F(ExternalServe, AProgramThatDoesNotSpeakTheProtocolIsAnError) {
  serve("echo hello; sleep 100");
  harness::CaseResult r = run();
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.message.find("external worker's first line is 'hello', expected 'deltacheck-serve "
                           "1'"),
            std::string::npos)
      << r.message;
  serve("echo 'cannot import torch' >&2; exit 3");
  r = run();
  EXPECT_NE(r.message.find("external worker ended before its handshake: exited with code 3: "
                           "cannot import torch"),
            std::string::npos)
      << r.message;
  serve("sleep 100", 0.5);
  r = run();
  EXPECT_NE(r.message.find("sent no handshake ('deltacheck-serve 1') within 0.5 s"),
            std::string::npos)
      << r.message;
}

TEST_F(ExternalServe, AWorkerThatClosesItsStdoutIsKilled) {
  serve(sh_worker("exec <&- >&-; echo 'closing' >&2; sleep 300"));  // stdin and stdout: one socket
  const harness::CaseResult r = run();
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.message.find("external worker closed its stdout without answering (killed): closing"),
            std::string::npos)
      << r.message;
}

TEST_F(ExternalServe, StderrIsCapturedPerCall) {
  // The worker's traceback of an earlier call is not this call's reason.
  serve(sh_worker("echo \"call $n\" >&2; if [ $n -eq 3 ]; then exit 5; fi; " + answer_right()));
  expect_pass();
  expect_pass();
  const harness::CaseResult r = run();
  EXPECT_NE(r.message.find("external worker exited with code 5: call 3 (the next call"),
            std::string::npos)
      << r.message;
}

TEST_F(ExternalServe, TheWorkerKnowsItIsServingAndTheCommandHasNoPlaceholders) {
  serve("[ \"$DELTACHECK_SERVE\" = 1 ] || exit 9; " + sh_worker(answer_right()));
  expect_pass();
  serve("true {in} {out}");
  const harness::CaseResult r = run();
  EXPECT_NE(r.message.find("--serve takes the program without {in} and {out}"), std::string::npos)
      << r.message;
}

// Not in the ASan run (scripts/sanitizers.sh): two jobs fork children that read {out} while the
// other job allocates, and GCC 12's ASan runtime has no fork handlers for its allocator's locks
// (docs/reliability.md, "Sanitizers and fork()").
TEST(ExternalServeCli, OneWorkerPerJob) {
  TempDir dir;
  // Packed cases of the smoke suite with probes, two jobs: at most two workers for every call.
  const std::string count = "echo start >> " + dir / "spawns.txt" + "; exec " + kWorker;
  auto r = testing::run_cli(
      "run --suite smoke --filter '^gdr.layout=packed.(63,0,65.*seed=1[012].|1[*]24,2[*]12)' "
      "--jobs 2 -q "
      "--backend external "
      "--serve " +
          testing::quote(count),
      dir);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const int n = count_lines(dir / "spawns.txt");
  EXPECT_GE(n, 1);
  EXPECT_LE(n, 2);
  r = testing::run_cli("run --backend external --serve x --cmd 'x {in} {out}' --case 'gdr()'", dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("give --cmd or --serve, not both"), std::string::npos) << r.err;
}

// deltacheck killed while its worker hangs: the worker goes too.
TEST(ExternalServeCli, KillingDeltacheckKillsItsWorker) {
  TempDir dir;
  const std::string hang =
      "echo \"deltacheck-serve 1\"; echo $$ > " + dir / "worker.pid" + "; sleep 300";
  const pid_t deltacheck = fork();
  ASSERT_GE(deltacheck, 0);
  if (deltacheck == 0) {
    const std::string cmd = "exec " + std::string(DELTACHECK_BINARY_DIR) +
                            "/deltacheck run -q --case 'gdr(layout=packed[5,7],seed=1)' "
                            "--backend external --serve " +
                            testing::quote(hang) + " >/dev/null 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  pid_t worker = 0;
  for (int i = 0; i < 1000 && worker == 0; ++i, usleep(10000))
    worker = read_pid(dir / "worker.pid");
  ASSERT_GT(worker, 0);
  kill(deltacheck, SIGKILL);
  int status = 0;
  EXPECT_EQ(waitpid(deltacheck, &status, 0), deltacheck);
  EXPECT_TRUE(gone(worker)) << "the worker outlived deltacheck";
}

}  // namespace
}  // namespace deltacheck::golden
