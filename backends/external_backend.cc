// Backend "external": an implementation outside this repository, run as a program once per case
// (golden/README.md, "External programs"). For each case the inputs go to {in} in the fixture
// format, in a fresh temporary folder; `--cmd 'PROGRAM {in} {out}'` runs through /bin/sh in its
// own process group with a timeout, under a guard process that kills everything the program
// started when the call ends or deltacheck dies (below, "the guard"); the program's outputs come
// back from {out}. Everything that can go wrong on the program's side (non-zero exit, crash,
// timeout, missing or malformed outputs) is a Status error naming the reason, so the case gets
// the verdict error.
//
// Serve mode (`--serve 'PROGRAM'`, docs/external.md): one long-lived program per runner thread
// answers every call, under the same guard, speaking a line protocol on its stdin/stdout (a
// socket pair): a handshake line, then per call a request naming {in} and {out} and a one-line
// answer. A call that times out, a worker that dies or answers garbage is that call's error; the
// worker is killed with everything it started and the next call starts a new one.
//
// Resource limits: the program's temporary files go to the case's folder (TMPDIR points there),
// which is removed afterwards whatever the program did to it (and, at the next run, when a killed
// deltacheck left it behind: its lock is free); no file it writes may exceed an output-size limit
// (RLIMIT_FSIZE), and {out} must be a regular file within that limit before it is read.
//
// Files in the case's folder (which the program can write) are reached through cases::SafeDir
// (cases/safe_file.h): deltacheck makes stdout.txt and stderr.txt itself and hands the program
// the descriptors; the last line of stderr is read back through deltacheck's own descriptor,
// a bounded tail, so whatever the program puts at the name (a link to the user's files, a FIFO,
// /dev/zero) is never truncated, read or waited on; {out} is opened without following a link and
// checked on the descriptor HDF5 then reads (docs/reliability.md, "Issue 35").
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "backends/backends.h"
#include "backends/serve_protocol.h"
#include "cases/safe_file.h"
#include "cases/safe_text.h"
#include "golden/exchange.h"
#include "harness/isolation.h"
#include "harness/op_names.h"

namespace deltacheck::backends {
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

// How much of the end of a program's stderr is read for its last line: a bound whatever it wrote.
constexpr size_t kStderrTail = size_t{64} << 10;

// The last non-empty line the program wrote to stderr (a Python traceback ends with the error),
// from the end of the file open at `err` (deltacheck's descriptor of the file it made).
std::string last_line(const cases::UniqueFd& err) {
  StatusOr<std::string> tail = cases::read_tail(err.get(), kStderrTail);
  if (!tail.ok()) return "";
  std::istringstream f(tail.value());
  std::string line, last;
  while (std::getline(f, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  // The program's words go into reports and onto the console: valid UTF-8, no control codes.
  return cases::printable_line(last, 300);
}

constexpr const char* kTempPrefix = "deltacheck-external-";

// Folders of deltacheck processes that are gone: a run holds a lock on its folder (flock on the
// folder itself, released by the kernel when the process dies), so a folder whose lock is free
// belongs to nobody. A PID in the name proves nothing (another PID namespace sharing TMPDIR, a
// reused PID).
// Removed with SafeDir::remove_tree (never following a link out of them, also through chmod 000
// subfolders): a killed run's program may have left anything in its folder.
void remove_stale_folders(const std::string& base) {
  StatusOr<cases::SafeDir> dir = cases::SafeDir::open(base, false);
  if (!dir.ok()) return;
  std::vector<std::string> stale;
  for (const std::string& name : dir.value().names()) {
    if (name.rfind(kTempPrefix, 0) != 0) continue;
    const int fd =
        openat(dir.value().fd(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_uid == getuid() && flock(fd, LOCK_EX | LOCK_NB) == 0)
      stale.push_back(name);
    close(fd);
  }
  for (const std::string& n : stale) (void)dir.value().remove_tree(n);
}

// A private temporary folder, locked while this process uses it, held open (the program can write
// it, and rename or replace anything in it: everything below is reached through the held
// descriptor, cases/safe_file.h), removed with everything in it.
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
    if (!mkdtemp(tmpl.data())) return;
    StatusOr<cases::SafeDir> held = cases::SafeDir::open(tmpl, false);
    if (!held.ok() || flock(held.value().fd(), LOCK_EX | LOCK_NB) != 0) {
      (void)cases::SafeDir::remove_tree_at(tmpl);
      return;
    }
    dir_ = held.take();  // the lock is on this descriptor: held as long as the folder is
    path_ = tmpl;
  }
  ~TempDir() {
    if (path_.empty()) return;
    // What is in the folder deltacheck made, through its descriptor; then the folder's name.
    (void)dir_.remove_contents();
    (void)cases::SafeDir::remove_tree_at(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  const cases::SafeDir& dir() const { return dir_; }

 private:
  std::string path_;
  cases::SafeDir dir_;
};

// How the program ended, as its guard saw it.
struct Exit {
  bool timed_out = false;
  bool signaled = false;
  int code = 0;        // exit code, or the signal number when signaled
  int exec_errno = 0;  // /bin/sh could not be started (E2BIG: --cmd or environment too large)
};

// --- the guard: the program and everything it starts die with the call ---------------------
//
// The program runs under a guard process: a child of deltacheck that is a subreaper
// (PR_SET_CHILD_SUBREAPER: whatever the program starts and orphans, a setsid daemon included, is
// re-parented to the guard instead of init) and dies with deltacheck (PR_SET_PDEATHSIG, also on
// SIGKILL). When the program ends, times out, or deltacheck goes away, the guard kills the
// program's process group and every process re-parented to it, until it has no child left, then
// reports the program's wait status. Between fork and exit the guard makes only
// async-signal-safe calls (raw system calls, no allocation): deltacheck has other threads.

struct GuardMessage {
  enum Kind : int32_t { kExecFailed = 1, kStatus = 2 };
  int32_t kind;
  int32_t value;  // errno, or the program's wait status
};

// The PIDs of the guard's children, from /proc/<pid>/stat (field 4), with raw system calls.
int children_of(pid_t parent, pid_t* out, int max) {
  const int dir = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return 0;
  int n = 0;
  char buf[4096];
  for (;;) {
    const long got = syscall(SYS_getdents64, dir, buf, sizeof buf);
    if (got <= 0) break;
    for (long at = 0; at < got;) {
      struct Entry {
        uint64_t ino;
        int64_t off;
        unsigned short reclen;
        unsigned char type;
        char name[1];
      };
      const Entry* e = reinterpret_cast<const Entry*>(buf + at);
      at += e->reclen;
      pid_t pid = 0;
      const char* c = e->name;
      for (; *c >= '0' && *c <= '9'; ++c) pid = pid * 10 + (*c - '0');
      if (*c != '\0' || pid <= 0) continue;
      char path[64] = "/proc/";
      int len = 6;
      char digits[16];
      int k = 0;
      for (pid_t x = pid; x > 0; x /= 10) digits[k++] = static_cast<char>('0' + x % 10);
      while (k > 0) path[len++] = digits[--k];
      const char* tail = "/stat";
      for (int i = 0; tail[i]; ++i) path[len++] = tail[i];
      path[len] = '\0';
      const int fd = open(path, O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      char stat[512];
      const ssize_t r = read(fd, stat, sizeof stat - 1);
      close(fd);
      if (r <= 0) continue;
      stat[r] = '\0';
      // "pid (comm) state ppid ...": comm may hold spaces and parentheses; the last ')' ends it.
      const char* close_paren = nullptr;
      for (const char* q = stat; *q; ++q)
        if (*q == ')') close_paren = q;
      if (!close_paren || close_paren[1] == '\0' || close_paren[2] == '\0') continue;
      const char* q = close_paren + 4;  // ") S " then the parent's pid
      pid_t ppid = 0;
      for (; *q >= '0' && *q <= '9'; ++q) ppid = ppid * 10 + (*q - '0');
      if (ppid == parent && n < max) out[n++] = pid;
    }
  }
  close(dir);
  return n;
}

void sleep_ms(long ms) {
  timespec t{ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&t, nullptr);
}

// Kills the program's group and every process the guard has inherited, until none is left.
void kill_everything(pid_t program) {
  pid_t kids[1024];
  for (int round = 0; round < 100000; ++round) {
    kill(-program, SIGKILL);
    const int n = children_of(getpid(), kids, 1024);
    for (int i = 0; i < n; ++i) {
      kill(-kids[i], SIGKILL);  // a daemon's own group (setsid), then the daemon
      kill(kids[i], SIGKILL);
    }
    int status;
    while (waitpid(-1, &status, WNOHANG) > 0) {
    }
    if (waitpid(-1, &status, WNOHANG) < 0 && errno == ECHILD) return;
    sleep_ms(1);
  }
}

// `channel_fd` >= 0 (serve mode): the program's stdin and stdout; otherwise stdin is /dev/null and
// stdout is `out_fd`. Its stderr is `err_fd` (in serve mode opened O_APPEND: deltacheck empties
// it before each call). The descriptors are deltacheck's, of files it made (cases/safe_file.h).
[[noreturn]] void guard_main(pid_t deltacheck, int report_fd, int channel_fd, int out_fd,
                             int err_fd, const char* const* argv, char* const* envp,
                             const rlimit& fsize) {
  // Die with deltacheck: SIGTERM (blocked, so it waits for the cleanup below) when the thread
  // that started the guard goes away, however it goes.
  sigset_t stop;
  sigemptyset(&stop);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) sigaddset(&stop, sig);
  sigprocmask(SIG_BLOCK, &stop, nullptr);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != deltacheck) _exit(1);  // deltacheck died before PR_SET_PDEATHSIG
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  // Nothing else deltacheck had open (other cases' pipes and locks) stays open here: the report
  // pipe becomes fd 3, the channel (or stdout's file) fd 4 and stderr's file fd 5 (first moved
  // above them all, so none overwrites another).
  const bool serve = channel_fd >= 0;
  const int report_high = fcntl(report_fd, F_DUPFD, 10);
  const int io_high = fcntl(serve ? channel_fd : out_fd, F_DUPFD, 10);
  const int err_high = fcntl(err_fd, F_DUPFD, 10);
  if (report_high < 0 || io_high < 0 || err_high < 0) _exit(1);
  if (dup2(report_high, 3) < 0 || dup2(io_high, 4) < 0 || dup2(err_high, 5) < 0) _exit(1);
  report_fd = 3;
  closefrom(6);
  int exec_pipe[2];
  if (pipe2(exec_pipe, O_CLOEXEC) != 0) _exit(1);
  const pid_t program = fork();
  if (program < 0) _exit(1);
  if (program == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int in = serve ? 4 : open("/dev/null", O_RDONLY);
    if (in < 0) _exit(126);
    dup2(in, 0);
    dup2(4, 1);
    dup2(5, 2);
    dup2(exec_pipe[1], 3);  // closed by a successful exec
    fcntl(3, F_SETFD, FD_CLOEXEC);
    closefrom(4);
    setrlimit(RLIMIT_FSIZE, &fsize);
    execve("/bin/sh", const_cast<char* const*>(argv), envp);
    const int e = errno;
    (void)!write(3, &e, sizeof e);
    _exit(127);
  }
  setpgid(program, program);  // also here: no race with the program's own call
  close(exec_pipe[1]);
  close(4);  // the worker's end of the channel is the worker's alone
  close(5);
  int exec_errno = 0;
  if (read(exec_pipe[0], &exec_errno, sizeof exec_errno) == sizeof exec_errno) {
    const GuardMessage m{GuardMessage::kExecFailed, exec_errno};
    (void)!write(report_fd, &m, sizeof m);
  }
  close(exec_pipe[0]);
  int status = 0;
  bool ended = false;
  long pause = 1;
  while (!ended) {
    int st = 0;
    const pid_t r = waitpid(-1, &st, WNOHANG);
    if (r == program) {
      status = st;
      ended = true;
    } else if (r > 0) {
      continue;  // an orphan re-parented to the guard, reaped
    } else {
      sigset_t pending;
      sigpending(&pending);
      bool stop_now = getppid() != deltacheck;
      for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT})
        stop_now = stop_now || sigismember(&pending, sig);
      if (stop_now) break;
      sleep_ms(pause);
      pause = pause < 20 ? pause * 2 : 20;
    }
  }
  kill_everything(program);
  if (ended) {
    const GuardMessage m{GuardMessage::kStatus, status};
    (void)!write(report_fd, &m, sizeof m);
  }
  _exit(0);
}

// Serve mode's environment variable (DELTACHECK_SERVE=1), set for a worker and for nothing else.
constexpr const char* kServeEnv = "DELTACHECK_SERVE=";
constexpr size_t kServeEnvLen = 17;
constexpr const char* kServeVersion = "1";

// A program started under its guard: the guard's PID and the read end of its report pipe.
struct Guarded {
  pid_t guard = -1;
  int report = -1;
};

// Starts `cmd` through /bin/sh under a guard (above), with TMPDIR set to `tmpdir`. Per call
// (`channel_fd` < 0): stdin from /dev/null, stdout to `out_fd`. Serve mode: stdin and stdout are
// `channel_fd` (the caller closes its copy) and DELTACHECK_SERVE=1 is in the environment. Stderr
// goes to `err_fd` in both. The caller keeps (and closes) `out_fd` and `err_fd`.
StatusOr<Guarded> start_guarded(const std::string& cmd, int channel_fd, int out_fd, int err_fd,
                                const std::string& tmpdir, uint64_t max_file_bytes) {
  const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
  // The environment (built before fork: the child may only make async-signal-safe calls).
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "TMPDIR=", 7) != 0 && std::strncmp(*e, kServeEnv, kServeEnvLen) != 0)
      env.emplace_back(*e);
  env.push_back("TMPDIR=" + tmpdir);
  if (channel_fd >= 0) env.push_back(std::string(kServeEnv) + kServeVersion);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const rlimit fsize{max_file_bytes, max_file_bytes};
  // Non-blocking: read once the guard has exited, when everything it wrote is there (a guard
  // forked meanwhile by another thread may hold a copy of the write end).
  int report[2];
  if (pipe2(report, O_CLOEXEC | O_NONBLOCK) != 0)
    return Status::Internal(std::string("pipe failed: ") + std::strerror(errno));
  const pid_t self = getpid();
  const pid_t guard = fork();
  if (guard < 0) {
    close(report[0]);
    close(report[1]);
    return Status::Internal(std::string("fork failed: ") + std::strerror(errno));
  }
  if (guard == 0) {
    close(report[0]);
    guard_main(self, report[1], channel_fd, out_fd, err_fd, argv, envp.data(), fsize);
  }
  close(report[1]);
  return Guarded{guard, report[0]};
}

// How the program under a guard that has exited (and been waited for) ended, from the guard's
// report. Closes the report pipe.
StatusOr<Exit> guard_exit(Guarded& g, bool timed_out) {
  Exit e;
  e.timed_out = timed_out;
  GuardMessage m;
  bool have_status = false;
  int status = 0;
  while (read(g.report, &m, sizeof m) == sizeof m) {
    if (m.kind == GuardMessage::kExecFailed) e.exec_errno = m.value;
    if (m.kind == GuardMessage::kStatus) {
      have_status = true;
      status = m.value;
    }
  }
  close(g.report);
  g.report = -1;
  g.guard = -1;
  if (e.timed_out || e.exec_errno != 0) return e;
  if (!have_status) return Status::Internal("the program's guard process ended unexpectedly");
  if (WIFSIGNALED(status)) {
    e.signaled = true;
    e.code = WTERMSIG(status);
  } else {
    e.code = WEXITSTATUS(status);
  }
  return e;
}

// Tells the guard to stop (it kills everything the program started, then exits) and waits for it.
StatusOr<Exit> stop_guarded(Guarded& g, bool timed_out) {
  kill(g.guard, SIGTERM);
  int status;
  while (waitpid(g.guard, &status, 0) < 0 && errno == EINTR) {
  }
  return guard_exit(g, timed_out);
}

// Runs `cmd` through /bin/sh under a guard (above), stdin from /dev/null and stdout/stderr to
// the files open at `out_fd` and `err_fd`; after `timeout_s` the guard is told to stop, and kills
// everything the program started.
StatusOr<Exit> run_program(const std::string& cmd, double timeout_s, int out_fd, int err_fd,
                           const std::string& tmpdir, uint64_t max_file_bytes) {
  StatusOr<Guarded> started = start_guarded(cmd, -1, out_fd, err_fd, tmpdir, max_file_bytes);
  if (!started.ok()) return started.status();
  Guarded g = started.value();
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(std::max(0.0, timeout_s));
  bool timed_out = false;
  int status = 0;
  auto wait_ms = std::chrono::milliseconds(1);
  for (;;) {
    const pid_t r = waitpid(g.guard, &status, WNOHANG);
    if (r == g.guard) break;
    if (r < 0 && errno != EINTR) {
      kill(g.guard, SIGKILL);
      close(g.report);
      return Status::Internal(std::string("waiting for the program failed: ") +
                              std::strerror(errno));
    }
    if (!timed_out && std::chrono::steady_clock::now() >= deadline) {
      timed_out = true;
      kill(g.guard, SIGTERM);  // the guard kills everything, then exits
    }
    std::this_thread::sleep_for(wait_ms);
    wait_ms = std::min(wait_ms * 2, std::chrono::milliseconds(50));
  }
  return guard_exit(g, timed_out);
}

// Whether a regular file under `dir` reached `limit` bytes (what RLIMIT_FSIZE stops).
bool has_file_at_limit(const std::string& dir, uint64_t limit, int depth = 0) {
  struct stat st;
  if (depth > 16 || lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    struct stat f;
    if (lstat(e.path().c_str(), &f) != 0) continue;
    if (S_ISREG(f.st_mode) && static_cast<uint64_t>(f.st_size) >= limit) return true;
    if (S_ISDIR(f.st_mode) && has_file_at_limit(e.path().string(), limit, depth + 1)) return true;
  }
  return false;
}

// Why a program ended badly, after "external program " / "external worker " ("" when it exited
// with code 0): `folder` holds every file it may have written, `limit` their size limit.
std::string ended_badly(const Exit& e, const std::string& folder, uint64_t limit,
                        const std::string& tail) {
  // Killed by SIGXFSZ itself, or a shell reporting that its command was (128 + signal) and a
  // file that reached the limit to show for it: a program's own exit(153) is just a code.
  if ((e.signaled && e.code == SIGXFSZ) ||
      (!e.signaled && e.code == 128 + SIGXFSZ && has_file_at_limit(folder, limit)))
    return "wrote a file larger than the output-size limit of " + std::to_string(limit) +
           " bytes (killed by SIGXFSZ)";
  if (e.signaled)
    return "crashed: killed by signal " + std::to_string(e.code) + " (" + strsignal(e.code) + ")" +
           tail;
  if (e.code != 0)
    return "exited with code " + std::to_string(e.code) +
           (e.code == 127 ? " (command not found?)" : "") + tail;
  return "";
}

std::string exec_failure(int exec_errno) {
  return std::string("cannot start /bin/sh for the program: ") + std::strerror(exec_errno) +
         (exec_errno == E2BIG
              ? " (the --cmd with its paths, or the environment, is too large for one command)"
              : "");
}

// A file of the program's folder for it to write (stdout.txt, stderr.txt), made by deltacheck
// before the program starts and handed to it as a descriptor: a link or FIFO already there is
// refused, not followed. Read-write: deltacheck reads stderr's tail back through it.
StatusOr<cases::UniqueFd> open_output(const cases::SafeDir& dir, std::string_view name, int flags) {
  StatusOr<cases::UniqueFd> f = dir.open_write(name, O_RDWR | O_TRUNC | flags);
  if (!f.ok()) return Status::Internal("cannot make the program's file: " + f.status().message());
  return f;
}

// ": <the last line of stderr>", or "".
std::string said(const cases::UniqueFd& err) {
  const std::string line = last_line(err);
  return line.empty() ? "" : ": " + line;
}

// --- serve mode: one program answers many calls (docs/external.md) --------------------------
//
// deltacheck -> worker, per call:  run<TAB>{in}<TAB>{out}<LF>
// worker -> deltacheck: the handshake, then one answer line per call (backends/serve_protocol.h).

using serve::kHandshake;
using serve::kMaxLine;
// A worker's output-size limit: at least this (a call that needs more starts a new worker).
constexpr uint64_t kServeMinFileLimit = uint64_t{256} << 20;

// One serve-mode program under its guard, the folder its calls use (TMPDIR is its tmp/) and the
// stderr file each call starts afresh (deltacheck holds it: emptied and read through its own
// descriptor, whatever the worker does to the name stderr.txt).
class Worker {
 public:
  ~Worker() { (void)stop(); }
  bool running() const { return g_.guard > 0; }
  uint64_t file_limit() const { return file_limit_; }
  const std::string& folder() const { return dir_->path(); }
  const cases::SafeDir& dir() const { return dir_->dir(); }
  int calls() const { return calls_; }

  // Starts `cmd` and waits up to `timeout_s` for its handshake.
  Status start(const std::string& cmd, double timeout_s, uint64_t file_limit) {
    dir_ = std::make_unique<TempDir>();
    if (dir_->path().empty())
      return Status::Internal(std::string("cannot create a temporary folder: ") +
                              std::strerror(errno));
    if (dir_->path().find_first_of("\t\r\n") != std::string::npos)
      return Status::InvalidArgument(
          "external worker: the temporary folder's path holds a tab or line break, which the "
          "request line cannot carry: set TMPDIR to a plain path");
    const std::string tmp = dir_->path() + "/tmp";
    if (mkdir(tmp.c_str(), 0700) != 0)
      return Status::Internal("cannot create " + tmp + ": " + std::strerror(errno));
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
      return Status::Internal(std::string("socketpair failed: ") + std::strerror(errno));
    StatusOr<cases::UniqueFd> err = open_output(dir_->dir(), "stderr.txt", O_APPEND);
    if (!err.ok()) {
      close(sv[0]);
      close(sv[1]);
      return err.status();
    }
    err_ = err.take();
    StatusOr<Guarded> g = start_guarded(cmd, sv[1], -1, err_.get(), tmp, file_limit);
    close(sv[1]);
    if (!g.ok()) {
      close(sv[0]);
      return g.status();
    }
    g_ = g.value();
    fd_ = sv[0];
    file_limit_ = file_limit;
    buffer_.clear();
    calls_ = 0;
    std::string line;
    const Got got = read_line(deadline(timeout_s), line);
    const Status handshake = got == Got::kLine ? serve::check_handshake(line) : Status::Ok();
    if (got == Got::kLine && handshake.ok()) return Status::Ok();
    std::ostringstream why;
    if (got == Got::kLine)
      why << handshake.message();
    else if (got == Got::kTimeout)
      why << "external worker sent no handshake ('" << kHandshake << "') within " << timeout_s
          << " s";
    else if (got == Got::kTooLong)
      why << "external worker's first line is over " << kMaxLine << " bytes";
    const std::string tail = said(err_);
    StatusOr<Exit> e = stop(got == Got::kTimeout, /*keep_folder=*/true);
    if (got == Got::kEnded) {
      const bool exec_failed = e.ok() && e.value().exec_errno != 0;
      const std::string how = e.ok() ? ended_badly(e.value(), folder(), file_limit, tail) : "";
      dir_.reset();
      if (exec_failed) return Status::Internal(exec_failure(e.value().exec_errno));
      return Status::Internal("external worker ended before its handshake: " +
                              (how.empty() ? "exited with code 0" + tail : how));
    }
    dir_.reset();
    return Status::Internal(why.str() + " (killed, with every process it started)");
  }

  // Before a call: a worker that ended after its last answer is cleared away (the next call
  // starts a new one); one that wrote unasked is stopped and this call is an error (its channel
  // cannot be trusted: the bytes may be an answer to the wrong request).
  Status check_idle() {
    pollfd p{fd_, POLLIN, 0};
    if (!buffer_.empty() || poll(&p, 1, 0) == 1) {
      char buf[128];
      const ssize_t n = recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) buffer_.append(buf, static_cast<size_t>(n));
      if (!buffer_.empty()) {
        const std::string unasked(buffer_.pending().substr(0, 60));
        (void)stop();
        return Status::Internal(
            "external worker wrote to stdout between calls ('" +
            cases::printable_line(unasked, 60) +
            "'): stdout is the protocol channel, log to stderr (killed; the next call starts a "
            "new one)");
      }
      if (n == 0) (void)stop();  // end of file: it has gone
    } else {
      (void)ended();
    }
    return Status::Ok();
  }

  // Whether the worker is not running or has ended by itself (then cleared away).
  bool ended() {
    int st = 0;
    if (running() && waitpid(g_.guard, &st, WNOHANG) == g_.guard) {
      reaped_ = true;
      (void)stop();
    }
    return !running();
  }

  // Sends one request and waits up to `timeout_s` for the answer line; any failure stops the
  // worker and comes back as the call's error.
  StatusOr<std::string> call(const std::string& request, double timeout_s) {
    ++calls_;
    // Stderr per call: the file deltacheck made, appended from offset 0 again (never the name:
    // the worker may have put a link to the user's files there).
    (void)!ftruncate(err_.get(), 0);
    const std::string line = request + "\n";
    size_t sent = 0;
    while (sent < line.size()) {
      const ssize_t n = send(fd_, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
      if (n > 0)
        sent += static_cast<size_t>(n);
      else if (n < 0 && errno == EINTR)
        continue;
      else
        break;  // EPIPE: it has gone; the read below says how
    }
    std::string answer;
    const Got got = read_line(deadline(timeout_s), answer);
    if (got == Got::kLine) return answer;
    const std::string tail = said(err_);
    StatusOr<Exit> e = stop(got == Got::kTimeout, /*keep_folder=*/true);
    std::ostringstream why;
    if (got == Got::kTimeout) {
      why << "external worker timed out after " << timeout_s_str(timeout_s)
          << " s (killed, with every process it started; the next call starts a new one)";
    } else if (got == Got::kTooLong) {
      why << "external worker answered garbage: a line over " << kMaxLine
          << " bytes (killed; the next call starts a new one)";
    } else {
      const std::string how = e.ok() ? ended_badly(e.value(), folder(), file_limit_, tail) : "";
      why << "external worker "
          << (!how.empty() ? how
              : e.ok()     ? "exited with code 0 without answering" + tail
                           : "closed its stdout without answering (killed)" + tail)
          << " (the next call starts a new one)";
    }
    dir_.reset();
    return Status::Internal(why.str());
  }

  // Kills the worker with everything it started and removes its folder (unless kept, for a
  // message); how it ended, as the guard saw it (an error when it was not running).
  StatusOr<Exit> stop(bool timed_out = false, bool keep_folder = false) {
    if (!running()) return Status::Internal("not running");
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    StatusOr<Exit> e = reaped_ ? guard_exit(g_, timed_out) : stop_guarded(g_, timed_out);
    reaped_ = false;
    g_ = Guarded{};
    err_ = cases::UniqueFd();
    if (!keep_folder) dir_.reset();
    return e;
  }

 private:
  enum class Got { kLine, kTimeout, kEnded, kTooLong };
  using Clock = std::chrono::steady_clock;

  static Clock::time_point deadline(double timeout_s) {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(std::max(0.0, timeout_s)));
  }
  static std::string timeout_s_str(double s) {
    std::ostringstream o;
    o << s;
    return o.str();
  }

  // One line from the worker (without its LF, and a CR before it), or why none came: the
  // deadline passed, the worker ended (its guard exited, or its end of the channel closed), or
  // it sent more than kMaxLine bytes without a line break.
  Got read_line(Clock::time_point until, std::string& line) {
    for (;;) {
      const serve::LineBuffer::Next next = buffer_.next(line);
      if (next == serve::LineBuffer::Next::kLine) return Got::kLine;
      if (next == serve::LineBuffer::Next::kTooLong) return Got::kTooLong;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      if (left.count() <= 0) return Got::kTimeout;
      // A prompt answer wakes poll at once; the 50 ms steps only look after the guard.
      pollfd p{fd_, POLLIN, 0};
      const int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 50)));
      if (r > 0) {
        char buf[4096];
        const ssize_t n = recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) {
          buffer_.append(buf, static_cast<size_t>(n));
          continue;
        }
        if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
          // Its end of the channel closed: it is exiting (then its guard reports how it ended
          // and exits within moments) or closed its stdout (then it is killed).
          for (int i = 0; i < 200 && !reaped_; ++i) {
            int st = 0;
            if (waitpid(g_.guard, &st, WNOHANG) == g_.guard)
              reaped_ = true;
            else
              std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          return Got::kEnded;
        }
        continue;
      }
      if (r < 0 && errno != EINTR) return Got::kEnded;
      int st = 0;
      if (waitpid(g_.guard, &st, WNOHANG) == g_.guard) {
        reaped_ = true;
        // It may have answered just before it went.
        char buf[4096];
        ssize_t n;
        while ((n = recv(fd_, buf, sizeof buf, MSG_DONTWAIT)) > 0)
          buffer_.append(buf, static_cast<size_t>(n));
        if (buffer_.has_line()) continue;
        return Got::kEnded;
      }
    }
  }

  std::unique_ptr<TempDir> dir_;
  cases::UniqueFd err_;  // stderr.txt as made, read and emptied through this descriptor
  Guarded g_;
  bool reaped_ = false;  // the guard has been waited for (read_line saw it exit)
  int fd_ = -1;
  serve::LineBuffer buffer_;
  uint64_t file_limit_ = 0;
  int calls_ = 0;
};

class ExternalBackend : public Backend {
 public:
  explicit ExternalBackend(const BackendOptions& o)
      : cmd_(o.cmd),
        serve_(o.serve),
        timeout_s_(o.timeout_s),
        profile_(o.profile),
        deterministic_(o.deterministic),
        batch_invariant_(o.batch_invariant) {}

  std::string name() const override { return "external"; }
  std::string description() const override {
    if (!serve_.empty())
      return "a program serving every call of a run: --serve 'PROGRAM' [--timeout S] "
             "(protocol: docs/external.md)";
    return "a program run once per case: --cmd 'PROGRAM {in} {out}' [--timeout S] "
           "(protocol: golden/README.md)";
  }
  // Nothing is known about the program unless it was declared (--deterministic, --profile or
  // its {out} file's profile attribute): the repeat probe measures whether its bits repeat.
  bool deterministic() const override { return deterministic_; }
  MatmulPrecision matmul_precision() const override { return precision_profile().matmul; }
  PrecisionProfile precision_profile() const override {
    std::lock_guard<std::mutex> lock(profile_mu_);
    return declared_ ? merged(profile_, *declared_) : profile_;
  }
  bool batch_invariant(const cases::Case&) const override { return batch_invariant_; }
  Support supports(const cases::Case& c) const override { return Support::Yes(); }

  Status run(const cases::Case& c, const cases::TensorMap& inputs,
             cases::TensorMap& outputs) override {
    // The output-size limit: room for the outputs several times over, plus HDF5's metadata.
    uint64_t out_bytes = 0;
    for (const cases::Tensor& t : outputs.all()) out_bytes += t.nbytes();
    const uint64_t max_file = 4 * out_bytes + (uint64_t{64} << 20);
    if (!serve_.empty()) {
      if (!cmd_.empty())
        return Status::InvalidArgument("external backend: give --cmd or --serve, not both");
      if (serve_.find("{in}") != std::string::npos || serve_.find("{out}") != std::string::npos)
        return Status::InvalidArgument(
            "external backend: --serve takes the program without {in} and {out} (each call "
            "names them on its stdin, docs/external.md)");
      Slot slot(*this);
      return run_served(slot.worker(), c, inputs, outputs, max_file);
    }
    if (cmd_.find("{in}") == std::string::npos || cmd_.find("{out}") == std::string::npos)
      return Status::InvalidArgument("external backend: --cmd must contain {in} and {out}");
    TempDir dir;
    if (dir.path().empty())
      return Status::Internal(std::string("cannot create a temporary folder: ") +
                              std::strerror(errno));
    const std::string in = dir.path() + "/in.h5", out = dir.path() + "/out.h5";
    if (Status st = write_in(dir.dir(), "in.h5", c, inputs, outputs); !st.ok()) return st;
    const std::string cmd =
        substitute(substitute(cmd_, "{in}", shell_quote(in)), "{out}", shell_quote(out));
    StatusOr<cases::UniqueFd> out_file = open_output(dir.dir(), "stdout.txt", 0);
    if (!out_file.ok()) return out_file.status();
    StatusOr<cases::UniqueFd> err = open_output(dir.dir(), "stderr.txt", 0);
    if (!err.ok()) return err.status();
    StatusOr<Exit> e = run_program(cmd, timeout_s_, out_file.value().get(), err.value().get(),
                                   dir.path(), max_file);
    if (!e.ok()) return e.status();
    if (e.value().exec_errno != 0) return Status::Internal(exec_failure(e.value().exec_errno));
    if (e.value().timed_out) {
      std::ostringstream s;
      s << "external program timed out after " << timeout_s_
        << " s (killed, with every process it started)";
      return Status::Internal(s.str());
    }
    if (const std::string how = ended_badly(e.value(), dir.path(), max_file, said(err.value()));
        !how.empty())
      return Status::Internal("external program " + how);
    return read_out("external program", dir.dir(), max_file, outputs);
  }

 private:
  // The calling thread's worker, marked busy while the slot lives. Workers are per thread: a
  // guard dies with the thread that started it (PR_SET_PDEATHSIG), and the runner's threads
  // live for a whole run. Idle workers that have ended (those of threads that are gone) are
  // cleared away when a thread takes its first slot.
  struct Entry {
    std::unique_ptr<Worker> worker = std::make_unique<Worker>();
    bool busy = false;
  };
  class Slot {
   public:
    explicit Slot(ExternalBackend& b) : b_(b) {
      std::lock_guard<std::mutex> lock(b_.mu_);
      auto [it, fresh] = b_.workers_.try_emplace(std::this_thread::get_id());
      if (fresh)
        for (auto other = b_.workers_.begin(); other != b_.workers_.end();)
          other = other != it && !other->second.busy && other->second.worker->ended()
                      ? b_.workers_.erase(other)
                      : std::next(other);
      it->second.busy = true;
      entry_ = &it->second;
    }
    ~Slot() {
      std::lock_guard<std::mutex> lock(b_.mu_);
      entry_->busy = false;
    }
    Worker& worker() { return *entry_->worker; }

   private:
    ExternalBackend& b_;
    Entry* entry_;
  };

  Status run_served(Worker& w, const cases::Case& c, const cases::TensorMap& inputs,
                    cases::TensorMap& outputs, uint64_t max_file) {
    if (w.running())
      if (Status st = w.check_idle(); !st.ok()) return st;
    if (w.running() && w.file_limit() < max_file) (void)w.stop();  // restarted with room
    if (!w.running())
      if (Status st = w.start(serve_, timeout_s_, std::max(max_file, kServeMinFileLimit)); !st.ok())
        return st;
    // The call's files, in a folder of their own made and reached through the worker's folder
    // held open, removed after the call with SafeDir::remove_tree: the worker is still running
    // and may have put anything there, or swap anything while it is removed.
    const std::string name = "call-" + std::to_string(w.calls() + 1);
    if (mkdirat(w.dir().fd(), name.c_str(), 0700) != 0)
      return Status::Internal("cannot create " + w.dir().path_of(name) + ": " +
                              std::strerror(errno));
    struct Remove {
      const cases::SafeDir in;  // a copy: w.stop() below may end the worker's folder first
      const std::string& name;
      ~Remove() { (void)in.remove_tree(name); }
    } remove{w.dir(), name};
    StatusOr<cases::SafeDir> dir = w.dir().sub(name, false);
    if (!dir.ok())
      return Status::Internal("cannot open the call's folder: " + dir.status().message());
    const std::string in = dir.value().path_of("in.h5"), out = dir.value().path_of("out.h5");
    if (Status st = write_in(dir.value(), "in.h5", c, inputs, outputs); !st.ok()) return st;
    StatusOr<std::string> answer = w.call("run\t" + in + "\t" + out, timeout_s_);
    if (!answer.ok()) return answer.status();
    StatusOr<serve::Answer> parsed = serve::parse_answer(answer.value());
    if (!parsed.ok()) {
      (void)w.stop();
      return Status::Internal("external worker answered garbage: " + parsed.status().message() +
                              " (killed; the next call starts a new one)");
    }
    const std::string& reason = parsed.value().reason;
    switch (parsed.value().kind) {
      case serve::Answer::Kind::kOk:
        return read_out("external worker", dir.value(), max_file, outputs);
      case serve::Answer::Kind::kError:
        return Status::Internal("external worker: " + (reason.empty() ? "error" : reason));
      case serve::Answer::Kind::kUnsupported:
        return Status::Unsupported(reason.empty() ? "declined by the external worker" : reason);
    }
    return Status::Internal("external worker: unknown answer");
  }

  static Status write_in(const cases::SafeDir& dir, const std::string& name, const cases::Case& c,
                         const cases::TensorMap& inputs, const cases::TensorMap& outputs) {
    std::vector<OutputSpec> specs;
    for (const cases::Tensor& t : outputs.all()) specs.push_back({t.name(), t.dtype(), t.shape()});
    if (Status st = golden::write_input_file(dir, name, c, inputs, specs); !st.ok())
      return Status::Internal("cannot write {in}: " + st.message());
    return Status::Ok();
  }

  // Checks {out} (out.h5 in the case's folder `dir`, held open) and reads the outputs from it
  // (`who`: "external program" or "external worker").
  Status read_out(const std::string& who, const cases::SafeDir& dir, uint64_t max_file,
                  cases::TensorMap& outputs) {
    // {out} must be a regular file (a FIFO or a link to a device would block or never end)
    // within the limit before HDF5 opens it; HDF5 then reads the descriptor that was checked
    // (/proc/self/fd/N), not the name, which a worker still running could point elsewhere.
    std::string out = dir.path_of("out.h5");  // missing: the reader says so
    struct stat ost {};
    StatusOr<cases::UniqueFd> opened = dir.open_read("out.h5", &ost, /*hard_links=*/true);
    cases::UniqueFd held;
    if (opened.ok()) {
      if (static_cast<uint64_t>(ost.st_size) >= max_file)
        return Status::InvalidArgument(who + "'s {out} is " + std::to_string(ost.st_size) +
                                       " bytes, at the output-size limit of " +
                                       std::to_string(max_file));
      held = opened.take();
      out = "/proc/self/fd/" + std::to_string(held.get());
    } else if (const std::string kind = cases::not_regular_kind(dir, "out.h5");
               !kind.empty() && kind != "a hard link") {
      return Status::InvalidArgument(who + "'s {out} is not a regular file (" + kind + ")");
    } else if (!cases::is_not_found(opened.status())) {
      return Status::InvalidArgument(who + "'s {out} cannot be read: " + opened.status().message());
    }
    // Read in a child process too: the HDF5 library can hang or crash on a crafted file, and
    // the program's output is as untrusted as the program.
    // The program's profile declaration (a root attribute) comes back in a byte tensor added
    // to the outputs for the read and taken off after it.
    outputs.add(cases::Tensor("{out} profile", cases::DType::kU8, {256}));
    struct TakeOff {
      cases::TensorMap& m;
      ~TakeOff() { m.all().pop_back(); }
    } take_off{outputs};
    std::memset(outputs.all().back().data(), 0, 256);
    Status st = run_isolated(
        [&](cases::TensorMap& into) {
          return golden::read_output_file(out, into, &into.all().back());
        },
        outputs, {timeout_s_});
    if (st.code() == StatusCode::kInternal)  // the reader's child crashed or hung
      return Status::Internal("reading the " + who + "'s {out} " + st.message());
    if (st.code() == StatusCode::kUnsupported) return st;
    if (!st.ok()) return Status::InvalidArgument(who + "'s outputs: " + st.message());
    const std::string declared(static_cast<const char*>(outputs.all().back().data()));
    if (!declared.empty()) {
      PrecisionProfile p;
      try {
        p = profile_from_name(declared);
      } catch (const std::invalid_argument& e) {
        return Status::InvalidArgument(who + "'s {out} attribute profile: " + e.what());
      }
      std::lock_guard<std::mutex> lock(profile_mu_);
      if (declared_ && *declared_ != p)
        return Status::InvalidArgument(who + "'s {out} declares profile '" + profile_name(p) +
                                       "' after '" + profile_name(*declared_) +
                                       "': one profile per program");
      declared_ = p;
    }
    return Status::Ok();
  }

  std::string cmd_, serve_;
  double timeout_s_;
  PrecisionProfile profile_;
  // What the program declared in its {out} files (added to --profile's choices).
  mutable std::mutex profile_mu_;
  std::optional<PrecisionProfile> declared_;
  bool deterministic_;
  bool batch_invariant_;
  std::mutex mu_;
  std::map<std::thread::id, Entry> workers_;
};

}  // namespace

std::unique_ptr<Backend> make_external_backend(const BackendOptions& options) {
  return std::make_unique<ExternalBackend>(options);
}

}  // namespace deltacheck::backends
