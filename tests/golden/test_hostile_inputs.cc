// Hostile inputs on every path into the tool: case ids, command-line options, fixture files
// (with checksums forged, so that only the semantic checks stand between a bad file and a
// kernel), and external programs that misbehave. Every bad input gets one line
// "deltacheck: error: <thing>: <rule>" on stderr, exit code 2 and nothing on stdout — or, for
// an external program, the verdict error and a clean temporary folder.
//
// DELTACHECK_PRINT_TABLE=1 prints each input with the error it got (the table in
// docs/reliability.md).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>

#include "backends/registry.h"
#include "deltacheck_test_paths.h"
#include "golden/sha256.h"
#include "golden_test_util.h"
#include "tests/deadline.h"

namespace deltacheck::golden {
namespace {

using deltacheck::testing::kDeadlineSeconds;
using testing::quote;
using testing::run_cli;
using testing::TempDir;

bool print_table() { return std::getenv("DELTACHECK_PRINT_TABLE") != nullptr; }

using testing::lines;

// The contract for a rejected input (testing::expect_usage_error), and a short line.
void expect_usage_error(const std::string& what, const testing::CliResult& r,
                        const std::string& error) {
  testing::expect_one_line_error(what, r, error);
  EXPECT_LT(r.err.size(), 1000u) << what << ": the line quotes hostile text whole";
  if (print_table())
    std::printf("TABLE | %s | %s\n", what.c_str(), r.err.substr(0, r.err.size() - 1).c_str());
}

// --- case ids and options -----------------------------------------------------------------

struct BadArgs {
  std::string what, args, error;
};

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

std::vector<BadArgs> bad_args() {
  const std::string run = "run --no-probes --case ";
  return {
      {"empty case id", run + "''", "case id '': expected op(key=value,...)"},
      {"no parentheses", run + "gdr", "expected op(key=value,...)"},
      {"unknown op", run + quote("conv(x=1)"), "unknown operation 'conv'"},
      {"unknown parameter", run + quote("gdr(heads=2)"), "unknown parameter 'heads' for gdr"},
      {"parameter twice", run + quote("gdr(H=2,H=2)"), "parameter 'H' given twice"},
      {"not key=value", run + quote("gdr(=1)"), "'=1' is not key=value"},
      {"not an integer", run + quote("gdr(H=two)"), "'two' is not an integer"},
      {"hex integer", run + quote("gdr(seed=0x10)"), "'0x10' is not an integer"},
      {"20-digit integer", run + quote("gdr(seed=99999999999999999999)"),
       "99999999999999999999 is outside [0, 4611686018427387904]"},
      {"integer beyond int64 in a layout", run + quote("gdr(layout=packed[9999999999999999999])"),
       "'9999999999999999999' is not a length or L*N"},
      {"integer out of range", run + quote("gdr(K=0)"), "0 is outside [1, 1024]"},
      {"negative length", run + quote("gdr(layout=packed[5,-1])"), "'-1' is not a length"},
      {"batch overflowing int64", run + quote("gdr(layout=batch[2x4611686018427387904])"),
       "B*T < 2^31"},
      {"more than 2^31 tokens", run + quote("gdr(layout=packed[2147483647,1])"),
       "more than 2^31 tokens"},
      {"more than a million sequences", run + quote("gdr(layout=packed[1*999999,1*2])"),
       "more than 1000000 sequences"},
      {"repeat count beyond int64", run + quote("gdr(layout=packed[1*99999999999999999999])"),
       "is not a length or L*N"},
      {"unbalanced bracket", run + quote("gdr(layout=packed[1,2)"), "unbalanced '['"},
      {"deep brackets (100000)", run + quote("gdr(layout=" + repeat("[", 100000) + ")"),
       "unbalanced '['"},
      {"closing bracket first", run + quote("gdr(layout=]1[)"), "unbalanced ']'"},
      {"empty layout", run + quote("gdr(layout=packed[])"), "no sequences"},
      {"unknown layout kind", run + quote("gdr(layout=ragged[1,2])"), "unknown layout kind"},
      {"choice not in the list", run + quote("gdr(dtype=fp8)"), "'fp8' is not one of fp32"},
      {"unicode digit", run + quote("gdr(H=\u0663)"), "byte 0xD9 at position 6 is not printable"},
      {"unicode in a choice", run + quote("gdr(dtype=fp32\u00e9)"), "is not printable ASCII"},
      {"control character", run + "\"$(printf 'gdr(H=2,\\nK=8)')\"", "byte 0x0A at position 8"},
      {"HV not a multiple of H", run + quote("gdr(H=2,HV=3)"), "HV % H != 0"},
      {"state with cache=none", run + quote("gdr(cache=none,state=rand)"),
       "cache=none takes no initial state"},
      {"unknown layer type", run + quote("layers(pattern=linear+mamba3)"), "unknown layer 'mamba3'"},
      {"very long parameter list (20000 x H=2)",
       run + quote("gdr(" + repeat("H=2,", 20000) + "K=8)"), "parameter 'H' given twice"},
      {"case over --max-memory",
       run + quote("gdr(layout=single[2000000000],HV=64,V=1024)") + " --max-memory 16G",
       "over --max-memory 17.2 GB"},
      {"--jobs 0", "run --jobs 0", "--jobs must be in [1, 1024]"},
      {"--jobs 100000", "run --jobs 100000", "--jobs must be in [1, 1024]"},
      {"--jobs not a number", "run --jobs many", "--jobs"},
      {"--prepare-ahead with jobs", "run --prepare-ahead --jobs 2",
       "--prepare-ahead is for one job: with --jobs 2 cases overlap already"},
      {"--seed negative", "run --seed -5", "--seed: Value -5 not in range"},
      {"--seed beyond 2^62", "run --seed 4611686018427387905", "--seed"},
      {"--timeout NaN", "run --isolate --timeout nan", "--timeout must be a positive number"},
      {"--timeout negative", "run --backend external --cmd 'x {in} {out}' --timeout -1",
       "--timeout must be a positive number"},
      {"--max-memory unit", "run --max-memory 12Q", "'12Q' is not a memory size"},
      {"--max-memory negative", "run --max-memory -5G", "'-5G' is not a memory size"},
      {"--max-memory over 100%", "run --max-memory 200%", "'200%' is not a memory size"},
      {"--max-dumps negative", "run --max-dumps -1", "--max-dumps: Value -1 not in range"},
      {"--shard N = 0", "run --shard 1/0", "expected I/N with 0 <= I < N"},
      {"--shard I >= N", "run --shard 3/2", "expected I/N with 0 <= I < N"},
      {"--shard not numbers", "run --shard a/b", "expected I/N with 0 <= I < N"},
      {"--shard N beyond 999999", "run --shard 0/1000000", "at most 999999 shards"},
      {"--fail-on unknown verdict", "run --fail-on bogus", "unknown verdict 'bogus'"},
      {"--progress unknown", "run --progress bogus", "--progress"},
      {"--backend empty", "run --backend ''", "no backend given"},
      {"--backend unknown", "run --backend nonexistent", "unknown backend 'nonexistent'"},
      {"--backend twice", "run --backend cpu,cpu", "'cpu' is given twice"},
      {"--backend external without --cmd", "run --backend external",
       "needs --cmd 'PROGRAM {in} {out}'"},
      {"--backend external without {in} {out}", "run --backend external --cmd true",
       "--cmd must contain {in}"},
      {"--filter invalid regex", "run --filter '('", "is not a valid regex"},
      {"--suite unknown", "run --suite nosuch", "unknown suite 'nosuch'"},
      {"--filter selecting nothing", "run --filter 'no such case'", "no case selected"},
      {"--report-dir uncreatable", "run --report-dir /proc/deltacheck", "--report-dir"},
      {"golden generate into a missing folder", "golden generate -o /nonexistent/dir/x.h5",
       "folder /nonexistent/dir/ does not exist"},
      {"golden generate from a missing case list",
       "golden generate --cases-from /nonexistent -o x.h5", "cannot read the case list"},
      {"fixture missing", "golden verify /nonexistent.h5", "cannot open: No such file"},
      {"fixture is a device", "golden verify /dev/null", "not a regular file"},
      {"fixture is a folder", "golden verify /tmp", "not a regular file"},
      {"report merge of a missing folder", "report merge /nonexistent -o out", "/nonexistent"},
  };
}

class BadArgsCli : public ::testing::TestWithParam<BadArgs> {};

// Runs the tool in `dir/work` (so that any file it writes shows up there).
// With `deadline`, the tool is killed after that many seconds (exit code -1): a test of something
// that must not hang fails instead of hanging, without asserting on how long it took.
testing::CliResult run_in(const TempDir& dir, const std::string& args, int deadline = 0) {
  std::filesystem::create_directories(dir / "work");
  const std::string kill = deadline > 0 ? "timeout -s KILL " + std::to_string(deadline) + " " : "";
  const std::string cmd = "cd " + (dir / "work") + " && " + kill + DELTACHECK_BINARY_DIR +
                          "/deltacheck " + args + " >" + (dir / "cli.out") + " 2>" +
                          (dir / "cli.err") + " </dev/null";
  const int status = std::system(cmd.c_str());
  testing::CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ostringstream o, e;
  o << std::ifstream(dir / "cli.out").rdbuf();
  e << std::ifstream(dir / "cli.err").rdbuf();
  r.out = o.str();
  r.err = e.str();
  return r;
}

TEST_P(BadArgsCli, OneLineExitCode2NothingWritten) {
  TempDir dir;
  const BadArgs& b = GetParam();
  const auto r = run_in(dir, b.args);
  expect_usage_error(b.what, r, b.error);
  for (const auto& e : std::filesystem::directory_iterator(dir / "work"))
    ADD_FAILURE() << b.what << ": wrote " << e.path();
}

INSTANTIATE_TEST_SUITE_P(Hostile, BadArgsCli, ::testing::ValuesIn(bad_args()),
                         [](const auto& info) { return "row" + std::to_string(info.index); });

TEST(HostileCaseIds, AMillionSequenceListParsesInLinearTime) {
  // 400 000 separate lengths (not "1*N"): a quadratic parser would take minutes.
  std::string ids = "gdr(layout=packed[";
  for (int i = 0; i < 400000; ++i) ids += (i ? "," : "") + std::to_string(1 + i % 2);
  ids += "],H=1,HV=1,K=1,V=1)";
  // Parsed in a child killed at the deadline (a quadratic parse would be): no timing assertion.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(kDeadlineSeconds);
    const cases::Case c = cases::Case::parse(ids);
    _exit(cases::Layout::parse(c.get("layout")).num_seqs() == 400000 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << (WIFSIGNALED(status)
              ? "killed at the deadline (or crashed): signal " + std::to_string(WTERMSIG(status))
              : "wrong number of sequences");
}

// --- fixture files ------------------------------------------------------------------------

using cases::DType;

hid_t file_type_of(DType t) {
  switch (t) {
    case DType::kF32:
      return H5T_IEEE_F32LE;
    case DType::kF64:
      return H5T_IEEE_F64LE;
    case DType::kBF16:
    case DType::kF16:
      return H5T_STD_U16LE;
    case DType::kI32:
      return H5T_STD_I32LE;
    case DType::kI64:
      return H5T_STD_I64LE;
    case DType::kU8:
      return H5T_STD_U8LE;
  }
  return H5T_STD_U8LE;
}

using testing::sync_input_names;

// Replaces a dataset with `bytes` in the given dtype and shape, with a matching (forged) SHA-256
// and input list: only the semantic checks can reject it.
void forge_dataset(hid_t f, const std::string& path, DType dtype, std::vector<hsize_t> shape,
                   const std::vector<uint8_t>& bytes, bool allocate = true) {
  hid_t d = -1;
  if (H5Lexists(f, path.c_str(), H5P_DEFAULT) > 0) {
    // Same type and shape: in place, so that the inputs keep their creation order.
    d = H5Dopen2(f, path.c_str(), H5P_DEFAULT);
    hid_t t = H5Dget_type(d), sp = H5Dget_space(d);
    std::vector<hsize_t> dims(static_cast<size_t>(H5Sget_simple_extent_ndims(sp)));
    H5Sget_simple_extent_dims(sp, dims.data(), nullptr);
    const bool same = H5Tequal(t, file_type_of(dtype)) > 0 && dims == shape;
    H5Tclose(t);
    H5Sclose(sp);
    if (!same) {
      H5Dclose(d);
      d = -1;
      H5Ldelete(f, path.c_str(), H5P_DEFAULT);
    }
  }
  const bool created = d < 0;
  hid_t s = H5Screate_simple(static_cast<int>(shape.size()), shape.data(), nullptr);
  if (created)
    d = H5Dcreate2(f, path.c_str(), file_type_of(dtype), s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(d, 0) << path;
  if (allocate && !bytes.empty()) {
    ASSERT_GE(H5Dwrite(d, file_type_of(dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()), 0);
  }
  testing::set_string_attr(d, "dtype", cases::dtype_name(dtype));
  testing::set_string_attr(d, "sha256", sha256_hex(bytes.data(), bytes.size()));
  H5Dclose(d);
  H5Sclose(s);
  const size_t at = path.find("/inputs/");
  if (created && at != std::string::npos) sync_input_names(f, path.substr(0, at));
}

template <typename T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A dataset's raw bytes and shape.
std::vector<uint8_t> read_raw(hid_t f, const std::string& path, std::vector<hsize_t>* shape) {
  hid_t d = H5Dopen2(f, path.c_str(), H5P_DEFAULT);
  hid_t t = H5Dget_type(d), s = H5Dget_space(d);
  std::vector<hsize_t> dims(static_cast<size_t>(H5Sget_simple_extent_ndims(s)));
  H5Sget_simple_extent_dims(s, dims.data(), nullptr);
  hsize_t n = 1;
  for (hsize_t x : dims) n *= x;
  std::vector<uint8_t> b(n * H5Tget_size(t));
  H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, b.data());
  H5Tclose(t);
  H5Sclose(s);
  H5Dclose(d);
  if (shape) *shape = dims;
  return b;
}

// Changes elements of a dataset in place (same dtype and shape), forging its checksum.
template <typename T>
void edit_values(hid_t f, const std::string& path, DType dtype,
                 const std::function<void(std::vector<T>&)>& edit) {
  std::vector<hsize_t> shape;
  std::vector<uint8_t> raw = read_raw(f, path, &shape);
  std::vector<T> v(raw.size() / sizeof(T));
  std::memcpy(v.data(), raw.data(), raw.size());
  edit(v);
  forge_dataset(f, path, dtype, shape, as_bytes(v));
}

const char* kPacked = "gdr(layout=packed[5,0,7],H=1,HV=2,K=8,V=8,dtype=bf16,gate=strong,seed=3)";
const char* kPool = "gdr(layout=packed[1*6],H=1,HV=2,K=8,V=8,cache=pool,seed=2)";
const char* kPadding = "segments(source=padding,B=2,T=16,seed=1)";

struct BadFixture {
  std::string what;
  const char* case_id;
  std::function<void(hid_t f, const std::string& group)> edit;
  std::string error;
  std::string extra_args = "";
};

std::function<void(hid_t, const std::string&)> cu_seqlens(std::vector<int64_t> cu) {
  return [cu](hid_t f, const std::string& g) {
    forge_dataset(f, g + "/inputs/cu_seqlens", DType::kI64, {cu.size()}, as_bytes(cu));
  };
}

std::vector<BadFixture> bad_fixtures() {
  return {
      {"cu_seqlens not non-decreasing", kPacked, cu_seqlens({0, 7, 5, 12}),
       "inputs/cu_seqlens: decreases at index 2 (5 after 7): must be non-decreasing"},
      {"cu_seqlens not starting at 0", kPacked, cu_seqlens({1, 5, 5, 12}),
       "inputs/cu_seqlens: cu_seqlens[0] is 1, must be 0"},
      {"cu_seqlens negative", kPacked, cu_seqlens({0, -3, 5, 12}),
       "inputs/cu_seqlens: cu_seqlens[1] = -3 is negative"},
      {"cu_seqlens not ending at T", kPacked, cu_seqlens({0, 5, 5, 11}),
       "inputs/cu_seqlens: ends at 11, must end at the token count T = 12"},
      {"cu_seqlens beyond int32", kPacked, cu_seqlens({0, 5, int64_t{1} << 32, 12}),
       "inputs/cu_seqlens: cu_seqlens[2] = 4294967296 is beyond int32"},
      {"cu_seqlens valid but not the layout's", kPacked, cu_seqlens({0, 6, 6, 12}),
       "inputs/cu_seqlens: cu_seqlens[1] = 6 differs from the case's 5 (layout packed[5,0,7])"},
      {"state slot out of range", kPool,
       [](hid_t f, const std::string& g) {
         edit_values<int32_t>(f, g + "/inputs/state_slots", DType::kI32,
                              [](std::vector<int32_t>& v) { v[0] = 99; });
       },
       "inputs/state_slots: slot 99 of sequence 0 is out of range: the pool has 10 rows"},
      {"state slot addressed twice", kPool,
       [](hid_t f, const std::string& g) {
         edit_values<int32_t>(f, g + "/inputs/state_slots", DType::kI32,
                              [](std::vector<int32_t>& v) { v[1] = v[0]; });
       },
       "is addressed by sequences 0 and 1: duplicates are not allowed"},
      {"state slots valid but not the case's", kPool,
       [](hid_t f, const std::string& g) {
         edit_values<int32_t>(f, g + "/inputs/state_slots", DType::kI32,
                              [](std::vector<int32_t>& v) { std::swap(v[0], v[1]); });
       },
       "inputs/state_slots: differs at index 0"},
      {"input of the wrong shape", kPacked,
       [](hid_t f, const std::string& g) {
         forge_dataset(f, g + "/inputs/q", DType::kBF16, {1, 11, 1, 8},
                       std::vector<uint8_t>(11 * 8 * 2, 0));
       },
       "inputs/q: shape [1,11,1,8], the case implies [1,12,1,8]"},
      {"input of the wrong dtype", kPacked,
       [](hid_t f, const std::string& g) {
         forge_dataset(f, g + "/inputs/q", DType::kF32, {1, 12, 1, 8},
                       std::vector<uint8_t>(12 * 8 * 4, 0));
       },
       "inputs/q: dtype fp32, the case implies bf16"},
      {"an input the case does not have", kPacked,
       [](hid_t f, const std::string& g) {
         forge_dataset(f, g + "/inputs/bogus", DType::kF32, {2}, std::vector<uint8_t>(8, 0));
       },
       "inputs/bogus: not an input of this case"},
      {"an input missing", kPacked,
       [](hid_t f, const std::string& g) {
         H5Ldelete(f, (g + "/inputs/initial_state").c_str(), H5P_DEFAULT);
         sync_input_names(f, g);
       },
       "inputs/initial_state: missing (the case has q, k, v, g, beta, cu_seqlens, "
       "initial_state)"},
      {"NaN in an input", kPacked,
       [](hid_t f, const std::string& g) {
         edit_values<uint16_t>(f, g + "/inputs/v", DType::kBF16,
                               [](std::vector<uint16_t>& v) { v[4] = 0x7fc0; });
       },
       "inputs/v: non-finite value NaN at index 4: inputs must be finite"},
      {"infinity in an input", kPacked,
       [](hid_t f, const std::string& g) {
         edit_values<float>(f, g + "/inputs/g", DType::kF32,
                            [](std::vector<float>& v) { v[0] = -INFINITY; });
       },
       "inputs/g: non-finite value -inf at index 0"},
      {"NaN in an expected output", kPacked,
       [](hid_t f, const std::string& g) {
         edit_values<double>(f, g + "/expected/o", DType::kF64,
                             [](std::vector<double>& v) { v[7] = std::nan(""); });
       },
       "expected/o: non-finite value nan at index 7"},
      {"expected output of the wrong shape", kPacked,
       [](hid_t f, const std::string& g) {
         forge_dataset(f, g + "/expected/o", DType::kF64, {12, 16},
                       std::vector<uint8_t>(12 * 16 * 8, 0));
       },
       "expected/o: shape [12,16] differs from output [1,12,2,8]"},
      {"padding mask holding 2", kPadding,
       [](hid_t f, const std::string& g) {
         edit_values<uint8_t>(f, g + "/inputs/padding_mask", DType::kU8,
                              [](std::vector<uint8_t>& v) { v[3] = 2; });
       },
       "inputs/padding_mask: value 2 at index 3: a padding mask holds 0 or 1"},
      {"unknown dtype attribute", kPacked,
       [](hid_t f, const std::string& g) {
         hid_t d = H5Dopen2(f, (g + "/inputs/q").c_str(), H5P_DEFAULT);
         testing::set_string_attr(d, "dtype", "complex64");
         H5Dclose(d);
       },
       "inputs/q: unknown dtype 'complex64'"},
      {"checksum mismatch", kPacked,
       [](hid_t f, const std::string& g) {
         hid_t d = H5Dopen2(f, (g + "/inputs/k").c_str(), H5P_DEFAULT);
         testing::set_string_attr(d, "sha256", std::string(64, '0'));
         H5Dclose(d);
       },
       "inputs/k: checksum mismatch"},
      {"a dataset claiming 275 GB (nothing stored)", kPacked,
       [](hid_t f, const std::string& g) {
         forge_dataset(f, g + "/inputs/q", DType::kF32, {hsize_t{1} << 36}, {}, false);
       },
       "inputs/q: reading it would exceed the memory limit of 1.07 GB (--max-memory",
       " --max-memory 1G"},
      {"a dataset claiming 4 TB", kPacked,
       [](hid_t f, const std::string& g) {
         forge_dataset(f, g + "/inputs/q", DType::kF32, {hsize_t{1} << 40}, {}, false);
       },
       "inputs/q: implausible shape"},
      {"a case over --max-memory", kPacked, [](hid_t, const std::string&) {},
       "reading it would exceed the memory limit of 1.02 kB", " --max-memory 1K"},
      {"unknown format version", kPacked,
       [](hid_t f, const std::string&) { testing::set_int_attr(f, "format_version", 99); },
       "unknown format version 99 (this build reads version 1)"},
      {"case id whose HV % H != 0", kPacked,
       [](hid_t f, const std::string& g) {
         const std::string bad = "gdr(layout=packed[5,0,7],H=2,HV=3,seed=3)";
         H5Lmove(f, g.c_str(), f, escape_case_id(bad).c_str(), H5P_DEFAULT, H5P_DEFAULT);
         hid_t gid = H5Gopen2(f, escape_case_id(bad).c_str(), H5P_DEFAULT);
         testing::set_string_attr(gid, "case_id", bad);
         H5Gclose(gid);
       },
       "HV % H != 0"},
      {"case id with a non-ASCII byte", kPacked,
       [](hid_t f, const std::string& g) {
         const std::string bad = "gdr(layout=packed[5,0,7],dtype=bf16\xc3\xa9)";
         H5Lmove(f, g.c_str(), f, escape_case_id(bad).c_str(), H5P_DEFAULT, H5P_DEFAULT);
         hid_t gid = H5Gopen2(f, escape_case_id(bad).c_str(), H5P_DEFAULT);
         testing::set_string_attr(gid, "case_id", bad);
         H5Gclose(gid);
       },
       "byte 0xC3 at position 35 is not printable ASCII"},
  };
}

class BadFixtureFile : public ::testing::TestWithParam<BadFixture> {};

TEST_P(BadFixtureFile, RejectedBeforeAnythingRuns) {
  TempDir dir;
  const BadFixture& b = GetParam();
  const std::string file = dir / "bad.h5";
  testing::write_fixture(file, {cases::Case::parse(b.case_id)});
  const std::string group = "/" + escape_case_id(cases::Case::parse(b.case_id).id());
  testing::edit_file(file, [&](hid_t f) { b.edit(f, group); });
  for (const std::string sub : {"verify", "check"}) {
    const auto r = run_cli("golden " + sub + " " + file + b.extra_args, dir);
    expect_usage_error(b.what + " [golden " + sub + "]", r, b.error);
    EXPECT_EQ(r.err.rfind("deltacheck: error: " + file + ": ", 0), 0u) << r.err;
  }
}

INSTANTIATE_TEST_SUITE_P(Hostile, BadFixtureFile, ::testing::ValuesIn(bad_fixtures()),
                         [](const auto& info) { return "row" + std::to_string(info.index); });

// --- crash isolation from the command line (--isolate) ------------------------------------

TEST(IsolateCli, CrashingAndHangingBackendsAreErrorsAndTheRunGoesOn) {
  TempDir dir;
  const std::string cases =
      " --case 'gdr(layout=packed[5,0,7],H=1,HV=2,K=8,V=8,seed=1)'"
      " --case 'gdr(layout=packed[1*4],H=1,HV=2,K=8,V=8,cache=decode,seed=2)'"
      " --case 'gdr(layout=packed[5,7],H=1,HV=2,K=8,V=8,seed=3)'";
  // The timeout leaves room for a sanitizer build's SEGV report (symbolizing its stack takes
  // over a second on a loaded machine); the hanging backend costs it once.
  auto r = run_in(
      dir, "run --backend wrong:segfault,wrong:hang --isolate --timeout 5 --no-probes" + cases);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  // (A sanitizer build of deltacheck reports the SEGV and exits instead of dying of it.)
  EXPECT_TRUE(r.out.find("crashed with SIGSEGV (Segmentation fault)") != std::string::npos ||
              r.out.find("exited with code") != std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("timed out after 5 s (killed)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("3 cases x 2 backends: 4 pass, 2 error"), std::string::npos) << r.out;
  // Without --isolate they decline instead of taking deltacheck down.
  r = run_in(dir, "run --backend wrong:segfault --no-probes" + cases);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("crashes on purpose: run it with --isolate"), std::string::npos) << r.out;
}

// --- regressions found by fuzzing (fuzz/, scripts/fuzz.sh) ----------------------------------

TEST(FuzzRegressions, AFileOnWhichTheHdf5LibraryLoopsForeverIsAnInputError) {
  // fuzz_fixture_reader, raw bytes: libhdf5 1.10 loops forever reading an attribute of this
  // 12 kB file. The first reading of a fixture runs in a child process with a deadline.
  TempDir dir;
  const std::string file =
      std::string(DELTACHECK_SOURCE_DIR) + "/fuzz/regressions/hdf5-loops-forever.h5";
  for (const std::string sub : {"inspect", "check", "verify"}) {
    // Its own --timeout kills the reading; a deadline far beyond it catches a kill that failed.
    const auto r = run_in(dir, "golden " + sub + " " + file + " --timeout 1", kDeadlineSeconds);
    expect_usage_error("a file on which the HDF5 library loops forever [golden " + sub + "]", r,
                       "reading it timed out after 1 s (killed)");
  }
}

TEST(FuzzRegressions, EmptyDatasetsHashWithoutANullPointer) {
  // fuzz_fixture_reader, UBSan: SHA-256 of an empty dataset (an empty std::vector, whose data()
  // may be null) passed memcpy a null pointer.
  const std::vector<double> empty;
  EXPECT_EQ(sha256_hex(empty.data(), 0),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex(nullptr, 0), sha256_hex("", 0));
}

// --- external programs --------------------------------------------------------------------

class HostileProgram : public ::testing::Test {
 protected:
  void SetUp() override {
    pc_ = std::make_unique<harness::PreparedCase>(harness::prepare(
        cases::Case::parse("gdr(layout=packed[6,0,9],H=1,HV=2,K=8,V=8,dtype=bf16,seed=2)")));
    ASSERT_TRUE(std::filesystem::create_directory(dir_ / "tmp"));
    setenv("TMPDIR", (dir_ / "tmp").c_str(), 1);
  }
  void TearDown() override { unsetenv("TMPDIR"); }

  harness::CaseResult run(const std::string& what, const std::string& cmd, double timeout_s = 30) {
    harness::BackendOptions o;
    o.cmd = cmd;
    o.timeout_s = timeout_s;
    auto backend = backends::make_backend("external", o);
    harness::CaseResult r = harness::run_case(*pc_, *backend);
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_ / "tmp"), {}), 0)
        << what << ": temporary folder left behind";
    EXPECT_EQ(r.verdict, harness::Verdict::kError) << what << ": " << r.message;
    if (print_table())
      std::printf("TABLE | %s | verdict error: %s\n", what.c_str(), r.message.c_str());
    return r;
  }

  TempDir dir_;
  std::unique_ptr<harness::PreparedCase> pc_;
};

TEST_F(HostileProgram, OutIsAFifo) {
  // HDF5 would block forever opening a FIFO for reading.
  const auto r = run("{out} is a FIFO", "mkfifo {out}; : {in}");
  EXPECT_NE(r.message.find("{out} is not a regular file"), std::string::npos) << r.message;
}

TEST_F(HostileProgram, OutIsALinkToADevice) {
  const auto r = run("{out} links to /dev/zero", "ln -s /dev/zero {out}; : {in}");
  EXPECT_NE(r.message.find("{out} is not a regular file"), std::string::npos) << r.message;
}

TEST_F(HostileProgram, OutputOverTheSizeLimit) {
  // The outputs here take ~1 kB: the limit is 4x that plus 64 MiB.
  const auto r = run("{out} of 80 MB", ": {in}; head -c 80000000 /dev/zero > {out}");
  EXPECT_NE(r.message.find("larger than the output-size limit of"), std::string::npos) << r.message;
}

TEST_F(HostileProgram, GarbageOutput) {
  const auto r = run("{out} is not HDF5", "echo garbage > {out}; : {in}");
  EXPECT_NE(r.message.find("{out} is not a readable HDF5 file"), std::string::npos) << r.message;
}

TEST_F(HostileProgram, TemporaryFilesGoToTheCaseFolderAndAreRemovedEvenWhenLocked) {
  // The program's TMPDIR is the case's folder; it leaves a locked folder and files there.
  const auto r = run("leaves a chmod-000 folder in its TMPDIR",
                     "case \"$TMPDIR\" in */deltacheck-external-*) ;; *) exit 9;; esac; "
                     "mkdir -p \"$TMPDIR/locked/deep\" && touch \"$TMPDIR/locked/deep/f\" && "
                     "chmod 000 \"$TMPDIR/locked\"; exit 4; : {in} {out}");
  EXPECT_NE(r.message.find("exited with code 4"), std::string::npos) << r.message;
}

TEST_F(HostileProgram, FoldersOfAKilledRunAreRemovedByTheNextRun) {
  // A folder whose owner is gone (nobody holds its lock), and one of a living run (its lock
  // held, here by this test) that must stay.
  const std::string stale = dir_ / "tmp/deltacheck-external-4194305-abcdef";
  const std::string alive = dir_ / ("tmp/deltacheck-external-" + std::to_string(getpid()) + "-x");
  std::filesystem::create_directories(stale + "/sub");
  std::filesystem::create_directories(alive);
  const int lock = ::open(alive.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_EQ(flock(lock, LOCK_EX), 0);
  harness::BackendOptions o;
  o.cmd = "exit 1; : {in} {out}";
  auto backend = backends::make_backend("external", o);
  (void)harness::run_case(*pc_, *backend);
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_TRUE(std::filesystem::exists(alive));
  ::close(lock);
  std::filesystem::remove_all(alive);
}

}  // namespace
}  // namespace deltacheck::golden
