// Backend calls in forked children with a timeout (harness/isolation.h).
#include "harness/isolation.h"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <new>
#include <stdexcept>
#include <thread>

#include "cases/fork_guard.h"

namespace deltacheck::harness {
namespace {

// What the child reports at the start of the shared mapping.
struct Report {
  enum Kind : int32_t { kNone = 0, kStatus = 1, kThrew = 2 };
  int32_t kind = kNone;
  int32_t code = 0;  // StatusCode for kStatus
  char message[4088] = {};
};
constexpr size_t kHeader = 4096;
static_assert(sizeof(Report) <= kHeader, "the report must fit its header");

// A MAP_SHARED | MAP_ANONYMOUS region: the one memory parent and child both see after fork().
class SharedMapping {
 public:
  explicit SharedMapping(size_t bytes) : size_(bytes) {
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
  }
  ~SharedMapping() {
    if (data_) munmap(data_, size_);
  }
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;
  uint8_t* data() const { return data_; }

 private:
  size_t size_;
  uint8_t* data_;
};

bool g_in_child = false;

// A tensor's whole storage: guard band, body, guard band (and the spare byte).
uint8_t* storage_begin(cases::Tensor& t) {
  return static_cast<uint8_t*>(t.data()) - t.guard_bytes();
}

void put_message(Report& r, const std::string& m) {
  const size_t n = std::min(m.size(), sizeof(r.message) - 1);
  std::memcpy(r.message, m.data(), n);
  r.message[n] = '\0';
}

// In the child: run, copy the outputs into the mapping, report. Never returns; _exit() skips
// the parent's atexit handlers and static destructors, which are not the child's to run.
[[noreturn]] void child_main(const std::function<Status(cases::TensorMap&)>& fn,
                             cases::TensorMap& outputs, uint8_t* shared) {
  // Die with deltacheck (an interrupted run must not leave a hanging backend behind).
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  g_in_child = true;
  Report& report = *reinterpret_cast<Report*>(shared);
  try {
    const Status st = fn(outputs);
    size_t at = kHeader;
    for (cases::Tensor& t : outputs.all()) {
      std::memcpy(shared + at, storage_begin(t), t.storage().size());
      at += t.storage().size();
    }
    report.code = static_cast<int32_t>(st.code());
    put_message(report, st.message());
    report.kind = Report::kStatus;
  } catch (const std::exception& e) {
    put_message(report, e.what());
    report.kind = Report::kThrew;
  } catch (...) {
    put_message(report, "a non-standard exception");
    report.kind = Report::kThrew;
  }
  _exit(0);
}

std::string signal_text(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return fmt::format("SIG{} ({})", abbrev ? abbrev : std::to_string(sig).c_str(), strsignal(sig));
}

}  // namespace

Status run_isolated(const std::function<Status(cases::TensorMap&)>& fn, cases::TensorMap& outputs,
                    const IsolationOptions& options) {
  size_t bytes = kHeader;
  for (const cases::Tensor& t : outputs.all()) bytes += t.storage().size();
  SharedMapping shared(bytes);
  if (!shared.data())
    return Status::Internal(fmt::format("isolation: cannot map {} bytes of shared memory: {}",
                                        bytes, std::strerror(errno)));
  new (shared.data()) Report();

  const pid_t parent = getpid();
  pid_t pid;
  {
    // No other thread may be inside HDF5 or the storage pool at the fork: the child uses both.
    cases::ForkSection fork_section;
    pid = fork();
    if (pid == 0) {
      fork_section.in_child();
      if (getppid() != parent) _exit(1);  // the parent died before PR_SET_PDEATHSIG could see it
      child_main(fn, outputs, shared.data());
    }
  }
  if (pid < 0) return Status::Internal(std::string("isolation: fork failed: ") + strerror(errno));

  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(std::max(0.0, options.timeout_s));
  auto pause = std::chrono::microseconds(50);
  // Woken by the child's exit where the kernel can say so (a pidfd, Linux 5.3): a child that
  // takes 3 ms costs 3 ms, not the next step of the polling below (up to twice as long).
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  struct ClosePidfd {
    int fd;
    ~ClosePidfd() {
      if (fd >= 0) close(fd);
    }
  } close_pidfd{pidfd};
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      return Status::Internal(std::string("isolation: waiting for the child failed: ") +
                              std::strerror(errno));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid, SIGKILL);
      while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
      return Status::Internal(fmt::format("timed out after {:g} s (killed)", options.timeout_s));
    }
    if (pidfd >= 0) {
      pollfd p{pidfd, POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left.count() + 1, 1, 100)));
      continue;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(20000));
  }

  const Report& report = *reinterpret_cast<const Report*>(shared.data());
  if (WIFSIGNALED(status)) return Status::Internal("crashed with " + signal_text(WTERMSIG(status)));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || report.kind == Report::kNone)
    return Status::Internal(
        fmt::format("exited with code {} before returning (an exit() call, or a sanitizer's "
                    "report on stderr)",
                    WIFEXITED(status) ? WEXITSTATUS(status) : -1));
  const std::string message(report.message);
  if (report.kind == Report::kThrew) throw std::runtime_error(message);

  size_t at = kHeader;
  for (cases::Tensor& t : outputs.all()) {
    std::memcpy(storage_begin(t), shared.data() + at, t.storage().size());
    at += t.storage().size();
  }
  switch (static_cast<StatusCode>(report.code)) {
    case StatusCode::kOk:
      return Status::Ok();
    case StatusCode::kInvalidArgument:
      return Status::InvalidArgument(message);
    case StatusCode::kUnsupported:
      return Status::Unsupported(message);
    case StatusCode::kInternal:
      return Status::Internal(message);
  }
  return Status::Internal(message);
}

bool in_isolated_child() { return g_in_child; }

namespace {

class IsolatedBackend : public Backend {
 public:
  IsolatedBackend(std::unique_ptr<Backend> inner, const IsolationOptions& o)
      : inner_(std::move(inner)), options_(o) {}

  std::string name() const override { return inner_->name(); }
  std::string description() const override {
    return inner_->description() + " (isolated: each call in a child process)";
  }
  bool deliberately_wrong() const override { return inner_->deliberately_wrong(); }
  bool deliberately_correct() const override { return inner_->deliberately_correct(); }
  bool deterministic() const override { return inner_->deterministic(); }
  bool batch_invariant(const cases::Case& c) const override { return inner_->batch_invariant(c); }
  MatmulPrecision matmul_precision() const override { return inner_->matmul_precision(); }
  PrecisionProfile precision_profile() const override { return inner_->precision_profile(); }
  Support supports(const cases::Case& c) const override { return inner_->supports(c); }
  Status run(const cases::Case& c, const cases::TensorMap& inputs,
             cases::TensorMap& outputs) override {
    return run_isolated([&](cases::TensorMap& out) { return inner_->run(c, inputs, out); }, outputs,
                        options_);
  }
  // A driven call (a serving scenario's) goes to the inner backend's run_driven, not its run: a
  // runtime's own handling of the call is what is judged. Where that keeps memory across calls it
  // runs here (a child's memory dies with it); otherwise in a child like any call.
  Status run_driven(const ops::DrivenCall& call, DriveMemory& memory, const cases::Case& c,
                    const cases::TensorMap& inputs, cases::TensorMap& outputs) override {
    if (inner_->keeps_call_memory()) return inner_->run_driven(call, memory, c, inputs, outputs);
    return run_isolated(
        [&](cases::TensorMap& out) { return inner_->run_driven(call, memory, c, inputs, out); },
        outputs, options_);
  }
  bool keeps_call_memory() const override { return inner_->keeps_call_memory(); }

 private:
  std::unique_ptr<Backend> inner_;
  IsolationOptions options_;
};

}  // namespace

std::unique_ptr<Backend> make_isolated_backend(std::unique_ptr<Backend> inner,
                                               const IsolationOptions& options) {
  return std::make_unique<IsolatedBackend>(std::move(inner), options);
}

}  // namespace deltacheck::harness
