// Backend "external": an implementation outside this repository, run as a program once per case
// (golden/README.md, "External programs"). For each case the inputs go to {in} in the fixture
// format, in a fresh temporary folder; `--cmd 'PROGRAM {in} {out}'` runs through /bin/sh in its
// own process group with a timeout; the program's outputs come back from {out}. Everything that
// can go wrong on the program's side (non-zero exit, crash, timeout, missing or malformed
// outputs) is a Status error naming the reason, so the case gets the verdict error.
//
// Resource limits: the program's temporary files go to the case's folder (TMPDIR points there),
// which is removed afterwards whatever the program did to it (and, at the next run, when a killed
// deltacheck left it behind); no file it writes may exceed an output-size limit (RLIMIT_FSIZE),
// and {out} must be a regular file within that limit before it is read.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "cases/safe_text.h"
#include "golden/format.h"
#include "harness/backends/backends.h"
#include "harness/isolation.h"

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
  // The program's words go into reports and onto the console: valid UTF-8, no control codes.
  return cases::printable_line(last, 300);
}

// Makes a folder the program may have locked (chmod 000) removable again; never follows a
// symbolic link out of it.
void make_removable(const std::string& path, int depth = 0) {
  struct stat st;
  if (depth > 64 || lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return;
  chmod(path.c_str(), 0700);
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(path, ec))
    make_removable(e.path().string(), depth + 1);
}

void remove_folder(const std::string& path) {
  make_removable(path);
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

constexpr const char* kTempPrefix = "deltacheck-external-";

// Folders of deltacheck processes that no longer exist (killed before they could clean up).
void remove_stale_folders(const std::string& base) {
  DIR* d = opendir(base.c_str());
  if (!d) return;
  std::vector<std::string> stale;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(kTempPrefix, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + std::strlen(kTempPrefix), nullptr, 10);
    struct stat st;
    const std::string path = base + "/" + name;
    if (pid > 0 && lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == getuid() &&
        kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
      stale.push_back(path);
  }
  closedir(d);
  for (const std::string& p : stale) remove_folder(p);
}

// A private temporary folder, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    const std::string dir = base && *base ? base : "/tmp";
    {
      // Once per process and folder: a readdir of TMPDIR, not one per case.
      static std::mutex mu;
      static std::set<std::string> swept;
      std::lock_guard<std::mutex> lock(mu);
      if (swept.insert(dir).second) remove_stale_folders(dir);
    }
    std::string tmpl = dir + "/" + kTempPrefix + std::to_string(getpid()) + "-XXXXXX";
    if (mkdtemp(tmpl.data())) path_ = tmpl;
  }
  ~TempDir() {
    if (!path_.empty()) remove_folder(path_);
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
                                   const std::string& out_path, const std::string& err_path,
                                   const std::string& tmpdir, uint64_t max_file_bytes) {
  const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
  // The environment, with TMPDIR set to the case's folder (built before fork: the child may
  // only make async-signal-safe calls).
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "TMPDIR=", 7) != 0) env.emplace_back(*e);
  env.push_back("TMPDIR=" + tmpdir);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const rlimit fsize{max_file_bytes, max_file_bytes};
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
    setrlimit(RLIMIT_FSIZE, &fsize);
    execve("/bin/sh", const_cast<char* const*>(argv), envp.data());
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
    // The output-size limit: room for the outputs several times over, plus HDF5's metadata.
    uint64_t out_bytes = 0;
    for (const cases::Tensor& t : outputs.all()) out_bytes += t.nbytes();
    const uint64_t max_file = 4 * out_bytes + (uint64_t{64} << 20);
    golden::StatusOr<Exit> e =
        run_program(cmd, timeout_s_, dir.path() + "/stdout.txt", err_path, dir.path(), max_file);
    if (!e.ok()) return e.status();
    const std::string said = last_line(err_path);
    const std::string tail = said.empty() ? "" : ": " + said;
    if (e.value().timed_out) {
      std::ostringstream s;
      s << "external program timed out after " << timeout_s_ << " s (process group killed)";
      return Status::Internal(s.str());
    }
    // Killed by SIGXFSZ itself, or a shell reporting that its command was (128 + signal).
    if ((e.value().signaled && e.value().code == SIGXFSZ) ||
        (!e.value().signaled && e.value().code == 128 + SIGXFSZ))
      return Status::Internal(
          "external program wrote a file larger than the output-size limit "
          "of " +
          std::to_string(max_file) + " bytes (killed by SIGXFSZ)");
    if (e.value().signaled)
      return Status::Internal("external program crashed: killed by signal " +
                              std::to_string(e.value().code) + " (" + strsignal(e.value().code) +
                              ")" + tail);
    if (e.value().code != 0)
      return Status::Internal("external program exited with code " +
                              std::to_string(e.value().code) +
                              (e.value().code == 127 ? " (command not found?)" : "") + tail);
    // {out} must be a regular file (a FIFO or a link to a device would block or never end)
    // within the limit before HDF5 opens it.
    struct stat ost;
    if (lstat(out.c_str(), &ost) == 0 &&
        (!S_ISREG(ost.st_mode) || static_cast<uint64_t>(ost.st_size) >= max_file))
      return Status::InvalidArgument(
          S_ISREG(ost.st_mode)
              ? "external program's {out} is " + std::to_string(ost.st_size) +
                    " bytes, at the output-size limit of " + std::to_string(max_file)
              : std::string("external program's {out} is not a regular file"));
    // Read in a child process too: the HDF5 library can hang or crash on a crafted file, and
    // the program's output is as untrusted as the program.
    Status st =
        run_isolated([&](cases::TensorMap& into) { return golden::read_output_file(out, into); },
                     outputs, {timeout_s_});
    if (st.code() == StatusCode::kInternal)  // the reader's child crashed or hung
      return Status::Internal("reading the external program's {out} " + st.message());
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
