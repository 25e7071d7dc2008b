// The expectation cache's secret key file (harness/cache_key.h).
//
// The key is random (libsodium's randombytes_buf): deltacheck's determinism rules are about the
// cases it generates, and a secret key must be anything but reproducible.
#include "harness/cache_key.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cases/safe_file.h"

namespace deltacheck::harness {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

std::string quoted(const std::string& path) { return "cache key file '" + path + "'"; }

Status refused(const std::string& path, const std::string& rule) {
  return Status::InvalidArgument(quoted(path) + ": " + rule);
}

// The key in `name` of `dir`, checked: a regular file with one name (no link followed, nothing
// that blocks: SafeDir::open_read) of this user, without group or other permissions, of exactly
// 32 bytes.
StatusOr<CacheKey> read_key(const cases::SafeDir& dir, const std::string& name,
                            const std::string& path) {
  struct stat st {};
  StatusOr<cases::UniqueFd> opened = dir.open_read(name, &st);
  if (!opened.ok()) {
    const std::string kind = cases::not_regular_kind(dir, name);
    if (!kind.empty())
      return refused(path, kind +
                               ": it must be a regular file of your own (a link could lead "
                               "anywhere)");
    return refused(path, opened.status().message());
  }
  const cases::UniqueFd& fd = opened.value();
  if (st.st_uid != ::geteuid())
    return refused(path, "owned by user " + std::to_string(st.st_uid) + ", not by you (" +
                             std::to_string(::geteuid()) + "): anyone who wrote it knows the key");
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return refused(path, std::string("mode ") + mode +
                             " gives group or others access: it must be 0600 (whoever reads "
                             "the key can forge cache entries)");
  }
  if (st.st_size != static_cast<off_t>(CacheKey::kBytes))
    return refused(path, std::to_string(st.st_size) + " bytes: a key is exactly " +
                             std::to_string(CacheKey::kBytes) + " bytes");
  CacheKey key;
  size_t got = 0;
  while (got < key.bytes.size()) {
    const ssize_t n = ::read(fd.get(), key.bytes.data() + got, key.bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return refused(path, "could not read its 32 bytes");
    got += static_cast<size_t>(n);
  }
  return key;
}

// Writes a new key under a temporary name and moves it to `name` without replacing what is there
// (renameat2 RENAME_NOREPLACE; link() where the file system has no such rename), so of two runs
// making the key at once one wins and both read its key afterwards.
Status make_key(const cases::SafeDir& dir, const std::string& name, const std::string& path) {
  // A name no other writer uses (threads of one process, processes of other PID namespaces).
  const std::string tmp =
      name + ".new." + std::to_string(::getpid()) + "." + std::to_string(randombytes_random());
  cases::UniqueFd fd(
      ::openat(dir.fd(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return refused(path, std::string("cannot create it: ") + std::strerror(errno));
  CacheKey key;
  randombytes_buf(key.bytes.data(), key.bytes.size());
  const ssize_t n = ::write(fd.get(), key.bytes.data(), key.bytes.size());
  sodium_memzero(key.bytes.data(), key.bytes.size());
  const bool written = n == static_cast<ssize_t>(CacheKey::kBytes) && ::fsync(fd.get()) == 0;
  const int write_errno = errno;
  fd = cases::UniqueFd();
  Status st = Status::Ok();
  if (!written)
    st = refused(path, std::string("cannot write it: ") + std::strerror(write_errno));
  else if (::renameat2(dir.fd(), tmp.c_str(), dir.fd(), name.c_str(), RENAME_NOREPLACE) == 0)
    return Status::Ok();
  else if (errno != EEXIST &&
           (errno != EINVAL ||
            (::linkat(dir.fd(), tmp.c_str(), dir.fd(), name.c_str(), 0) != 0 && errno != EEXIST)))
    st = refused(path, std::string("cannot create it: ") + std::strerror(errno));
  (void)::unlinkat(dir.fd(), tmp.c_str(), 0);
  return st;
}

}  // namespace

StatusOr<std::string> default_cache_key_file() {
  if (const char* f = env("DELTACHECK_CACHE_KEY_FILE")) return std::string(f);
  if (const char* s = env("XDG_STATE_HOME")) return std::string(s) + "/deltacheck/cache.key";
  if (const char* h = env("HOME")) return std::string(h) + "/.local/state/deltacheck/cache.key";
  return Status::InvalidArgument(
      "the expectation cache's key file: HOME is not set (set DELTACHECK_CACHE_KEY_FILE to a "
      "file outside the cache directory)");
}

StatusOr<CacheKey> open_cache_key(const std::string& path) {
  if (sodium_init() < 0) return Status::Internal("libsodium could not be initialized");
  const size_t slash = path.rfind('/');
  const std::string folder =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.empty() || name == "." || name == "..") return refused(path, "not a file name");
  StatusOr<cases::SafeDir> dir = cases::SafeDir::open(folder, /*create=*/true);
  if (!dir.ok()) return refused(path, dir.status().message());
  struct stat st {};
  if (::fstatat(dir.value().fd(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno != ENOENT) return refused(path, std::strerror(errno));
    if (Status made = make_key(dir.value(), name, path); !made.ok()) return made;
  }
  return read_key(dir.value(), name, path);
}

}  // namespace deltacheck::harness
