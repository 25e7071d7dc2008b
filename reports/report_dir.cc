// Report directories replaced as a whole (report_dir.h).
#include "reports/report_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include "cases/safe_file.h"
#include "cases/safe_text.h"

namespace deltacheck::reports {
namespace {

namespace fs = std::filesystem;

constexpr const char* kStagingPrefix = ".deltacheck-staging-";
constexpr const char* kLegacyPartialPrefix = ".failures.partial-";  // before the staging folders

std::string errno_text() { return std::strerror(errno); }

// The names in a folder (without "." and ".."); empty when it cannot be read.
std::vector<std::string> entries_of(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    closedir(d);
  }
  return names;
}

// Removes the failure dumps in a folder of dumps (checked by check_failures_folder), then the
// folder; anything else in it stays, and so does the folder. Reached from its parent by one name,
// never through a link (one put in its place is left alone), the dumps through its descriptor.
void remove_dumps_folder(const std::string& dir) {
  const size_t slash = dir.rfind('/');
  if (slash == std::string::npos) return;
  StatusOr<cases::SafeDir> parent =
      cases::SafeDir::open(slash == 0 ? "/" : dir.substr(0, slash), false);
  if (!parent.ok()) return;
  const std::string name = dir.substr(slash + 1);
  StatusOr<cases::SafeDir> d = parent.value().sub(name, false);
  if (!d.ok()) return;
  for (const std::string& n : d.value().names()) {
    struct stat st;
    if (is_dump_file_name(n) &&
        ::fstatat(d.value().fd(), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
      (void)d.value().remove(n);
  }
  ::unlinkat(parent.value().fd(), name.c_str(), AT_REMOVEDIR);
}

// Staging folders of runs that are gone: their lock is free (flock locks die with their
// process). Folders of the version before staging folders held no lock and were named after
// their PID; those are removed once no such process exists.
void remove_dead_staging(const std::string& dir) {
  StatusOr<cases::SafeDir> held = cases::SafeDir::open(dir, false);
  if (!held.ok()) return;
  for (const std::string& n : held.value().names()) {
    const std::string p = dir + "/" + n;
    if (n.rfind(kStagingPrefix, 0) == 0) {
      const int fd =
          ::openat(held.value().fd(), n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) continue;
      // Never follows a link inside, even one swapped in while it is removed (SafeDir).
      if (flock(fd, LOCK_EX | LOCK_NB) == 0) (void)held.value().remove_tree(n);
      ::close(fd);
    } else if (n.rfind(kLegacyPartialPrefix, 0) == 0) {
      char* end = nullptr;
      const long pid = std::strtol(n.c_str() + std::strlen(kLegacyPartialPrefix), &end, 10);
      struct stat st;
      if (pid > 0 && end && *end == '\0' && lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
          kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
        remove_dumps_folder(p);
    }
  }
}

// Writes `text` to `path`; errors name `what` (the file the user knows).
Status write_whole_file(const std::string& path, const std::string& text, const std::string& what) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Internal("cannot write " + what + ": " + errno_text());
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? errno_text() : "nothing written";
      ::close(fd);
      return Status::Internal("cannot write " + what + ": " + why);
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) return Status::Internal("cannot write " + what + ": " + errno_text());
  return Status::Ok();
}

}  // namespace

bool is_dump_file_name(const std::string& name) {
  // "<readable, at most 60 of [A-Za-z0-9_-]>-<16 hex digits>.h5" (dump_file_name()).
  constexpr size_t kTail = 1 + 16 + 3;
  if (name.size() < kTail + 1 || name.size() > 60 + kTail) return false;
  const size_t head = name.size() - kTail;
  for (size_t i = 0; i < head; ++i) {
    const unsigned char ch = static_cast<unsigned char>(name[i]);
    if (!std::isalnum(ch) && ch != '_' && ch != '-') return false;
  }
  if (name[head] != '-' || name.compare(name.size() - 3, 3, ".h5") != 0) return false;
  for (size_t i = head + 1; i < head + 17; ++i)
    if (!std::isdigit(static_cast<unsigned char>(name[i])) && (name[i] < 'a' || name[i] > 'f'))
      return false;
  return true;
}

Status find_dump(const std::string& report_folder, const std::string& dump, std::string* path) {
  path->clear();
  const std::string prefix = "failures/";
  if (dump.compare(0, prefix.size(), prefix) != 0 || !is_dump_file_name(dump.substr(prefix.size())))
    return Status::InvalidArgument("names dump '" + cases::printable_line(dump, 200) +
                                   "', which is not a file in the report's failures/ folder");
  std::error_code ec;
  const fs::path src = fs::path(report_folder) / dump;
  if (!fs::exists(src, ec)) return Status::Ok();
  const fs::path root = fs::canonical(report_folder, ec);
  const fs::path real = fs::canonical(src, ec);
  const auto [end, rest] = std::mismatch(root.begin(), root.end(), real.begin(), real.end());
  if (ec || end != root.end() || !fs::is_regular_file(real, ec))
    return Status::InvalidArgument("dump '" + dump + "' resolves to " +
                                   cases::printable_line(real.string(), 200) +
                                   ", outside the report's folder");
  *path = src.string();
  return Status::Ok();
}

Status check_failures_folder(const std::string& dir) {
  const std::string f = (fs::path(dir) / "failures").string();
  struct stat st;
  if (lstat(f.c_str(), &st) != 0)
    return errno == ENOENT ? Status::Ok()
                           : Status::InvalidArgument("cannot inspect " + f + ": " + errno_text());
  const std::string why =
      ": deltacheck replaces that folder with each run's failure dumps, never follows a link "
      "and never deletes a file it did not write (move it, or choose another report directory)";
  if (S_ISLNK(st.st_mode)) return Status::InvalidArgument(f + " is a symbolic link" + why);
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(f + " is not a folder" + why);
  for (const std::string& n : entries_of(f)) {
    struct stat e;
    const std::string p = f + "/" + n;
    if (!is_dump_file_name(n) || lstat(p.c_str(), &e) != 0 || !S_ISREG(e.st_mode))
      return Status::InvalidArgument(f + " holds '" + cases::printable_line(n, 200) +
                                     "', which deltacheck did not write" + why);
  }
  return Status::Ok();
}

ReportDirWriter::~ReportDirWriter() {
  if (!staging_.empty()) (void)cases::SafeDir::remove_tree_at(staging_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

Status ReportDirWriter::open(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec))
    return Status::InvalidArgument("cannot create report directory " + dir +
                                   (ec ? ": " + ec.message() : ""));
  dir_ = dir;
  if (Status st = check_failures_folder(dir); !st.ok()) return st;
  remove_dead_staging(dir);
  std::string tmpl = (fs::path(dir) / (std::string(kStagingPrefix) + "XXXXXX")).string();
  if (!mkdtemp(tmpl.data()))
    return Status::InvalidArgument("cannot create a folder in " + dir + ": " + errno_text());
  staging_ = tmpl;
  lock_fd_ = ::open(staging_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (lock_fd_ < 0 || flock(lock_fd_, LOCK_EX | LOCK_NB) != 0)
    return Status::Internal("cannot lock " + staging_ + ": " + errno_text());
  return Status::Ok();
}

Status ReportDirWriter::dump_path(const std::string& name, std::string* path) {
  if (staging_.empty()) return Status::Internal("report directory not open");
  if (!is_dump_file_name(name)) return Status::Internal("'" + name + "' is not a dump name");
  const std::string failures = staging_ + "/failures";
  if (::mkdir(failures.c_str(), 0755) != 0 && errno != EEXIST)
    return Status::Internal("cannot create " + failures + ": " + errno_text());
  *path = failures + "/" + name;
  return Status::Ok();
}

WrittenReport ReportDirWriter::commit(const Report& unsafe) {
  const auto t0 = std::chrono::steady_clock::now();
  WrittenReport w;
  if (staging_.empty()) {
    w.status = Status::Internal("report directory not open");
    return w;
  }
  // Text from outside (a candidate's messages, --cmd, --filter) may hold any bytes: JSON and XML
  // need valid UTF-8, so everything is cleaned once here, before any format sees it. Everything
  // is formatted and written before anything is renamed: a full disk changes nothing.
  const Report r = sanitized(unsafe);
  const std::vector<std::pair<std::string, std::string>> files{
      {"report.json", format_json(r)},
      {"junit.xml", format_junit(r)},
      {"summary.md", format_markdown(r)},
      {"report.html", format_html(r)},
  };
  for (const auto& [name, text] : files) {
    if (Status st = write_whole_file(staging_ + "/" + name, text,
                                     (fs::path(dir_) / name).string() + " (nothing replaced)");
        !st.ok()) {
      w.status = st;
      return w;
    }
  }
  // The directory may have changed during the run.
  if (Status st = check_failures_folder(dir_); !st.ok()) {
    w.status = st;
    return w;
  }
  for (const auto& [name, text] : files) {
    const std::string target = (fs::path(dir_) / name).string();
    if (std::rename((staging_ + "/" + name).c_str(), target.c_str()) != 0) {
      w.status = Status::Internal("cannot rename a report file into " + dir_ + ": " + errno_text());
      return w;
    }
    w.files.push_back({target, text.size()});
  }
  // failures/: this run's folder in, the previous one out (and its dumps removed).
  const std::string fresh = staging_ + "/failures", old = (fs::path(dir_) / "failures").string();
  struct stat st;
  const bool have_fresh = lstat(fresh.c_str(), &st) == 0;
  const bool have_old = lstat(old.c_str(), &st) == 0;
  std::string previous = staging_ + "/previous";
  int rc = 0;
  if (have_fresh && have_old) {
    rc = renameat2(AT_FDCWD, fresh.c_str(), AT_FDCWD, old.c_str(), RENAME_EXCHANGE);
    if (rc == 0) {
      previous = fresh;                               // the exchange put the previous dumps there
    } else if (errno == EINVAL || errno == ENOSYS) {  // a file system without the exchange
      rc = std::rename(old.c_str(), previous.c_str());
      if (rc == 0) rc = std::rename(fresh.c_str(), old.c_str());
    }
  } else if (have_fresh) {
    rc = std::rename(fresh.c_str(), old.c_str());
  } else if (have_old) {
    rc = std::rename(old.c_str(), previous.c_str());
  }
  if (rc != 0) {
    w.status = Status::Internal("cannot replace " + old + ": " + errno_text());
    return w;
  }
  remove_dumps_folder(previous);
  (void)cases::SafeDir::remove_tree_at(staging_);
  staging_.clear();
  w.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return w;
}

WrittenReport write_report_files(const Report& r, const std::string& dir) {
  ReportDirWriter w;
  if (Status st = w.open(dir); !st.ok()) {
    WrittenReport out;
    out.status = st;
    return out;
  }
  return w.commit(r);
}

}  // namespace deltacheck::reports
