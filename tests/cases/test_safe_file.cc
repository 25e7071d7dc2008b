// Files in folders a candidate can write (cases/safe_file.h): whatever stands in a file's place (a
// link to a file or folder outside, a FIFO nobody writes, /dev/zero, a hard link, a file over the
// limit or one that grows while read) is refused promptly, and a refused write leaves what the
// link points at as it was.
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include "cases/safe_file.h"
#include "tests/deadline.h"

namespace deltacheck::cases {
namespace {

namespace fs = std::filesystem;

// A folder removed with its contents at the end of the test: `inside` is the folder a candidate
// could write, `outside` holds the user's files it must not reach.
class SafeFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string t = fs::temp_directory_path().string() + "/deltacheck-safe-file-XXXXXX";
    ASSERT_NE(mkdtemp(t.data()), nullptr);
    root_ = t;
    inside_ = root_ + "/inside";
    outside_ = root_ + "/outside";
    fs::create_directories(inside_);
    fs::create_directories(outside_);
    canary_ = outside_ + "/canary.txt";
    write(canary_, kCanary);
  }
  void TearDown() override {
    // Whatever a test left unreadable (chmod 000 folders it made) is made removable first.
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(root_, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
      if (it->is_directory(ec) && !it->is_symlink(ec))
        fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
    fs::permissions(root_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(root_, ec);
  }
  static void write(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  }
  static std::string slurp(const std::string& path) {
    std::ostringstream s;
    s << std::ifstream(path, std::ios::binary).rdbuf();
    return s.str();
  }
  SafeDir dir() const {
    StatusOr<SafeDir> d = SafeDir::open(inside_, false);
    EXPECT_TRUE(d.ok()) << d.status().message();
    return d.take();
  }

  static constexpr const char* kCanary = "the user's secret, line 1\nline 2 secret\n";
  std::string root_, inside_, outside_, canary_;
};

void expect_refused(const Status& s, const std::string& rule) {
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(rule), std::string::npos) << s.message();
  EXPECT_FALSE(is_not_found(s)) << s.message();
}

TEST_F(SafeFile, RegularFilesRoundTrip) {
  StatusOr<SafeDir> made = SafeDir::open(root_ + "/a/b/c", true);
  ASSERT_TRUE(made.ok()) << made.status().message();
  EXPECT_EQ(fs::status(root_ + "/a/b").permissions() & fs::perms::all, fs::perms::owner_all);
  const SafeDir d = made.take();
  {
    StatusOr<UniqueFd> f = d.open_write("x.txt", O_TRUNC);
    ASSERT_TRUE(f.ok()) << f.status().message();
    ASSERT_EQ(::write(f.value().get(), "hello, world", 12), 12);
  }
  StatusOr<std::string> r = d.read("x.txt", 12);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value(), "hello, world");
  EXPECT_EQ(d.read_tail("x.txt", 5).value(), "world");
  EXPECT_EQ(d.read_tail("x.txt", 100).value(), "hello, world");
  {
    StatusOr<UniqueFd> f = d.open_write("x.txt", O_APPEND);
    ASSERT_TRUE(f.ok()) << f.status().message();
    ASSERT_EQ(::write(f.value().get(), "!", 1), 1);
  }
  EXPECT_EQ(d.read("x.txt", 100).value(), "hello, world!");
  EXPECT_FALSE(d.open_write("x.txt", O_EXCL).ok());  // exists
  ASSERT_TRUE(d.open_write("x.txt", O_TRUNC).ok());
  EXPECT_EQ(d.read("x.txt", 100).value(), "");

  ASSERT_TRUE(d.rename("x.txt", "y.txt").ok());
  EXPECT_FALSE(d.exists("x.txt"));
  EXPECT_TRUE(d.exists("y.txt"));
  ASSERT_TRUE(d.remove("y.txt").ok());
  EXPECT_FALSE(d.exists("y.txt"));

  StatusOr<SafeDir> sub = d.sub("s", true);
  ASSERT_TRUE(sub.ok()) << sub.status().message();
  EXPECT_EQ(sub.value().path(), root_ + "/a/b/c/s");
  ASSERT_TRUE(sub.value().open_write("z", O_EXCL).ok());
  EXPECT_TRUE(fs::is_regular_file(root_ + "/a/b/c/s/z"));
}

TEST_F(SafeFile, AMissingFileIsNotFoundNotARefusal) {
  StatusOr<std::string> r = dir().read("missing", 10);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(is_not_found(r.status())) << r.status().message();
  EXPECT_TRUE(is_not_found(dir().read_tail("missing", 10).status()));
  EXPECT_FALSE(is_not_found(Status::Ok()));
  EXPECT_FALSE(dir().exists("missing"));
}

TEST_F(SafeFile, ALinkToAFileOutsideIsNotRead) {
  fs::create_symlink(canary_, inside_ + "/stderr.txt");
  for (const Status& s : {dir().read("stderr.txt", 1 << 20).status(),
                          dir().read_tail("stderr.txt", 1 << 20).status()}) {
    expect_refused(s, inside_ + "/stderr.txt: a symbolic link, not a regular file");
    EXPECT_EQ(s.message().find("secret"), std::string::npos);
  }
  EXPECT_TRUE(dir().exists("stderr.txt"));  // the link itself is there
  EXPECT_EQ(not_regular_kind(dir(), "stderr.txt"), "a symbolic link");
}

TEST_F(SafeFile, AWriteThroughALinkIsRefusedBeforeAnythingIsTruncated) {
  fs::create_symlink(canary_, inside_ + "/stderr.txt");
  for (int flags : {O_TRUNC, O_APPEND, 0, O_EXCL})
    EXPECT_FALSE(dir().open_write("stderr.txt", flags).ok()) << flags;
  expect_refused(dir().open_write("stderr.txt", O_TRUNC).status(), "a symbolic link");
  EXPECT_EQ(slurp(canary_), kCanary);
  // Removing or renaming the link touches the link, not its target.
  ASSERT_TRUE(dir().rename("stderr.txt", "moved").ok());
  ASSERT_TRUE(dir().remove("moved").ok());
  EXPECT_EQ(slurp(canary_), kCanary);
}

TEST_F(SafeFile, AHardLinkToAFileOutsideIsNeitherReadNorTruncated) {
  std::error_code ec;
  fs::create_hard_link(canary_, inside_ + "/stderr.txt", ec);
  if (ec) GTEST_SKIP() << "no hard links here: " << ec.message();
  expect_refused(dir().read_tail("stderr.txt", 100).status(), "more than one name");
  expect_refused(dir().open_write("stderr.txt", O_TRUNC).status(), "more than one name");
  EXPECT_EQ(slurp(canary_), kCanary);
  EXPECT_EQ(not_regular_kind(dir(), "stderr.txt"), "a hard link");
  EXPECT_TRUE(dir().open_read("stderr.txt", nullptr, /*hard_links=*/true).ok());  // when asked
}

TEST_F(SafeFile, ALinkOrAFileInAFoldersPlaceIsRefused) {
  fs::create_symlink(outside_, inside_ + "/cache");
  for (bool create : {false, true})
    expect_refused(dir().sub("cache", create).status(), "a symbolic link, not a folder");
  expect_refused(dir().read("cache", 100).status(), "a symbolic link");
  write(inside_ + "/plain", "x");
  expect_refused(dir().sub("plain", true).status(), "not a folder");
  fs::create_directory(inside_ + "/folder");
  expect_refused(dir().read("folder", 100).status(), "a folder, not a regular file");
  expect_refused(dir().open_write("folder", O_TRUNC).status(), "a folder");
}

TEST_F(SafeFile, NamesAreSingleComponents) {
  write(inside_ + "/x", "x");
  for (const char* name : {"", ".", "..", "../outside/canary.txt", "a/b", "/etc/passwd"}) {
    expect_refused(dir().read(name, 100).status(), "is not a single file name");
    expect_refused(dir().open_write(name, O_TRUNC).status(), "is not a single file name");
    expect_refused(dir().sub(name, false).status(), "is not a single file name");
    EXPECT_FALSE(dir().exists(name));
  }
  expect_refused(dir().rename("x", "../y"), "is not a single file name");
  EXPECT_TRUE(dir().exists("x"));
  EXPECT_EQ(slurp(canary_), kCanary);
}

TEST_F(SafeFile, AFifoWithNoWriterIsRefusedPromptly) {
  ASSERT_EQ(mkfifo((inside_ + "/stderr.txt").c_str(), 0600), 0);
  const SafeDir d = dir();
  const Status r = testing::within_deadline("read of a FIFO",
                                            [&] { return d.read("stderr.txt", 100).status(); });
  expect_refused(r, "a FIFO, not a regular file");
  expect_refused(testing::within_deadline("read_tail of a FIFO",
                                          [&] { return d.read_tail("stderr.txt", 100).status(); }),
                 "a FIFO");
  expect_refused(
      testing::within_deadline("open_write of a FIFO",
                               [&] { return d.open_write("stderr.txt", O_TRUNC).status(); }),
      "a FIFO");
  EXPECT_EQ(not_regular_kind(d, "stderr.txt"), "a FIFO");
}

TEST_F(SafeFile, DevZeroIsNotReadWhole) {
  fs::create_symlink("/dev/zero", inside_ + "/stderr.txt");
  expect_refused(dir().read_tail("stderr.txt", 100).status(), "a symbolic link");
  expect_refused(dir().open_write("stderr.txt", O_TRUNC).status(), "a symbolic link");
  // The device itself, as a folder's entry (making one needs root; /dev has them).
  StatusOr<SafeDir> dev = SafeDir::open("/dev", false);
  ASSERT_TRUE(dev.ok()) << dev.status().message();
  for (const Status& s :
       {dev.value().read("zero", 100).status(), dev.value().read_tail("zero", 100).status(),
        dev.value().open_write("null", O_TRUNC).status()})
    expect_refused(s, "a character device, not a regular file");
}

TEST_F(SafeFile, AFileOverTheLimitIsRefusedBeforeItIsRead) {
  write(inside_ + "/big", std::string(1000, 'x'));
  EXPECT_TRUE(dir().read("big", 1000).ok());
  expect_refused(dir().read("big", 999).status(), "1000 bytes, larger than the limit of 999");
  // The tail is bounded instead of refused.
  StatusOr<std::string> tail = dir().read_tail("big", 10);
  ASSERT_TRUE(tail.ok()) << tail.status().message();
  EXPECT_EQ(tail.value(), std::string(10, 'x'));
}

TEST_F(SafeFile, AFileThatGrowsWhileReadIsRefused) {
  // A file that has more to read than fstat said: /proc's files are regular files of size 0.
  StatusOr<SafeDir> proc = SafeDir::open("/proc/self", false);
  if (!proc.ok() || !proc.value().exists("status")) GTEST_SKIP() << "no /proc/self/status";
  expect_refused(proc.value().read("status", 1 << 20).status(), "grew while it was read");
}

TEST_F(SafeFile, AHeldFileIsReadWhateverIsDoneToItsName) {
  // deltacheck makes the file, hands the descriptor to the candidate and reads the tail through
  // its own descriptor: a link put in the name's place later is never looked at.
  StatusOr<UniqueFd> f = dir().open_write("stderr.txt", O_RDWR | O_TRUNC | O_APPEND);
  ASSERT_TRUE(f.ok()) << f.status().message();
  ASSERT_EQ(::write(f.value().get(), "first\nlast line\n", 16), 16);
  ASSERT_TRUE(dir().remove("stderr.txt").ok());
  fs::create_symlink(canary_, inside_ + "/stderr.txt");
  StatusOr<std::string> tail = read_tail(f.value().get(), 10);
  ASSERT_TRUE(tail.ok()) << tail.status().message();
  EXPECT_EQ(tail.value(), "last line\n");
  EXPECT_EQ(read_tail(f.value().get(), 1000).value(), "first\nlast line\n");
  EXPECT_FALSE(read_tail(-1, 10).ok());
  EXPECT_FALSE(dir().open_write("x", O_RDONLY | O_DIRECTORY).ok());  // flags beyond the four
  // open_read: the descriptor of what was checked, and its size.
  write(inside_ + "/out.h5", "12345");
  struct stat st {};
  StatusOr<UniqueFd> r = dir().open_read("out.h5", &st);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(st.st_size, 5);
  expect_refused(dir().open_read("stderr.txt").status(), "a symbolic link");
}

// --- remove_tree: a folder a candidate can write, removed ---------------------------------------

// The user's files outside: `victim/` holds folders and files with the same names as those in the
// tree (a removal that strays out through a link finds them), its modes recorded.
class RemoveTree : public SafeFile {
 protected:
  void SetUp() override {
    SafeFile::SetUp();
    victim_ = outside_ + "/victim";
    fs::create_directory(victim_);
    for (int i = 0; i < 50; ++i) {
      fs::create_directory(victim_ + "/d" + std::to_string(i));
      ::chmod((victim_ + "/d" + std::to_string(i)).c_str(), 0755);
      write(victim_ + "/d" + std::to_string(i) + "/keep", "keep");
      write(victim_ + "/f" + std::to_string(i), "keep");
    }
    ::chmod(victim_.c_str(), 0755);
    ::chmod(canary_.c_str(), 0644);
  }
  // The user's files as they were: every name, byte and mode.
  void expect_outside_untouched() const {
    EXPECT_EQ(slurp(canary_), kCanary);
    EXPECT_EQ(fs::status(canary_).permissions(), static_cast<fs::perms>(0644));
    EXPECT_EQ(fs::status(victim_).permissions(), static_cast<fs::perms>(0755));
    int names = 0;
    for (const auto& e : fs::directory_iterator(victim_)) {
      (void)e;
      ++names;
    }
    EXPECT_EQ(names, 100) << "files outside were removed";
    for (int i = 0; i < 50; ++i) {
      const std::string d = victim_ + "/d" + std::to_string(i);
      EXPECT_EQ(fs::status(d).permissions(), static_cast<fs::perms>(0755)) << d;
      EXPECT_EQ(slurp(d + "/keep"), "keep") << d;
      EXPECT_EQ(slurp(victim_ + "/f" + std::to_string(i)), "keep");
    }
  }
  // Runs `work` (a removal) as an ordinary user: chmod 000 does not stop root, so when the tests
  // run as root the test's folder (inside and outside) is handed to uid and gid 65534 and `work`
  // runs in a child process with those ids. Its error message, "" when it succeeded.
  std::string as_user(const std::function<Status()>& work) const {
    if (::geteuid() != 0) {
      const Status st = work();
      return st.ok() ? "" : st.message();
    }
    const auto own = [](const char* p, const struct stat*, int, struct FTW*) {
      return ::lchown(p, 65534, 65534);
    };
    if (::nftw(root_.c_str(), own, 64, FTW_PHYS) != 0) return "cannot hand the folder over";
    int out[2];
    if (::pipe(out) != 0) return "no pipe";
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(out[0]);
      if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) _exit(3);
      const Status st = work();
      const std::string m = st.ok() ? "" : st.message();
      (void)!::write(out[1], m.data(), m.size());
      _exit(st.ok() ? 0 : 1);
    }
    ::close(out[1]);
    std::string m;
    char buf[512];
    for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) m.append(buf, size_t(n));
    ::close(out[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) > 1) return "the child failed";
    return WEXITSTATUS(status) == 0 ? "" : m;
  }
  std::string victim_;
};

TEST_F(RemoveTree, EverythingInsideGoesNothingOutsideIsTouched) {
  const std::string t = inside_ + "/tree";
  fs::create_directories(t + "/a/b");
  write(t + "/file", "x");
  write(t + "/a/b/file", "x");
  fs::create_symlink(canary_, t + "/link-to-file");
  fs::create_symlink(victim_, t + "/link-to-folder");
  fs::create_symlink(victim_, t + "/a/b/d0");  // the victim's names, one level down
  fs::create_symlink("/nonexistent/dangling", t + "/dangling");
  std::error_code ec;
  fs::create_hard_link(canary_, t + "/hard-link", ec);  // its other name outside stays
  ASSERT_EQ(mkfifo((t + "/fifo").c_str(), 0600), 0);
  {
    const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    const std::string sp = t + "/sock";
    if (sp.size() < sizeof(a.sun_path)) {
      std::memcpy(a.sun_path, sp.c_str(), sp.size() + 1);
      EXPECT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    }
    ::close(s);
  }
  // Folders the candidate locked: no permissions at all, read-only, no read; a file mode 000.
  for (const char* locked : {"/locked", "/read-only", "/no-read"}) {
    fs::create_directories(t + locked + "/inner");
    write(t + locked + "/inner/file", "x");
    write(t + locked + "/file", "x");
    fs::create_symlink(victim_, t + locked + "/inner/link");
  }
  ::chmod((t + "/locked/inner").c_str(), 0);
  ::chmod((t + "/locked").c_str(), 0);
  ::chmod((t + "/read-only").c_str(), 0500);
  ::chmod((t + "/no-read").c_str(), 0300);
  write(t + "/a/mode-000", "x");
  ::chmod((t + "/a/mode-000").c_str(), 0);
  // A chain 100 folders deep, locked at the bottom with a link out, beyond 64 levels (the old
  // cleanup stopped making folders removable there) and the 32 a walk descends before it moves
  // the rest up.
  std::string deep = t + "/deep";
  for (int i = 0; i < 100; ++i) deep += "/" + std::to_string(i % 10);
  fs::create_directories(deep);
  write(deep + "/file", "x");
  fs::create_symlink(victim_, deep + "/link");
  ::chmod(deep.c_str(), 0);
  ::chmod((t + "/deep/0/1/2/3/4").c_str(), 0);  // and one near the top
  ::chmod(t.c_str(), 0);                        // the tree's own folder too

  const std::string error = testing::within_deadline("remove_tree", [&] {
    return as_user([&] { return SafeDir::open(inside_, false).value().remove_tree("tree"); });
  });
  EXPECT_EQ(error, "");
  EXPECT_FALSE(dir().exists("tree"));
  EXPECT_EQ(std::distance(fs::directory_iterator(inside_), {}), 0);
  expect_outside_untouched();
  // A missing name is no error; a name with a '/' is refused.
  EXPECT_TRUE(dir().remove_tree("tree").ok());
  expect_refused(dir().remove_tree("../outside"), "is not a single file name");
  // A link or a file as the tree: the link goes, never its target.
  fs::create_symlink(outside_, inside_ + "/tree");
  EXPECT_TRUE(dir().remove_tree("tree").ok());
  EXPECT_FALSE(dir().exists("tree"));
  expect_outside_untouched();
}

TEST_F(RemoveTree, ContentsAndPathsToo) {
  fs::create_directories(inside_ + "/x/y");
  fs::create_symlink(victim_, inside_ + "/x/y/link");
  fs::create_symlink(victim_, inside_ + "/victim");
  ::chmod((inside_ + "/x").c_str(), 0);
  EXPECT_EQ(as_user([&] { return SafeDir::open(inside_, false).value().remove_contents(); }), "");
  EXPECT_TRUE(fs::is_directory(inside_));
  EXPECT_EQ(std::distance(fs::directory_iterator(inside_), {}), 0);
  fs::create_directories(inside_ + "/z/w");
  ::chmod((inside_ + "/z").c_str(), 0);
  EXPECT_EQ(as_user([&] { return SafeDir::remove_tree_at(inside_ + "/z/"); }), "");
  EXPECT_FALSE(fs::exists(inside_ + "/z"));
  EXPECT_TRUE(SafeDir::remove_tree_at(inside_).ok());
  EXPECT_FALSE(fs::exists(inside_));
  expect_outside_untouched();
}

// The race: a candidate still running swaps a folder for a link to the user's folder while it is
// being removed (the moment the walk opens it, seen with inotify). A removal by path (lstat, then
// chmod or unlink of "<folder>/<name>") then reaches the user's files through the link; one by
// descriptor goes on in the folder it opened.
TEST_F(RemoveTree, AFolderSwappedForALinkMidRemovalIsNotFollowed) {
  const std::string t = inside_ + "/tree", d = t + "/d";
  fs::create_directories(d);
  // Many entries with the victim's names (folders d<i> and files f<i>), so the walk in d is long
  // next to the swap.
  for (int i = 0; i < 500; ++i) {
    fs::create_directory(d + "/d" + std::to_string(i));
    write(d + "/d" + std::to_string(i) + "/keep", "x");
    write(d + "/f" + std::to_string(i), "x");
  }
  const int in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  ASSERT_GE(in, 0);
  ASSERT_GE(inotify_add_watch(in, d.c_str(), IN_OPEN | IN_DELETE | IN_ATTRIB), 0);
  bool swapped = false;
  std::thread candidate([&] {
    pollfd p{in, POLLIN, 0};
    if (::poll(&p, 1, 20000) != 1) return;  // the removal never started
    swapped = ::rename(d.c_str(), (t + "/moved").c_str()) == 0 &&
              ::symlink(victim_.c_str(), d.c_str()) == 0;
  });
  const Status st = dir().remove_tree("tree");
  candidate.join();
  ::close(in);
  EXPECT_TRUE(swapped) << "the swap did not happen: the test proved nothing";
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_FALSE(dir().exists("tree"));
  expect_outside_untouched();
}

}  // namespace
}  // namespace deltacheck::cases
