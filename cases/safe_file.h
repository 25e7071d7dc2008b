// Files in folders an untrusted candidate can write (its case folder with stderr.txt and {out}, a
// cache directory, a report folder) reached the one safe way: a folder opened once, each file below
// it by a single name relative to it, never through a symbolic link, only when it is a regular file
// with one name, and read within a bound. Whatever the candidate leaves in a file's place (a link
// to the user's files, a FIFO, /dev/zero, a socket, a hard link to a file outside, a file that
// grows without end) is refused with an error value instead of followed, truncated, blocked on or
// read whole (docs/reliability.md, "Issue 35: files a candidate can write").
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace deltacheck::cases {

// A file descriptor closed on destruction (movable, not copyable).
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd();
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// A folder opened once; every file below it is reached with openat() relative to it, never
// following a symbolic link below it (O_NOFOLLOW on each name; names are single components: not
// empty, no '/', not "." or ".."). Links in the folder's own path are followed: the user named
// that path. Copies share the one descriptor.
//
// Regular files only, and only with one name: a hard link (st_nlink > 1) may be another name of a
// file outside the folder (the candidate runs as the user and may link any of the user's files on
// the same file system), so it is refused like a symbolic link.
class SafeDir {
 public:
  SafeDir() = default;  // no folder: every call fails (EBADF)
  // Opens (with create=true also makes, mode 0700, parents as needed) the folder at `path`.
  static StatusOr<SafeDir> open(const std::string& path, bool create);
  // A sub-folder of this one (made 0700 when create); a link or non-folder in its place is refused.
  StatusOr<SafeDir> sub(std::string_view name, bool create) const;
  // A regular file of this folder, read whole. Refused ("<path>: a symbolic link, not a regular
  // file") when it is a link, FIFO, socket, device or folder, or larger than max_bytes (the size
  // from fstat before a byte is read; a file that grows while read is refused too). Never blocks:
  // opened O_NONBLOCK, the type checked with fstat on the opened descriptor. A missing file gives
  // an error for which is_not_found() is true.
  StatusOr<std::string> read(std::string_view name, size_t max_bytes) const;
  // The last max_bytes bytes of a regular file of this folder (the same refusals; a file of any
  // size is read, only its tail, with pread: a file that grows meanwhile costs nothing more).
  StatusOr<std::string> read_tail(std::string_view name, size_t max_bytes) const;
  // Opens a regular file of this folder for writing: O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW |
  // O_NONBLOCK plus `flags` (any of O_TRUNC, O_APPEND, O_EXCL, and O_RDWR for a descriptor that
  // can also be read back, with read_tail(fd) below; others are refused). A link, FIFO,
  // device, folder or hard link in its place is refused BEFORE anything is truncated (opened
  // without O_TRUNC, checked with fstat, then ftruncate).
  StatusOr<UniqueFd> open_write(std::string_view name, int flags, mode_t mode = 0600) const;
  // Opens a regular file of this folder for reading (the same refusals as read(); `st`, when
  // given, receives its fstat): for readers that need a descriptor (HDF5 reads {out} through
  // /proc/self/fd/N, so what was checked is what is read). `hard_links`: a file with more than
  // one name is accepted too, for a reader whose content never reaches a report as text (a
  // candidate's {out}: a worker may link a result it keeps).
  StatusOr<UniqueFd> open_read(std::string_view name, struct stat* st = nullptr,
                               bool hard_links = false) const;
  // A new regular file of this folder named `prefix` and 6 letters or digits (`*name` receives the
  // name), made with O_CREAT | O_EXCL | O_NOFOLLOW and opened O_RDWR: whatever already stands at
  // a name (a link planted there, anything) is never opened, another name is tried. Its mode is
  // `mode` less the umask.
  StatusOr<UniqueFd> make_temp(std::string_view prefix, std::string* name,
                               mode_t mode = 0600) const;
  // Removes `name` from this folder with everything below it, the way a folder a candidate can
  // still write must be removed (libstdc++'s remove_all follows a folder swapped for a link
  // mid-walk: CVE-2022-21658): every folder entered with openat(O_DIRECTORY | O_NOFOLLOW) from
  // its parent's descriptor, every file, link, FIFO or socket removed with unlinkat (a link is
  // removed, never what it points at), folders the candidate made unreadable (chmod 000) opened
  // O_PATH and made 0700 on that descriptor, never by path; another file system mounted below is
  // not entered. Folders deeper than 32 levels are moved up into the top folder and emptied from
  // there, so a deep tree costs no more than 32 descriptors. A folder that a live writer keeps
  // filling is given up after 1000 passes with an error; whatever could not be removed is left.
  // Missing: Ok.
  Status remove_tree(std::string_view name) const;
  // Empties this folder the same way (the folder itself stays).
  Status remove_contents() const;
  // remove_tree of the last component of `path` in the folder before it (opened by path: the user
  // named it, e.g. TMPDIR or --report-dir).
  static Status remove_tree_at(const std::string& path);
  // The names in this folder (without "." and ".."), read through a descriptor of its own; empty
  // when it cannot be read.
  std::vector<std::string> names() const;
  Status rename(std::string_view from, std::string_view to) const;  // renameat within this folder
  Status remove(std::string_view name) const;                       // unlinkat, never follows
  bool exists(std::string_view name) const;  // fstatat AT_SYMLINK_NOFOLLOW: a link counts
  int fd() const { return fd_ ? fd_->get() : -1; }
  const std::string& path() const { return path_; }
  // "<path>/<name>", for messages.
  std::string path_of(std::string_view name) const;

 private:
  SafeDir(std::shared_ptr<const UniqueFd> fd, std::string path)
      : fd_(std::move(fd)), path_(std::move(path)) {}
  std::shared_ptr<const UniqueFd> fd_;
  std::string path_;
};

// The last max_bytes bytes of the regular file open at `fd` (read with pread: the offset of a
// descriptor shared with a child is left alone). For a file deltacheck made and still holds, such
// as a candidate's stderr: whatever the candidate then does to the file's name changes nothing.
StatusOr<std::string> read_tail(int fd, size_t max_bytes);

// Whether `s` is SafeDir::read's or read_tail's answer for a file that is not there (a cache miss,
// not a refusal). StatusCode has no kNotFound: harness/isolation.cc switches over every code.
bool is_not_found(const Status& s);

// What stands at `name` in `dir` when it is not a regular file with one name, in words ("a
// symbolic link", "a FIFO", "a character device", "a folder", "a hard link"); empty when it is a
// regular file or missing. For notes such as "(stderr.txt replaced by a symbolic link: not read)".
std::string not_regular_kind(const SafeDir& dir, std::string_view name);

}  // namespace deltacheck::cases
