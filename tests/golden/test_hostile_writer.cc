// The fixture writer in a folder a candidate can write (issue #35): a --serve worker keeps running
// between calls, and the next call's {in} is written into its folder. The worker can watch that
// folder (inotify) and, the moment the writer's temporary file appears, put a link to one of the
// user's files in its place. The writer makes the temporary file with O_EXCL | O_NOFOLLOW relative
// to the folder's descriptor and has HDF5 write that very file (/proc/self/fd/N), so the link is
// never written through: the user's file keeps its bytes, and the link is not renamed into place.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "cases/safe_file.h"
#include "golden/format.h"
#include "golden_test_util.h"

namespace deltacheck::golden {
namespace {

using testing::TempDir;

constexpr const char* kCanary = "CANARY: the user's file, which no fixture write may truncate\n";

std::string slurp(const std::string& path) {
  std::ostringstream s;
  s << std::ifstream(path, std::ios::binary).rdbuf();
  return s.str();
}

// A candidate that swaps every new file named ".in.h5.tmp-*" in `folder` for a link to `target`,
// as fast as inotify tells it, until stopped. `swaps` counts the links it put in place.
class Swapper {
 public:
  Swapper(const std::string& folder, const std::string& target) : folder_(folder) {
    fd_ = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    EXPECT_GE(fd_, 0);
    EXPECT_GE(inotify_add_watch(fd_, folder.c_str(), IN_CREATE), 0);
    thread_ = std::thread([this, target] {
      alignas(inotify_event) char buf[4096];
      while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 50) != 1) continue;
        const ssize_t n = ::read(fd_, buf, sizeof buf);
        for (ssize_t at = 0; at < n;) {
          const auto* e = reinterpret_cast<const inotify_event*>(buf + at);
          at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
          const std::string name = e->len ? e->name : "";
          if (name.rfind(".in.h5.tmp-", 0) != 0) continue;
          const std::string p = folder_ + "/" + name;
          if (::rename(p.c_str(), (p + ".moved").c_str()) == 0 &&
              ::symlink(target.c_str(), p.c_str()) == 0)
            ++swaps;
        }
      }
    });
  }
  ~Swapper() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  std::atomic<int> swaps{0};

 private:
  std::string folder_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(HostileWriter, ALinkSwappedInForTheTemporaryFileIsNeverWrittenThrough) {
  TempDir dir;
  const std::string folder = dir / "case", canary = dir / "canary.txt";
  std::filesystem::create_directory(folder);
  std::ofstream(canary) << kCanary;
  StatusOr<cases::SafeDir> held = cases::SafeDir::open(folder, false);
  ASSERT_TRUE(held.ok()) << held.status().message();
  const FixtureCase fc = make_fixture_case(testing::small_cases()[0]);
  int written = 0, refused = 0;
  {
    Swapper candidate(folder, canary);
    for (int i = 0; i < 100 && slurp(canary) == kCanary; ++i) {
      FixtureWriter w;
      const Status st = [&] {
        if (Status s = w.open(held.value(), "in.h5", {}); !s.ok()) return s;
        if (Status s = w.add(fc); !s.ok()) return s;
        return w.commit(/*durable=*/false);
      }();
      if (st.ok()) {
        ++written;
        // What took the name is the file the writer made, never the candidate's link.
        EXPECT_TRUE(
            std::filesystem::is_regular_file(std::filesystem::symlink_status(folder + "/in.h5")));
      } else {
        ++refused;
        // Found out at the commit (the name holds something else), or by HDF5 itself when it
        // looks up the real path of /proc/self/fd/N while the name is being swapped.
        EXPECT_TRUE(st.message().find("was removed or replaced while it was written") !=
                        std::string::npos ||
                    st.message().find("cannot create an HDF5 file") != std::string::npos ||
                    st.message().find("is a symbolic link") != std::string::npos)
            << st.message();
      }
    }
    EXPECT_GT(candidate.swaps.load(), 0) << "the candidate never swapped: the test proved nothing";
  }
  EXPECT_EQ(slurp(canary), kCanary) << "the user's file was written through the link (" << written
                                    << " written, " << refused << " refused)";
}

}  // namespace
}  // namespace deltacheck::golden
