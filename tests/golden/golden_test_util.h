// Shared by the golden tests: a private temporary folder, small cases, fixtures made on the spot,
// HDF5 surgery to damage them, and running the deltacheck tool.
#pragma once

#include <hdf5.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "deltacheck_test_paths.h"
#include "golden/fixtures.h"

namespace deltacheck::golden::testing {

// A folder removed with its contents at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string t = std::filesystem::temp_directory_path().string() + "/deltacheck-test-XXXXXX";
    path_ = mkdtemp(t.data()) ? t : "";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Small cases: a packed bf16 case (uint16 storage, cu_seqlens, initial state) and an fp32 batch
// case without state.
inline std::vector<cases::Case> small_cases() {
  return {cases::Case::parse("gdr(layout=packed[5,0,7],H=1,HV=2,K=8,V=8,dtype=bf16,gate=strong,"
                             "seed=3)"),
          cases::Case::parse("gdr(layout=batch[2x6],H=2,HV=2,K=8,V=4,dtype=fp32,state=none,"
                             "seed=4)")};
}

inline void write_fixture(const std::string& path, const std::vector<cases::Case>& cs) {
  FixtureWriter w;
  FileInfo info;
  info.generator_version = 1;
  info.tolerance_policy = "tol-v1";
  info.producer = "test";
  ASSERT_TRUE(w.open(path, info).ok());
  for (const cases::Case& c : cs) ASSERT_TRUE(w.add(make_fixture_case(c)).ok());
  ASSERT_TRUE(w.commit().ok());
}

inline std::vector<char> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// File offset of a contiguous dataset's data.
inline haddr_t data_offset(const std::string& file, const std::string& dataset) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  const haddr_t at = H5Dget_offset(d);
  H5Dclose(d);
  H5Fclose(f);
  return at;
}

// Runs an edit on a fixture opened read-write.
template <typename F>
void edit_file(const std::string& file, F edit) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  edit(f);
  ASSERT_GE(H5Fclose(f), 0);
}

inline void set_int_attr(hid_t obj, const char* name, int64_t v) {
  if (H5Aexists(obj, name) > 0) H5Adelete(obj, name);
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_INT64, &v);
  H5Aclose(a);
  H5Sclose(s);
}

inline void set_string_attr(hid_t obj, const char* name, const std::string& v) {
  if (H5Aexists(obj, name) > 0) H5Adelete(obj, name);
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
  const char* p = v.c_str();
  H5Awrite(a, t, &p);
  H5Aclose(a);
  H5Sclose(s);
  H5Tclose(t);
}

// A variable-length string list attribute, replacing one of that name (e.g. input_names).
inline void set_string_list_attr(hid_t obj, const char* name, const std::vector<std::string>& v) {
  if (H5Aexists(obj, name) > 0) H5Adelete(obj, name);
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  const hsize_t n = v.size();
  hid_t s = H5Screate_simple(1, &n, nullptr);
  hid_t a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
  std::vector<const char*> p;
  for (const std::string& x : v) p.push_back(x.c_str());
  H5Awrite(a, t, p.data());
  H5Aclose(a);
  H5Sclose(s);
  H5Tclose(t);
}

// The case group's input_names attribute, set to its inputs in creation order.
inline void sync_input_names(hid_t f, const std::string& group) {
  hid_t g = H5Gopen2(f, group.c_str(), H5P_DEFAULT);
  hid_t in = H5Gopen2(g, "inputs", H5P_DEFAULT);
  H5G_info_t info;
  H5Gget_info(in, &info);
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    char name[256] = {};
    H5Lget_name_by_idx(in, ".", H5_INDEX_CRT_ORDER, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT);
    names.push_back(name);
  }
  set_string_list_attr(g, "input_names", names);
  H5Gclose(in);
  H5Gclose(g);
}

struct CliResult {
  int exit_code = -1;
  std::string out, err;
};

// Runs build/deltacheck with `args` (already shell-quoted where needed).
inline CliResult run_cli(const std::string& args, const TempDir& dir) {
  const std::string out = dir / "cli.out", err = dir / "cli.err";
  const std::string cmd = std::string(DELTACHECK_BINARY_DIR) + "/deltacheck " + args + " >" + out +
                          " 2>" + err + " </dev/null";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ostringstream o, e;
  o << std::ifstream(out).rdbuf();
  e << std::ifstream(err).rdbuf();
  r.out = o.str();
  r.err = e.str();
  return r;
}

inline std::string quote(const std::string& s) { return "'" + s + "'"; }

inline int lines(const std::string& s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

// The contract for a rejected input: exit 2, nothing on stdout, one line on stderr
// "deltacheck: error: ..." that contains `error`.
inline void expect_one_line_error(const std::string& what, const CliResult& r,
                                  const std::string& error) {
  EXPECT_EQ(r.exit_code, 2) << what << ": " << r.out << r.err;
  EXPECT_EQ(r.out, "") << what;
  EXPECT_EQ(lines(r.err), 1) << what << ": " << r.err;
  EXPECT_EQ(r.err.rfind("deltacheck: error: ", 0), 0u) << what << ": " << r.err;
  EXPECT_NE(r.err.find(error), std::string::npos) << what << ": " << r.err;
}

// Whether the process is gone (no such process, or a zombie nobody waits for), within `seconds`;
// killed if not (a test leaves nothing behind).
inline bool gone(pid_t pid, double seconds = 5.0) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string stat;
    std::getline(f, stat);
    const size_t paren = stat.rfind(')');
    if (!f || (paren != std::string::npos && stat.compare(paren, 3, ") Z") == 0)) return true;
    if (std::chrono::steady_clock::now() - t0 > std::chrono::duration<double>(seconds)) {
      kill(pid, SIGKILL);
      return false;
    }
    usleep(20000);
  }
}

}  // namespace deltacheck::golden::testing
