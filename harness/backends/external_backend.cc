// Backend "external": an implementation outside this repository, run as a program once per case
// (golden/README.md, "External programs"). For each case the inputs go to {in} in the fixture
// format, in a fresh temporary folder; `--cmd 'PROGRAM {in} {out}'` runs through /bin/sh in its
// own process group with a timeout; the program's outputs come back from {out}. Everything that
// can go wrong on the program's side (non-zero exit, crash, timeout, missing or malformed
// outputs) is a Status error naming the reason, so the case gets the verdict error.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "golden/format.h"
#include "harness/backends/backends.h"

namespace deltacheck::harness {
namespace {

// Quoted for /bin/sh: the paths may hold anything (TMPDIR is the user's).
std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

std::string substitute(std::string cmd, const std::string& key, const std::string& value) {
  for (size_t at = cmd.find(key); at != std::string::npos; at = cmd.find(key, at + value.size()))
    cmd.replace(at, key.size(), value);
  return cmd;
}

// The last non-empty line the program wrote to stderr (a Python traceback ends with the error).
std::string last_line(const std::string& path) {
  std::ifstream f(path);
  std::string line, last;
  while (std::getline(f, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  if (last.size() > 300) last = last.substr(0, 300) + "...";
  return last;
}

// A private temporary folder, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/deltacheck-external-XXXXXX";
    if (mkdtemp(tmpl.data())) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct Exit {
  bool timed_out = false;
  bool signaled = false;
  int code = 0;  // exit code, or the signal number when signaled
};

// Runs `cmd` through /bin/sh in a new process group, stdin from /dev/null and stdout/stderr to
// files; after `timeout_s` the whole group is killed. Stragglers the program left running in its
// group are killed when it ends.
golden::StatusOr<Exit> run_program(const std::string& cmd, double timeout_s,
                                   const std::string& out_path, const std::string& err_path) {
  const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
  const pid_t pid = fork();
  if (pid < 0) return Status::Internal(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec.
    setpgid(0, 0);
    const int in = open("/dev/null", O_RDONLY);
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (in < 0 || out < 0 || err < 0) _exit(126);
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    closefrom(3);
    execv("/bin/sh", const_cast<char* const*>(argv));
    _exit(127);
  }
  setpgid(pid, pid);  // also here: no race with the child's own call
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(std::max(0.0, timeout_s));
  Exit e;
  auto wait_ms = std::chrono::milliseconds(1);
  for (;;) {
    // Wait without reaping: while the child is an unreaped zombie its pid, the group's id,
    // cannot be reused, so killing the group below cannot hit anyone else.
    siginfo_t info;
    info.si_pid = 0;
    if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) < 0 &&
        errno != EINTR) {
      kill(-pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      return Status::Internal(std::string("waiting for the program failed: ") +
                              std::strerror(errno));
    }
    if (info.si_pid == pid) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      e.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(wait_ms);
    wait_ms = std::min(wait_ms * 2, std::chrono::milliseconds(50));
  }
  kill(-pid, SIGKILL);
  kill(pid, SIGKILL);  // in case the group was never formed
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (e.timed_out) return e;
  if (WIFSIGNALED(status)) {
    e.signaled = true;
    e.code = WTERMSIG(status);
  } else {
    e.code = WEXITSTATUS(status);
  }
  return e;
}

class ExternalBackend : public Backend {
 public:
  explicit ExternalBackend(const BackendOptions& o) : cmd_(o.cmd), timeout_s_(o.timeout_s) {}

  std::string name() const override { return "external"; }
  std::string description() const override {
    return "a program run once per case: --cmd 'PROGRAM {in} {out}' [--timeout S] "
           "(protocol: golden/README.md)";
  }
  // Nothing is known about the program; the probes must not assume repeatable bits.
  bool deterministic() const override { return false; }
  Support supports(const cases::Case& c) const override { return Support::Yes(); }

  Status run(const cases::Case& c, const cases::TensorMap& inputs,
             cases::TensorMap& outputs) override {
    if (cmd_.find("{in}") == std::string::npos || cmd_.find("{out}") == std::string::npos)
      return Status::InvalidArgument("external backend: --cmd must contain {in} and {out}");
    TempDir dir;
    if (dir.path().empty())
      return Status::Internal(std::string("cannot create a temporary folder: ") +
                              std::strerror(errno));
    const std::string in = dir.path() + "/in.h5", out = dir.path() + "/out.h5";
    std::vector<OutputSpec> specs;
    for (const cases::Tensor& t : outputs.all()) specs.push_back({t.name(), t.dtype(), t.shape()});
    if (Status st = golden::write_input_file(in, c, inputs, specs); !st.ok())
      return Status::Internal("cannot write {in}: " + st.message());

    const std::string cmd =
        substitute(substitute(cmd_, "{in}", shell_quote(in)), "{out}", shell_quote(out));
    const std::string err_path = dir.path() + "/stderr.txt";
    golden::StatusOr<Exit> e = run_program(cmd, timeout_s_, dir.path() + "/stdout.txt", err_path);
    if (!e.ok()) return e.status();
    const std::string said = last_line(err_path);
    const std::string tail = said.empty() ? "" : ": " + said;
    if (e.value().timed_out) {
      std::ostringstream s;
      s << "external program timed out after " << timeout_s_ << " s (process group killed)";
      return Status::Internal(s.str());
    }
    if (e.value().signaled)
      return Status::Internal("external program crashed: killed by signal " +
                              std::to_string(e.value().code) + " (" + strsignal(e.value().code) +
                              ")" + tail);
    if (e.value().code != 0)
      return Status::Internal("external program exited with code " +
                              std::to_string(e.value().code) +
                              (e.value().code == 127 ? " (command not found?)" : "") + tail);
    Status st = golden::read_output_file(out, outputs);
    if (st.code() == StatusCode::kUnsupported) return st;
    if (!st.ok()) return Status::InvalidArgument("external program's outputs: " + st.message());
    return Status::Ok();
  }

 private:
  std::string cmd_;
  double timeout_s_;
};

}  // namespace

std::unique_ptr<Backend> make_external_backend(const BackendOptions& options) {
  return std::make_unique<ExternalBackend>(options);
}

}  // namespace deltacheck::harness
