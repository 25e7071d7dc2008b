// The one way deltacheck reaches files in folders a candidate can write (cases/safe_file.h).
#include "cases/safe_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

namespace deltacheck::cases {
namespace {

constexpr std::string_view kNotFoundSuffix = ": no such file";

std::string errno_text(int e) { return std::strerror(e); }

// What a non-regular file is, in words; empty for a regular file with one name (or any number of
// names, with `hard_links`).
std::string kind_of(const struct stat& st, bool hard_links = false) {
  if (S_ISLNK(st.st_mode)) return "a symbolic link";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISDIR(st.st_mode)) return "a folder";
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  if (st.st_nlink > 1 && !hard_links) return "a hard link";
  return "";
}

Status not_regular(const std::string& path, const std::string& kind) {
  if (kind == "a hard link")
    return Status::InvalidArgument(path +
                                   ": has more than one name (a hard link, perhaps to a file "
                                   "outside), not read or written");
  return Status::InvalidArgument(path + ": " + kind + ", not a regular file");
}

// A name of one component: openat() with it cannot leave the folder.
Status check_name(const std::string& dir, std::string_view name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos ||
      name.find('\0') != std::string_view::npos)
    return Status::InvalidArgument(dir + ": '" + std::string(name) + "' is not a single file name");
  return Status::Ok();
}

// mkdir -p, each missing folder made 0700.
Status make_folders(const std::string& path) {
  for (size_t at = 1; at <= path.size(); ++at) {
    if (at != path.size() && path[at] != '/') continue;
    const std::string prefix = path.substr(0, at);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST)
      return Status::InvalidArgument(prefix + ": cannot make the folder: " + errno_text(errno));
  }
  return Status::Ok();
}

// --- removing a tree a candidate can write ------------------------------------------------------

// Deeper folders are moved up into the top folder: a walk holds at most this many descriptors.
constexpr int kMaxTreeDepth = 32;
// Passes over one folder (each reads up to kNamesPerPass names, then removes them) before a folder
// that a live writer keeps filling is given up.
constexpr int kMaxPasses = 1000;
constexpr size_t kNamesPerPass = 10000;

struct TreeWalk {
  int top = -1;   // the folder being emptied: deep folders are moved up into it
  dev_t dev = 0;  // its file system: another one mounted below is not entered
  uint64_t moved = 0;
  Status error = Status::Ok();  // the first failure, for the message
  void fail(const std::string& what) {
    if (error.ok()) error = Status::InvalidArgument(what);
  }
};

// Up to `max` names in the folder open at `fd` (without "." and ".."), read through a descriptor
// of its own (the offset of `fd` is left alone).
std::vector<std::string> names_in(int fd, size_t max = kNamesPerPass) {
  std::vector<std::string> names;
  const int own = ::openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (own < 0) return names;
  DIR* d = ::fdopendir(own);
  if (!d) {
    ::close(own);
    return names;
  }
  while (const dirent* e = ::readdir(d)) {
    const std::string_view n = e->d_name;
    if (n == "." || n == "..") continue;
    names.emplace_back(n);
    if (names.size() >= max) break;
  }
  ::closedir(d);
  return names;
}

// Opens folder `name` of the folder open at `parent` for emptying, never through a link, and makes
// it 0700 on the descriptor (a candidate may have made it chmod 000 or read-only). A folder that
// cannot be read is opened O_PATH (no read permission needed) and its mode changed on that
// descriptor through /proc/self/fd/N (an O_PATH descriptor takes no fchmod; the magic link is the
// held inode, no path a candidate can change), then reopened through it. -1 with errno on failure.
int open_for_removal(int parent, const char* name) {
  int fd = ::openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0 && errno == EACCES) {
    UniqueFd held(::openat(parent, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!held) return -1;
    const std::string proc = "/proc/self/fd/" + std::to_string(held.get());
    if (::chmod(proc.c_str(), 0700) != 0) return -1;
    fd = ::open(proc.c_str(), O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);
  }
  if (fd < 0) return -1;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && (st.st_mode & 07777) != 0700) (void)::fchmod(fd, 0700);
  return fd;
}

Status empty_folder(int fd, const std::string& path, int depth, TreeWalk& w);

// Removes entry `name` of the folder open at `parent` (`path`, for messages) with everything in
// it. True when something was removed or moved (progress); failures go to w.fail().
bool remove_entry(int parent, const std::string& path, const std::string& name, int depth,
                  TreeWalk& w) {
  const std::string at = path + "/" + name;
  // Anything but a folder goes with its name: unlinkat never follows a link.
  if (::unlinkat(parent, name.c_str(), 0) == 0) return true;
  if (errno == ENOENT) return true;  // gone meanwhile
  const int unlink_errno = errno;
  if (unlink_errno != EISDIR && unlink_errno != EPERM) {  // EPERM: POSIX's word for a folder
    w.fail(at + ": cannot remove: " + errno_text(unlink_errno));
    return false;
  }
  UniqueFd sub(open_for_removal(parent, name.c_str()));
  if (!sub) {
    if (errno == ENOENT) return true;
    // ENOTDIR or ELOOP after EISDIR: swapped for a file or link since the unlinkat, which the
    // next pass removes; after EPERM: a file that may not be removed.
    if ((errno == ENOTDIR || errno == ELOOP) && unlink_errno == EISDIR) return true;
    if (errno == ENOTDIR || errno == ELOOP) {
      w.fail(at + ": cannot remove: " + errno_text(unlink_errno));
      return false;
    }
    w.fail(at + ": cannot open the folder: " + errno_text(errno));
    return false;
  }
  struct stat st {};
  if (::fstat(sub.get(), &st) != 0 || st.st_dev != w.dev) {
    w.fail(at + ": another file system is mounted there: not entered");
    return false;
  }
  if (depth >= kMaxTreeDepth) {
    // Moved up into the top folder (renameat between held descriptors, the tree is never left),
    // emptied in a later pass over it.
    for (int tries = 0; tries < 100; ++tries) {
      const std::string up = ".deltacheck-deep-" + std::to_string(w.moved++);
      if (::renameat2(parent, name.c_str(), w.top, up.c_str(), RENAME_NOREPLACE) == 0) return true;
      if (errno != EEXIST) break;
    }
    w.fail(at + ": cannot move the deep folder up: " + errno_text(errno));
    return false;
  }
  (void)empty_folder(sub.get(), at, depth + 1, w);
  sub = UniqueFd();
  if (::unlinkat(parent, name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) return true;
  // ENOTDIR: swapped for a link or file meanwhile, which the next pass unlinks; ENOTEMPTY:
  // refilled, the next pass empties it again.
  if (errno == ENOTDIR) return true;
  if (errno != ENOTEMPTY && errno != EEXIST) w.fail(at + ": cannot remove: " + errno_text(errno));
  return false;
}

// Removes everything in the folder open at `fd`, pass after pass until it is empty, a pass makes
// no progress, or kMaxPasses.
Status empty_folder(int fd, const std::string& path, int depth, TreeWalk& w) {
  for (int pass = 0; pass < kMaxPasses; ++pass) {
    const std::vector<std::string> names = names_in(fd);
    if (names.empty()) return Status::Ok();
    bool progress = false;
    for (const std::string& n : names) progress = remove_entry(fd, path, n, depth, w) || progress;
    if (!progress) break;
  }
  if (names_in(fd).empty()) return Status::Ok();
  w.fail(path +
         ": still not empty (something keeps writing it, or a file in it cannot be removed)");
  return w.error;
}

Status empty_tree(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::InvalidArgument(path + ": " + errno_text(errno));
  if ((st.st_mode & 07777) != 0700) (void)::fchmod(fd, 0700);
  TreeWalk w;
  w.top = fd;
  w.dev = st.st_dev;
  (void)empty_folder(fd, path, 0, w);
  if (!w.error.ok() && !names_in(fd).empty()) return w.error;
  return Status::Ok();
}

// A name for a temporary file: 6 letters or digits from the clock, the PID and a counter (not
// secret: a name already taken, or planted, is skipped by O_EXCL).
std::string temp_suffix(uint64_t attempt) {
  static std::atomic<uint64_t> counter{0};
  struct timespec ts {};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t x = static_cast<uint64_t>(ts.tv_nsec) ^ (static_cast<uint64_t>(ts.tv_sec) << 30) ^
               (static_cast<uint64_t>(::getpid()) << 40) ^ (counter++ * 0x9e3779b97f4a7c15ULL) ^
               attempt;
  // splitmix64's finalizer
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  x ^= x >> 31;
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string s(6, 'x');
  for (char& ch : s) {
    ch = kAlphabet[x % 62];
    x /= 62;
  }
  return s;
}

}  // namespace

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

StatusOr<SafeDir> SafeDir::open(const std::string& path, bool create) {
  if (path.empty()) return Status::InvalidArgument("an empty folder name");
  if (create) {
    Status made = make_folders(path);
    if (!made.ok()) return made;
  }
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return Status::InvalidArgument(path + ": cannot open the folder: " + errno_text(errno));
  return SafeDir(std::make_shared<const UniqueFd>(std::move(fd)), path);
}

std::string SafeDir::path_of(std::string_view name) const {
  return path_ + "/" + std::string(name);
}

StatusOr<SafeDir> SafeDir::sub(std::string_view name, bool create) const {
  Status named = check_name(path_, name);
  if (!named.ok()) return named;
  const std::string n(name), path = path_of(name);
  if (create && ::mkdirat(fd(), n.c_str(), 0700) != 0 && errno != EEXIST)
    return Status::InvalidArgument(path + ": cannot make the folder: " + errno_text(errno));
  UniqueFd sub(::openat(fd(), n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!sub) {
    const int e = errno;
    struct stat st {};
    if (::fstatat(fd(), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode))
      return Status::InvalidArgument(path + ": " + kind_of(st) + ", not a folder");
    return Status::InvalidArgument(path + ": cannot open the folder: " + errno_text(e));
  }
  return SafeDir(std::make_shared<const UniqueFd>(std::move(sub)), path);
}

// Opens `name` for reading when it is a regular file with one name. The type is looked at before
// the open (so a device is never opened: opening some has effects) and again on the descriptor
// (what was opened is what is read, whatever was swapped in between).
StatusOr<UniqueFd> SafeDir::open_read(std::string_view name, struct stat* given,
                                      bool hard_links) const {
  struct stat own {};
  struct stat* st = given ? given : &own;
  Status named = check_name(path_, name);
  if (!named.ok()) return named;
  const std::string n(name), path = path_of(name);
  if (::fstatat(fd(), n.c_str(), st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return Status::InvalidArgument(path + std::string(kNotFoundSuffix));
    return Status::InvalidArgument(path + ": " + errno_text(errno));
  }
  std::string kind = kind_of(*st, hard_links);
  if (!kind.empty()) return not_regular(path, kind);
  UniqueFd f(::openat(fd(), n.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!f) {
    if (errno == ENOENT) return Status::InvalidArgument(path + std::string(kNotFoundSuffix));
    if (errno == ELOOP) return not_regular(path, "a symbolic link");
    return Status::InvalidArgument(path + ": " + errno_text(errno));
  }
  if (::fstat(f.get(), st) != 0) return Status::Internal(path + ": " + errno_text(errno));
  kind = kind_of(*st, hard_links);
  if (!kind.empty()) return not_regular(path, kind);
  return f;
}

StatusOr<std::string> SafeDir::read(std::string_view name, size_t max_bytes) const {
  struct stat st {};
  StatusOr<UniqueFd> f = open_read(name, &st);
  if (!f.ok()) return f.status();
  const std::string path = path_of(name);
  const auto size = static_cast<unsigned long long>(st.st_size);
  if (size > max_bytes)
    return Status::InvalidArgument(path + ": " + std::to_string(size) +
                                   " bytes, larger than the limit of " + std::to_string(max_bytes));
  std::string text(static_cast<size_t>(size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(f.value().get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::InvalidArgument(path + ": " + errno_text(errno));
    if (n == 0) break;  // shrank meanwhile: what is there
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  char more = 0;
  ssize_t n = 0;
  do n = ::read(f.value().get(), &more, 1);
  while (n < 0 && errno == EINTR);
  if (n > 0) return Status::InvalidArgument(path + ": grew while it was read, not read");
  return text;
}

StatusOr<std::string> SafeDir::read_tail(std::string_view name, size_t max_bytes) const {
  StatusOr<UniqueFd> f = open_read(name);
  if (!f.ok()) return f.status();
  StatusOr<std::string> tail = cases::read_tail(f.value().get(), max_bytes);
  if (!tail.ok()) return Status::InvalidArgument(path_of(name) + ": " + tail.status().message());
  return tail;
}

StatusOr<UniqueFd> SafeDir::open_write(std::string_view name, int flags, mode_t mode) const {
  Status named = check_name(path_, name);
  if (!named.ok()) return named;
  const std::string n(name), path = path_of(name);
  if ((flags & ~(O_TRUNC | O_APPEND | O_EXCL | O_RDWR)) != 0)
    return Status::Internal(path + ": open_write takes only O_TRUNC, O_APPEND, O_EXCL and O_RDWR");
  struct stat st {};
  if (::fstatat(fd(), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    const std::string kind = kind_of(st);
    if (!kind.empty()) return not_regular(path, kind);
  }
  // Without O_TRUNC: what was opened is checked before a byte of it is lost. O_NONBLOCK: a FIFO
  // swapped in since the check fails the open (no reader) or is refused below, never waited on.
  UniqueFd f(::openat(fd(), n.c_str(),
                      ((flags & O_RDWR) != 0 ? O_RDWR : O_WRONLY) | O_CREAT | O_CLOEXEC |
                          O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | (flags & (O_APPEND | O_EXCL)),
                      mode));
  if (!f) {
    if (errno == ELOOP) return not_regular(path, "a symbolic link");
    if (errno == ENXIO) return not_regular(path, "a FIFO");
    return Status::InvalidArgument(path + ": cannot write: " + errno_text(errno));
  }
  if (::fstat(f.get(), &st) != 0) return Status::Internal(path + ": " + errno_text(errno));
  const std::string kind = kind_of(st);
  if (!kind.empty()) return not_regular(path, kind);
  if ((flags & O_TRUNC) != 0 && ::ftruncate(f.get(), 0) != 0)
    return Status::InvalidArgument(path + ": cannot truncate: " + errno_text(errno));
  return f;
}

StatusOr<UniqueFd> SafeDir::make_temp(std::string_view prefix, std::string* name,
                                      mode_t mode) const {
  for (uint64_t attempt = 0; attempt < 100; ++attempt) {
    const std::string n = std::string(prefix) + temp_suffix(attempt);
    if (Status named = check_name(path_, n); !named.ok()) return named;
    UniqueFd f(::openat(fd(), n.c_str(),
                        O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC,
                        mode));
    if (f) {
      *name = n;
      return f;
    }
    if (errno != EEXIST)
      return Status::InvalidArgument(path_of(n) + ": cannot create: " + errno_text(errno));
  }
  return Status::InvalidArgument(path_ + ": cannot create a temporary file: 100 names taken");
}

Status SafeDir::remove_tree(std::string_view name) const {
  Status named = check_name(path_, name);
  if (!named.ok()) return named;
  const std::string n(name), path = path_of(name);
  constexpr int kTries = 8;  // a live writer may refill the folder, or swap it, between the steps
  for (int tries = 0; tries < kTries; ++tries) {
    if (::unlinkat(fd(), n.c_str(), 0) == 0 || errno == ENOENT) return Status::Ok();
    if (errno != EISDIR && errno != EPERM)
      return Status::InvalidArgument(path + ": cannot remove: " + errno_text(errno));
    UniqueFd sub(open_for_removal(fd(), n.c_str()));
    if (!sub) {
      if (errno == ENOENT) return Status::Ok();
      if (errno == ENOTDIR || errno == ELOOP) continue;  // swapped for a file or link: unlinked
      return Status::InvalidArgument(path + ": cannot open the folder: " + errno_text(errno));
    }
    if (Status st = empty_tree(sub.get(), path); !st.ok()) return st;
    sub = UniqueFd();
    if (::unlinkat(fd(), n.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) return Status::Ok();
    if (errno != ENOTEMPTY && errno != EEXIST && errno != ENOTDIR)
      return Status::InvalidArgument(path + ": cannot remove: " + errno_text(errno));
  }
  return Status::InvalidArgument(path + ": still not empty after " + std::to_string(kTries) +
                                 " tries (something keeps writing it)");
}

Status SafeDir::remove_contents() const { return empty_tree(fd(), path_); }

Status SafeDir::remove_tree_at(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  const std::string parent =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : p.substr(0, slash));
  StatusOr<SafeDir> dir = SafeDir::open(parent, false);
  if (!dir.ok()) return dir.status();
  return dir.value().remove_tree(slash == std::string::npos ? p : p.substr(slash + 1));
}

std::vector<std::string> SafeDir::names() const { return names_in(fd(), SIZE_MAX); }

Status SafeDir::rename(std::string_view from, std::string_view to) const {
  for (std::string_view name : {from, to}) {
    Status named = check_name(path_, name);
    if (!named.ok()) return named;
  }
  if (::renameat(fd(), std::string(from).c_str(), fd(), std::string(to).c_str()) != 0)
    return Status::InvalidArgument(path_of(from) + ": cannot rename to " + std::string(to) + ": " +
                                   errno_text(errno));
  return Status::Ok();
}

Status SafeDir::remove(std::string_view name) const {
  Status named = check_name(path_, name);
  if (!named.ok()) return named;
  if (::unlinkat(fd(), std::string(name).c_str(), 0) != 0)
    return Status::InvalidArgument(path_of(name) + ": cannot remove: " + errno_text(errno));
  return Status::Ok();
}

bool SafeDir::exists(std::string_view name) const {
  if (!check_name(path_, name).ok()) return false;
  struct stat st {};
  return ::fstatat(fd(), std::string(name).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

StatusOr<std::string> read_tail(int fd, size_t max_bytes) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::InvalidArgument(errno_text(errno));
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument("not a regular file");
  const auto size = static_cast<unsigned long long>(st.st_size);
  const unsigned long long from = size > max_bytes ? size - max_bytes : 0;
  std::string text(static_cast<size_t>(size - from), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n =
        ::pread(fd, text.data() + got, text.size() - got, static_cast<off_t>(from + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::InvalidArgument(errno_text(errno));
    if (n == 0) break;  // shrank meanwhile: what is there
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  return text;
}

bool is_not_found(const Status& s) {
  const std::string& m = s.message();
  return s.code() == StatusCode::kInvalidArgument && m.size() >= kNotFoundSuffix.size() &&
         m.compare(m.size() - kNotFoundSuffix.size(), kNotFoundSuffix.size(), kNotFoundSuffix) == 0;
}

std::string not_regular_kind(const SafeDir& dir, std::string_view name) {
  if (!check_name(dir.path(), name).ok()) return "";
  struct stat st {};
  if (::fstatat(dir.fd(), std::string(name).c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return "";
  return kind_of(st);
}

}  // namespace deltacheck::cases
