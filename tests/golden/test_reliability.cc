// Hostile files and machines on the fixture paths (docs/reliability.md): a disk that fills up
// while a fixture is written, {out} files and fixtures whose data lives outside the file, chunks
// and shapes that would exceed --max-memory before a byte is checked, and the leftovers and
// messages of issue 19.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>

#include "deltacheck_test_paths.h"
#include "golden/exchange.h"
#include "golden/sha256.h"
#include "golden_test_util.h"

namespace deltacheck::golden {
namespace {

using testing::quote;
using testing::run_cli;
using testing::TempDir;

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// --- 4: a full disk -------------------------------------------------------------------------

TEST(FullDisk, GoldenGenerateFailsWithOneCleanLineAndLeavesNothing) {
  TempDir dir;
  // Files over 100 kB cannot be written (SIGXFSZ ignored: writes fail with EFBIG, as on a full
  // disk). HDF5 cannot close such a file, and its exit handler used to crash on it (SIGSEGV).
  const std::string cmd = "cd " + dir.path() + " && (trap '' XFSZ; ulimit -f 200; " +
                          DELTACHECK_BINARY_DIR + "/deltacheck golden generate --case " +
                          quote("gdr(layout=packed[2000,3000],H=2,HV=4,K=64,V=64,seed=1)") +
                          " -o big.h5 >out.txt 2>err.txt)";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);  // not 139 (SIGSEGV)
  std::ostringstream err;
  err << std::ifstream(dir / "err.txt").rdbuf();
  EXPECT_EQ(lines(err.str()), 1) << err.str();
  EXPECT_NE(err.str().find("deltacheck: error: big.h5: cannot write dataset"), std::string::npos)
      << err.str();
  EXPECT_NE(err.str().find("File too large"), std::string::npos) << err.str();
  EXPECT_EQ(err.str().find("0x"), std::string::npos) << "an address in the message: " << err.str();
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name == "out.txt" || name == "err.txt") << "left behind: " << name;
  }
}

// --- 9: user regexes in linear time (RE2) --------------------------------------------------

// The tool's exit code, killed after a deadline: a bound on runaway work (a backtracking regex,
// a quadratic loop), not a speed check (those are benchmarks). Sanitizer builds run several
// times slower, so their deadline is longer; the runaway cases take minutes either way.
int run_with_deadline(const std::string& args) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  const int seconds = 180;
#else
  const int seconds = 30;
#endif
  const int status =
      std::system(("timeout -s KILL " + std::to_string(seconds) + " " +
                   std::string(DELTACHECK_BINARY_DIR) + "/deltacheck " + args + " >/dev/null 2>&1")
                      .c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(UserRegex, PatternsThatBacktrackOrRecurseFinishInLinearTime) {
  TempDir dir;
  // std::regex overflowed its stack here (SIGSEGV) on a 60 kB id.
  std::string id = "gdr(layout=packed[";
  for (int i = 0; i < 15000; ++i) id += i ? ",1,2" : "1,2";
  id += "],H=1,HV=1,K=1,V=1)";
  EXPECT_EQ(run_with_deadline("list cases --case " + quote(id) + " --filter '^(.|,)*$'"), 0);
  // ... and backtracked without bound here (minutes for the gate suite's ids).
  EXPECT_EQ(run_with_deadline("list cases --suite gate --filter '(.*)*(.*)*(.*)*Z'"), 0);
  // What RE2 cannot match in linear time is refused with one line.
  const auto r = run_cli("run --filter '(gdr)\\1'", dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--filter '(gdr)\\1' is not a valid regex: invalid escape sequence"),
            std::string::npos)
      << r.err;
}

// --- 7: time linear in the number of sequences ---------------------------------------------

TEST(ManySequences, SixtyThousandSequencesWithProbesRunInSeconds) {
  // Quadratic before (layouts rebuilt per sequence): about 60 s in a release build, past the
  // deadline; 1.5 s after (10 to 25 s under ASan on a loaded 2-core machine, within its own).
  EXPECT_EQ(
      run_with_deadline("run -q --case 'gdr(layout=packed[1*60000],H=1,HV=1,K=4,V=4,seed=1)'"), 0);
}

// --- 6, 8, 10: datasets stored outside the file, oversized chunks and shapes, filters -------

const char* kBf16Case = "gdr(layout=packed[5,0,7],H=1,HV=2,K=8,V=8,dtype=bf16,gate=strong,seed=3)";

// A fixture of kBf16Case whose inputs/q is recreated by `make` (given q's bytes), with the dtype
// and forged SHA-256 attributes and the input list in the new creation order: only the checks of
// how and what is stored stand between it and a kernel.
template <typename Make>
std::string fixture_with_q(const TempDir& dir, Make make, const std::string& sha = "") {
  const std::string file = dir / "bad.h5";
  testing::write_fixture(file, {cases::Case::parse(kBf16Case)});
  const std::string group = "/" + escape_case_id(cases::Case::parse(kBf16Case).id());
  testing::edit_file(file, [&](hid_t f) {
    const std::string q = group + "/inputs/q";
    hid_t d = H5Dopen2(f, q.c_str(), H5P_DEFAULT);
    std::vector<uint16_t> bytes(12 * 8);
    H5Dread(d, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data());
    H5Dclose(d);
    H5Ldelete(f, q.c_str(), H5P_DEFAULT);
    d = make(f, q, bytes);
    ASSERT_GE(d, 0);
    testing::set_string_attr(d, "dtype", "bf16");
    testing::set_string_attr(d, "sha256",
                             sha.empty() ? sha256_hex(bytes.data(), bytes.size() * 2) : sha);
    H5Dclose(d);
    testing::sync_input_names(f, group);  // q is last now
  });
  return file;
}

hid_t create_q(hid_t f, const std::string& q, hid_t dcpl, const std::vector<hsize_t>& dims,
               const hsize_t* maxdims = nullptr) {
  hid_t sp = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), maxdims);
  hid_t d = H5Dcreate2(f, q.c_str(), H5T_STD_U16LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  H5Sclose(sp);
  return d;
}

void expect_verify_error(const std::string& what, const std::string& file, const TempDir& dir,
                         const std::string& error, const std::string& args = "") {
  const auto r = run_cli("golden verify " + file + " --backend cpu -q" + args, dir);
  EXPECT_EQ(r.exit_code, 2) << what << ": " << r.out << r.err;
  EXPECT_EQ(lines(r.err), 1) << what << ": " << r.err;
  EXPECT_NE(r.err.find(error), std::string::npos) << what << ": " << r.err;
}

TEST(StoredOutsideTheFile, FixtureDataInExternalRawFilesIsRefused) {
  TempDir dir;
  const std::string raw = dir / "raw.bin";
  const std::string file =
      fixture_with_q(dir, [&](hid_t f, const std::string& q, const std::vector<uint16_t>& bytes) {
        std::ofstream(raw, std::ios::binary)
            .write(reinterpret_cast<const char*>(bytes.data()), bytes.size() * 2);
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_external(dcpl, raw.c_str(), 0, bytes.size() * 2);
        hid_t d = create_q(f, q, dcpl, {1, 12, 1, 8});
        H5Pclose(dcpl);
        return d;
      });
  expect_verify_error("external raw storage", file, dir,
                      "inputs/q: its data is in external files: only data stored in the file "
                      "itself is read");
}

TEST(StoredOutsideTheFile, OutFilesWithExternalStorageLinksOrVirtualDatasetsAreRefused) {
  TempDir dir;
  const std::string secret = dir / "environ";
  std::ofstream(secret) << "SECRET_TOKEN=0123456789abcdef0123456789abcdef0123456789abcdef";
  cases::TensorMap outputs;
  outputs.add(cases::Tensor("o", cases::DType::kF32, {4}));
  const hsize_t n = 4;
  auto write_out = [&](const std::string& path, const std::function<void(hid_t, hid_t)>& add) {
    hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t sp = H5Screate_simple(1, &n, nullptr);
    add(f, sp);
    H5Sclose(sp);
    H5Fclose(f);
  };
  // External raw storage pointing at another file (the candidate's way to /proc/self/environ).
  write_out(dir / "external.h5", [&](hid_t f, hid_t sp) {
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_external(dcpl, secret.c_str(), 0, 16);
    H5Dclose(H5Dcreate2(f, "o", H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT));
    H5Pclose(dcpl);
  });
  Status st = read_output_file(dir / "external.h5", outputs);
  EXPECT_NE(st.message().find("output 'o': its data is in external files"), std::string::npos)
      << st.message();
  // An external link to a dataset in another file.
  write_out(dir / "target.h5", [&](hid_t f, hid_t sp) {
    H5Dclose(H5Dcreate2(f, "x", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  });
  write_out(dir / "elink.h5", [&](hid_t f, hid_t) {
    H5Lcreate_external((dir / "target.h5").c_str(), "x", f, "o", H5P_DEFAULT, H5P_DEFAULT);
  });
  st = read_output_file(dir / "elink.h5", outputs);
  EXPECT_NE(st.message().find("output 'o' in {out}: an external link (to another file)"),
            std::string::npos)
      << st.message();
  // A virtual dataset mapping the other file.
  write_out(dir / "virtual.h5", [&](hid_t f, hid_t sp) {
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t src = H5Screate_simple(1, &n, nullptr);
    H5Pset_virtual(dcpl, sp, (dir / "target.h5").c_str(), "x", src);
    H5Dclose(H5Dcreate2(f, "o", H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT));
    H5Sclose(src);
    H5Pclose(dcpl);
  });
  st = read_output_file(dir / "virtual.h5", outputs);
  EXPECT_NE(st.message().find("output 'o': a virtual dataset"), std::string::npos) << st.message();
  // End to end: a candidate answering with such a file gets the verdict error.
  {
    const hsize_t dims[4] = {1, 1, 1, 4};
    hid_t f = H5Fcreate((dir / "external4d.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t sp = H5Screate_simple(4, dims, nullptr);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_external(dcpl, secret.c_str(), 0, 16);
    H5Dclose(H5Dcreate2(f, "o", H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT));
    H5Pclose(dcpl);
    H5Sclose(sp);
    H5Fclose(f);
  }
  const auto r = run_cli("run --no-probes -q --backend external --cmd " +
                             quote("cp " + (dir / "external4d.h5") + " {out}; : {in}") +
                             " --case 'gdr(layout=single[1],H=1,HV=1,K=1,V=4,state=none,"
                             "cache=none,seed=1)'",
                         dir);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("its data is in external files"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("SECRET_TOKEN"), std::string::npos) << r.out;
}

TEST(MemoryLimit, ChunksAndShapesAreCheckedBeforeAnythingIsRead) {
  TempDir dir;
  // One chunk of 96 MiB for a 192-byte input (read whole, it would take 96 MiB).
  std::string file =
      fixture_with_q(dir, [&](hid_t f, const std::string& q, const std::vector<uint16_t>& bytes) {
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        const hsize_t chunk[4] = {1, hsize_t{6} << 20, 1, 8}, maxdims[4] = {1, H5S_UNLIMITED, 1, 8};
        H5Pset_chunk(dcpl, 4, chunk);
        H5Pset_deflate(dcpl, 1);
        hid_t d = create_q(f, q, dcpl, {1, 12, 1, 8}, maxdims);
        H5Dwrite(d, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data());
        H5Pclose(dcpl);
        return d;
      });
  expect_verify_error("a 96 MiB chunk", file, dir,
                      "inputs/q: chunks of 101 MB each, more than the 67.1 MB it may take",
                      " --max-memory 50M");
  // A shape claiming 2 GiB (nothing stored): refused by its shape before anything is read.
  file = fixture_with_q(
      dir,
      [&](hid_t f, const std::string& q, const std::vector<uint16_t>&) {
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        const hsize_t chunk[4] = {1, hsize_t{1} << 16, 1, 8};
        H5Pset_chunk(dcpl, 4, chunk);
        hid_t d = create_q(f, q, dcpl, {1, hsize_t{1} << 27, 1, 8});
        H5Pclose(dcpl);
        return d;
      },
      std::string(64, '0'));
  expect_verify_error("a 2 GiB shape", file, dir,
                      "inputs/q: shape [1,134217728,1,8], the case implies [1,12,1,8]",
                      " --max-memory 8G");
  // Read whole, it would have taken 2 GiB: the largest child this test waited for stayed small.
  struct rusage ru {};
  ASSERT_EQ(getrusage(RUSAGE_CHILDREN, &ru), 0);
  EXPECT_LT(ru.ru_maxrss, 512 * 1024) << "KiB: the 2 GiB dataset was read";
}

TEST(FixtureMessages, FiltersThisLibraryCannotDecodeAreNamed) {
  TempDir dir;
  const std::string file =
      fixture_with_q(dir, [&](hid_t f, const std::string& q, const std::vector<uint16_t>& bytes) {
        // As h5py writes lzf: a filter this HDF5 build does not have; the chunk's bytes as written.
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        const hsize_t chunk[4] = {1, 12, 1, 8};
        H5Pset_chunk(dcpl, 4, chunk);
        H5Pset_filter(dcpl, 32000, H5Z_FLAG_OPTIONAL, 0, nullptr);
        hid_t d = create_q(f, q, dcpl, {1, 12, 1, 8});
        const hsize_t offset[4] = {0, 0, 0, 0};
        H5Dwrite_chunk(d, H5P_DEFAULT, 0, offset, bytes.size() * 2, bytes.data());
        H5Pclose(dcpl);
        return d;
      });
  expect_verify_error("lzf", file, dir,
                      "inputs/q: compressed with (filter 32000), which this HDF5 library cannot "
                      "decode (write it with gzip or uncompressed)");
}

TEST(FixtureMessages, ReorderedInputsSayWhatTheOrderIs) {
  TempDir dir;
  const std::string file =
      fixture_with_q(dir, [&](hid_t f, const std::string& q, const std::vector<uint16_t>& bytes) {
        hid_t d = create_q(f, q, H5P_DEFAULT, {1, 12, 1, 8});
        H5Dwrite(d, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data());
        return d;
      });
  // Recreating q moved it to the end; the list is rewritten to the generator's order.
  testing::edit_file(file, [&](hid_t f) {
    const std::string group = "/" + escape_case_id(cases::Case::parse(kBf16Case).id());
    hid_t g = H5Gopen2(f, group.c_str(), H5P_DEFAULT);
    testing::set_string_list_attr(g, "input_names",
                                  {"q", "k", "v", "g", "beta", "cu_seqlens", "initial_state"});
    H5Gclose(g);
  });
  expect_verify_error("reordered inputs", file, dir,
                      "the inputs are stored in the order k, v, g, beta, cu_seqlens, "
                      "initial_state, q, the input_names attribute lists q, k, v, g, beta, "
                      "cu_seqlens, initial_state");
}

TEST(FixtureWriting, OnlyARegularFileOrNothingIsReplaced) {
  TempDir dir;
  ASSERT_EQ(mkfifo((dir / "fifo.h5").c_str(), 0600), 0);
  std::ofstream(dir / "target.txt") << "keep";
  std::filesystem::create_symlink(dir / "target.txt", dir / "link.h5");
  for (const auto& [name, kind] :
       {std::pair<std::string, std::string>{"fifo.h5", "a FIFO"}, {"link.h5", "a symbolic link"}}) {
    const auto r = run_cli("golden generate --case 'gdr(seed=1)' -o " + (dir / name), dir);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(name + ": is " + kind +
                         ": deltacheck writes fixtures to a new or a "
                         "regular file only"),
              std::string::npos)
        << r.err;
  }
  EXPECT_TRUE(std::filesystem::is_fifo(dir / "fifo.h5"));
  EXPECT_TRUE(std::filesystem::is_symlink(dir / "link.h5"));
  std::ostringstream kept;
  kept << std::ifstream(dir / "target.txt").rdbuf();
  EXPECT_EQ(kept.str(), "keep");
}

TEST(FixtureWriting, TemporaryFilesOfDeadWritersAreRemovedLiveOnesKept) {
  TempDir dir;
  std::ofstream(dir / ".x.h5.tmp-dead01") << std::string(1000, 'x');
  std::ofstream(dir / ".x.h5.tmp-live01") << "x";
  const int fd = ::open((dir / ".x.h5.tmp-live01").c_str(), O_RDONLY);
  ASSERT_EQ(flock(fd, LOCK_EX), 0);  // a writer still at work
  const auto r = run_cli("golden generate --case 'gdr(seed=1)' -o " + (dir / "x.h5"), dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  ::close(fd);
  EXPECT_FALSE(std::filesystem::exists(dir / ".x.h5.tmp-dead01"));
  EXPECT_TRUE(std::filesystem::exists(dir / ".x.h5.tmp-live01"));
}

// --- 5: candidates do not outlive deltacheck ------------------------------------------------

const char* kSmallCase = " --no-probes -q --case 'gdr(layout=packed[5,7],H=1,HV=2,K=8,V=8,seed=1)'";

// The PID written to `file` (waits up to 10 s for it), or 0.
pid_t read_pid(const std::string& file) {
  for (int i = 0; i < 1000; ++i) {
    std::ifstream f(file);
    pid_t pid = 0;
    if (f >> pid && pid > 0) return pid;
    usleep(10000);
  }
  return 0;
}

using testing::gone;

// Single-quoted for /bin/sh, whatever `s` holds.
std::string sh_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

// A daemon (its own session: setsid) that writes its PID to `file` and sleeps.
std::string daemon_cmd(const std::string& file) {
  return "setsid sh -c 'echo $$ > " + file + "; exec sleep 300' & ";
}

TEST(ProcessTree, DaemonsOfACandidateDieWithItsCall) {
  TempDir dir;
  // Still running at the timeout.
  auto r = run_cli("run --backend external --timeout 1 --cmd " +
                       sh_quote(daemon_cmd(dir / "d1") + "sleep 100; : {in} {out}") + kSmallCase,
                   dir);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("timed out after 1 s (killed, with every process it started)"),
            std::string::npos)
      << r.out;
  const pid_t d1 = read_pid(dir / "d1");
  ASSERT_GT(d1, 0);
  EXPECT_TRUE(gone(d1, 2.0)) << "a setsid daemon survived --timeout";
  // Exited, leaving the daemon behind.
  r = run_cli("run --backend external --cmd " +
                  sh_quote(daemon_cmd(dir / "d2") + "while [ ! -s " + (dir / "d2") +
                           " ]; do sleep 0.01; done; exit 3; : {in} {out}") +
                  kSmallCase,
              dir);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const pid_t d2 = read_pid(dir / "d2");
  ASSERT_GT(d2, 0);
  EXPECT_TRUE(gone(d2, 2.0)) << "a daemon outlived the program that started it";
}

TEST(ProcessTree, KillingDeltacheckKillsTheCandidateAndItsDaemons) {
  for (const int sig : {SIGKILL, SIGTERM, SIGINT}) {
    TempDir dir;
    const std::string cmd = "exec " + std::string(DELTACHECK_BINARY_DIR) +
                            "/deltacheck run --backend external --cmd " +
                            sh_quote(daemon_cmd(dir / "daemon") + "echo $$ > " + (dir / "program") +
                                     "; sleep 300; : {in} {out}") +
                            kSmallCase + " >/dev/null 2>&1";
    // Started directly (a shell's background job would ignore SIGINT).
    const pid_t deltacheck = fork();
    ASSERT_GE(deltacheck, 0);
    if (deltacheck == 0) {
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    const pid_t program = read_pid(dir / "program"), daemon = read_pid(dir / "daemon");
    ASSERT_GT(deltacheck, 0);
    ASSERT_GT(program, 0);
    ASSERT_GT(daemon, 0);
    kill(deltacheck, sig);
    int status = 0;
    EXPECT_EQ(waitpid(deltacheck, &status, 0), deltacheck);
    EXPECT_TRUE(WIFSIGNALED(status)) << strsignal(sig);
    EXPECT_TRUE(gone(program)) << "the candidate outlived deltacheck (" << strsignal(sig) << ")";
    EXPECT_TRUE(gone(daemon)) << "its daemon outlived deltacheck (" << strsignal(sig) << ")";
  }
}

TEST(ProcessTree, ACandidateRunningDeltacheckLeavesNoLevelAlive) {
  TempDir dir;
  // The candidate runs deltacheck on a program that starts a daemon. (${L}in} keeps the outer
  // run from substituting the inner run's {in}.)
  const std::string inner =
      "L='{'; " + std::string(DELTACHECK_BINARY_DIR) +
      "/deltacheck run --backend external --cmd \"setsid sh -c 'echo \\$\\$ > " + (dir / "inner") +
      "; exec sleep 300' & sleep 300; : ${L}in} ${L}out}\"" + kSmallCase +
      " >/dev/null 2>&1; : {in} {out}";
  // The timeout leaves the inner run time to start its daemon on a loaded machine (3 s did not).
  const auto r =
      run_cli("run --backend external --timeout 12 --cmd " + sh_quote(inner) + kSmallCase, dir);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const pid_t daemon = read_pid(dir / "inner");
  ASSERT_GT(daemon, 0);
  EXPECT_TRUE(gone(daemon, 2.0)) << "the inner candidate's daemon survived";
}

TEST(ProcessTree, OnlyFoldersWhoseOwnerIsDeadAreSwept) {
  TempDir dir;
  const std::string tmp = dir / "tmp";
  // A live run in another PID namespace: its PID means nothing here, its lock does.
  const std::string live = tmp + "/deltacheck-external-4194306-abcdef";
  const std::string dead = tmp + "/deltacheck-external-" + std::to_string(getpid()) + "-dead";
  std::filesystem::create_directories(live + "/sub");
  std::filesystem::create_directories(dead + "/sub");
  const int fd = ::open(live.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_EQ(flock(fd, LOCK_EX), 0);
  setenv("TMPDIR", tmp.c_str(), 1);
  const auto r =
      run_cli("run --backend external --cmd 'exit 1; : {in} {out}'" + std::string(kSmallCase), dir);
  unsetenv("TMPDIR");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(std::filesystem::exists(live + "/sub")) << "a live run's folder was swept";
  EXPECT_FALSE(std::filesystem::exists(dead)) << "a folder nobody holds was kept";
  ::close(fd);
}

// --- 10: what a program's end is called ----------------------------------------------------

TEST(ExternalMessages, ExitCodesAndStartFailuresSayWhatHappened) {
  TempDir dir;
  // A program's own exit(153) is not a file-size signal.
  auto r = run_cli(
      "run --backend external --cmd 'exit 153; : {in} {out}'" + std::string(kSmallCase), dir);
  EXPECT_NE(r.out.find("external program exited with code 153\n"), std::string::npos) << r.out;
  // A command too long for one exec() is not a missing command.
  std::string cmd = "true";
  for (int i = 0; i < 4000; ++i) cmd += " {in}";
  r = run_cli("run --backend external --cmd '" + cmd + " {out}'" + std::string(kSmallCase), dir);
  EXPECT_NE(r.out.find("cannot start /bin/sh for the program: Argument list too long (the --cmd "
                       "with its paths, or the environment, is too large for one command)"),
            std::string::npos)
      << r.out.substr(0, 2000);
}

TEST(ListOps, EveryParameterShowsTheValuesAnIdAccepts) {
  TempDir dir;
  const auto r = run_cli("list ops", dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // state: the values ids take, not "zeros | random | ..." (which no id accepts).
  EXPECT_NE(r.out.find("[none|rand|mixed]"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("zeros | random"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[0..4611686018427387904]"), std::string::npos) << r.out;
  // Every listed choice is accepted by an id.
  const auto ok =
      run_cli("list cases --case 'gdr(state=mixed)' --case 'gdr(state=none,cache=none)'", dir);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

}  // namespace
}  // namespace deltacheck::golden
