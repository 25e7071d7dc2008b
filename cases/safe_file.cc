// The one way deltacheck reaches files in folders a candidate can write (cases/safe_file.h).
#include "cases/safe_file.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>

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
