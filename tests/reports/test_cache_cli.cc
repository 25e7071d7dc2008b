// `deltacheck run --cache-dir` against a hostile cache (issue 35, C2, C4, C5): an unusable cache
// directory or key file is one line on stderr, exit 2 and nothing on stdout; a candidate finds no
// entry of its case while it runs on a cold run; a cache folder full of huge junk neither breaks
// --max-memory nor a correct backend.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include "reports/report.h"
#include "tests/reports/report_test_util.h"

namespace deltacheck::reports {
namespace {

namespace fs = std::filesystem;
using testing::run_command;
using testing::ScratchDir;

const char* kCase = " --no-probes --case 'gdr(layout=packed[3,6],H=1,HV=2,K=8,V=8,seed=5)'";

// stdout, stderr and the exit code of a shell command, apart.
struct Split {
  int code = -1;
  std::string out, err;
};
Split run_split(const ScratchDir& dir, const std::string& cmd) {
  const std::string err = dir / "stderr.txt";
  Split s;
  const testing::CommandResult r =
      run_command("sh -c " + shell_quote(cmd + " 2>" + shell_quote(err)));
  s.code = r.code;
  s.out = r.out;
  s.err = testing::read_file(err);
  return s;
}

std::vector<fs::path> entries(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".bin") out.push_back(e.path());
  return out;
}

void expect_one_line_exit_2(const Split& s, const std::string& names) {
  EXPECT_EQ(s.code, 2) << s.out << s.err;
  EXPECT_EQ(s.out, "") << "stdout must stay empty";
  EXPECT_EQ(s.err.rfind("deltacheck: error: ", 0), 0u) << s.err;
  ASSERT_FALSE(s.err.empty());
  EXPECT_EQ(s.err.find('\n'), s.err.size() - 1) << "one line: " << s.err;
  EXPECT_NE(s.err.find(names), std::string::npos) << s.err;
}

TEST(CacheCli, AnUnusableCacheIsOneLineOnStderrAndNothingOnStdout) {
  ScratchDir dir("cache_unusable");
  const std::string key = dir / "user.key", file = dir / "a-file";
  testing::write_file(file, "x");
  const std::string with_key = "DELTACHECK_CACHE_KEY_FILE=" + shell_quote(key) + " ";
  // A file where the folder should be, by option and by variable.
  expect_one_line_exit_2(run_split(dir, with_key + testing::deltacheck() + " run --backend cpu" +
                                            kCase + " --cache-dir " + shell_quote(file)),
                         "a-file");
  expect_one_line_exit_2(
      run_split(dir, with_key + "DELTACHECK_CACHE_DIR=" + shell_quote(file) + " " +
                         testing::deltacheck() + " run --backend cpu" + kCase),
      "a-file");
  // A key file others can read, and one that is a folder.
  const std::string cache = dir / "cache";
  ASSERT_EQ(run_command(with_key + testing::deltacheck() + " run --backend cpu -q" + kCase +
                        " --cache-dir " + cache)
                .code,
            0);
  fs::permissions(key, fs::perms(0644));
  expect_one_line_exit_2(run_split(dir, with_key + testing::deltacheck() + " run --backend cpu" +
                                            kCase + " --cache-dir " + cache),
                         "mode 0644");
  const std::string folder = dir / "folder.key";
  fs::create_directories(folder);
  expect_one_line_exit_2(run_split(dir, "DELTACHECK_CACHE_KEY_FILE=" + shell_quote(folder) + " " +
                                            testing::deltacheck() + " run --backend cpu" + kCase +
                                            " --cache-dir " + cache),
                         "folder.key");
}

TEST(CacheCli, NoEntryOfACaseExistsWhileACandidateRunsIt) {
  // The candidate knows the cache folder (it is on its parent's command line) and collects
  // whatever is there while it runs; on a cold run that is nothing of its own case.
  ScratchDir dir("cache_timing");
  const std::string cache = dir / "cache", seen = dir / "seen.txt";
  const testing::CommandResult r = run_command(
      "DELTACHECK_CACHE_KEY_FILE=" + shell_quote(dir / "user.key") + " " + testing::deltacheck() +
      " run --backend external -q --cmd " +
      shell_quote("find " + cache + " -name '*.bin' >> " + seen + "; exit 3; : {in} {out}") +
      kCase + " --cache-dir " + cache);
  EXPECT_EQ(r.code, 1) << r.out;
  ASSERT_TRUE(fs::exists(seen)) << "the candidate did not run: " << r.out;
  EXPECT_EQ(testing::read_file(seen), "") << "an entry existed while the candidate ran";
  EXPECT_EQ(entries(cache).size(), 1u) << "the case's entry is written after its calls";
}

// Peak resident memory (bytes) and exit code of a program run with these arguments.
std::pair<int64_t, int> max_rss_of(const std::vector<std::string>& args,
                                   const std::string& key_file) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("DELTACHECK_CACHE_KEY_FILE", key_file.c_str(), 1);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  struct rusage ru {};
  ::wait4(pid, &status, 0, &ru);
  return {static_cast<int64_t>(ru.ru_maxrss) * 1024, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

TEST(CacheCli, JunkEntriesKeepWithinMaxMemoryAndTheCpuBackendPasses) {
  // Every entry of a cache replaced by 2 GB of (sparse) junk: read whole, each one took 2.2 GB
  // under --max-memory 500M and the correct kernel got std::bad_alloc.
  ScratchDir dir("cache_junk");
  const std::string cache = dir / "cache", key = dir / "user.key";
  const std::vector<std::string> run = {
      testing::deltacheck(),  "run",       "--suite",      "smoke", "--filter",
      "^gdr\\(layout=packed", "--backend", "cpu",          "-q",    "--no-probes",
      "--cache-dir",          cache,       "--max-memory", "500M"};
  ASSERT_EQ(max_rss_of(run, key).second, 0);
  const std::vector<fs::path> files = entries(cache);
  ASSERT_FALSE(files.empty());
  for (const fs::path& f : files) {
    const int fd = ::open(f.c_str(), O_WRONLY | O_TRUNC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, int64_t{2} << 30), 0);
    ::close(fd);
  }
  const auto [rss, code] = max_rss_of(run, key);
  EXPECT_EQ(code, 0) << "the cpu backend no longer passes";
  EXPECT_LT(rss, int64_t{500} << 20);
  for (const fs::path& f : entries(cache))
    EXPECT_LT(fs::file_size(f), uint64_t{1} << 30) << f << ": the junk was kept";
}

}  // namespace
}  // namespace deltacheck::reports
