// deltacheck golden on the command line: generate -> verify -> check -> inspect on a small
// selection, and every kind of bad fixture answered with one line naming the file and the
// problem, exit code 2, and no output file touched.
#include <gtest/gtest.h>

#include "golden_test_util.h"

namespace deltacheck::golden {
namespace {

using testing::quote;
using testing::run_cli;
using testing::TempDir;

const char* kSelection = "--suite smoke --filter 'layout=packed\\[63,0,65\\].*K=60'";

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

TEST(GoldenCli, GenerateVerifyCheckInspect) {
  TempDir dir;
  const std::string f = dir / "g.h5";
  auto r = run_cli(std::string("golden generate ") + kSelection + " -o " + f, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(f + ": 1 cases"), std::string::npos) << r.out;
  r = run_cli("golden verify " + f + " --backend cpu,wrong:ignore-cu-seqlens", dir);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;  // the wrong backend leaks
  EXPECT_NE(r.out.find("PASS        cpu"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("LEAK        wrong:ignore-cu-seqlens"), std::string::npos) << r.out;
  r = run_cli("golden verify " + f + " --backend cpu", dir);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  r = run_cli("golden check " + f, dir);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("0 drifted; inputs bit-identical"), std::string::npos) << r.out;
  r = run_cli("golden inspect " + f, dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("inputs  /q                 fp32  [1,128,2,60]"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("expected/o                 fp64  [1,128,4,60]"), std::string::npos)
      << r.out;
}

TEST(GoldenCli, CheckReportsDriftWithExitCode1) {
  TempDir dir;
  const std::string f = dir / "drift.h5";
  FixtureWriter w;
  ASSERT_TRUE(w.open(f, {}).ok());
  for (const cases::Case& c : testing::small_cases()) {
    FixtureCase fc = make_fixture_case(c);
    if (c.get("dtype") == "fp32") fc.inputs.at("v").set(7, fc.inputs.at("v").get(7) + 0.25);
    ASSERT_TRUE(w.add(fc).ok());  // a consistent file (checksums of the changed data)
  }
  ASSERT_TRUE(w.commit().ok());
  const auto r = run_cli("golden check " + f, dir);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("OK     gdr(layout=packed[5,0,7]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("DRIFT  gdr(layout=batch[2x6]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("input 'v': 1 of 96 elements differ, first at 7"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("1 drifted"), std::string::npos) << r.out;
}

TEST(GoldenCli, InspectOfACaseNotInTheFileIsAnError) {
  TempDir dir;
  testing::write_fixture(dir / "f.h5", testing::small_cases());
  auto r = run_cli("golden inspect " + (dir / "f.h5") + " 'gdr(layout=single[3])'", dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("is not in the file"), std::string::npos) << r.err;
  // A non-canonical spelling of a stored id finds it.
  r = run_cli("golden inspect " + (dir / "f.h5") +
                  " 'gdr(seed=4,layout=batch[2x6],H=2,K=8,V=4,state=none)'",
              dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("sha256 "), std::string::npos);
}

// A generated fixture and copies of it damaged in several ways.
class BadFixtureCli : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::write_fixture(good_, testing::small_cases());
    std::filesystem::copy_file(good_, bad_);
    group_ = "/" + escape_case_id(testing::small_cases()[0].id());
  }
  // Every subcommand that reads the file gives the same one-line error and exit code 2.
  void expect_rejected(const std::string& problem) {
    for (const std::string sub : {"verify", "check", "inspect"}) {
      const auto r = run_cli("golden " + sub + " " + bad_, dir_);
      EXPECT_EQ(r.exit_code, 2) << sub << ": " << r.out << r.err;
      EXPECT_EQ(r.out, "") << sub;  // nothing printed before the error
      EXPECT_EQ(lines(r.err), 1) << r.err;
      EXPECT_EQ(r.err.rfind("deltacheck: error: " + bad_ + ": ", 0), 0u) << r.err;
      EXPECT_NE(r.err.find(problem), std::string::npos) << sub << ": " << r.err;
    }
  }
  TempDir dir_;
  std::string good_ = dir_ / "good.h5", bad_ = dir_ / "bad.h5", group_;
};

TEST_F(BadFixtureCli, FlippedByte) {
  std::vector<char> bytes = testing::read_bytes(bad_);
  bytes[testing::data_offset(bad_, group_ + "/inputs/q")] ^= 0x01;
  testing::write_bytes(bad_, bytes);
  expect_rejected("inputs/q: checksum mismatch");
}

TEST_F(BadFixtureCli, Truncated) {
  std::vector<char> bytes = testing::read_bytes(bad_);
  bytes.resize(bytes.size() - 100);
  testing::write_bytes(bad_, bytes);
  expect_rejected("truncated");
}

TEST_F(BadFixtureCli, RemovedDataset) {
  testing::edit_file(bad_, [&](hid_t f) { H5Ldelete(f, (group_ + "/expected/o").c_str(), 0); });
  expect_rejected("expected/o: dataset missing");
}

TEST_F(BadFixtureCli, UnknownFormatVersion) {
  testing::edit_file(bad_, [](hid_t f) { testing::set_int_attr(f, "format_version", 2); });
  expect_rejected("unknown format version 2 (this build reads version 1)");
}

TEST_F(BadFixtureCli, UnparsableCaseId) {
  const std::string id = "gdr(layout=packed[5,0,7],H=1,HV=3,seed=3)";      // HV % H fine; K default
  const std::string bad_id = "gdr(layout=packed[5,0,7],H=2,HV=3,seed=3)";  // HV % H != 0
  testing::edit_file(bad_, [&](hid_t f) {
    H5Lmove(f, group_.c_str(), f, escape_case_id(bad_id).c_str(), H5P_DEFAULT, H5P_DEFAULT);
    hid_t g = H5Gopen2(f, escape_case_id(bad_id).c_str(), H5P_DEFAULT);
    testing::set_string_attr(g, "case_id", bad_id);
    H5Gclose(g);
  });
  expect_rejected("case id does not parse: case id '" + bad_id + "': HV % H != 0");
}

TEST_F(BadFixtureCli, MissingFileAndNotAFixture) {
  std::filesystem::remove(bad_);
  expect_rejected("cannot open: No such file or directory");
  testing::write_bytes(bad_, std::vector<char>(4096, 'x'));
  expect_rejected("not a readable HDF5 file");
}

TEST(GoldenCliGenerate, FailureLeavesTheDestinationUntouched) {
  TempDir dir;
  const std::string f = dir / "keep.h5";
  testing::write_bytes(f, {'o', 'l', 'd'});
  // An unknown suite and a bad id: usage errors before anything is written.
  for (const std::string args : {"--suite nope", "--case 'gdr(H=2,HV=3)'"}) {
    const auto r = run_cli("golden generate " + args + " -o " + f, dir);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_EQ(testing::read_bytes(f), (std::vector<char>{'o', 'l', 'd'}));
  }
  // A folder that does not exist.
  const auto r =
      run_cli(std::string("golden generate ") + kSelection + " -o " + (dir / "no/x.h5"), dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind("deltacheck: error: " + (dir / "no/x.h5") + ": folder", 0), 0u) << r.err;
  // Nothing but the untouched file (and the tool's captured output) in the folder.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    files += e.path().filename().string().rfind("cli.", 0) != 0;
  EXPECT_EQ(files, 1);
}

TEST(GoldenCliExternal, NeedsACommandWithPlaceholders) {
  TempDir dir;
  auto r = run_cli("run --suite smoke --backend external", dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--backend external needs --cmd"), std::string::npos) << r.err;
  r = run_cli("run --suite smoke --backend external --cmd " + quote("cat {in}"), dir);
  EXPECT_EQ(r.exit_code, 2);
}

}  // namespace
}  // namespace deltacheck::golden
