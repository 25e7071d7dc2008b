// The fixture format: write -> read round trip, reproducible bytes, atomic writes, and each kind
// of damaged file rejected with an error naming the problem.
#include <gtest/gtest.h>

#include <cstring>

#include "cases/generator_version.h"
#include "golden_test_util.h"

namespace deltacheck::golden {
namespace {

using testing::TempDir;

void expect_same_tensors(const cases::TensorMap& a, const cases::TensorMap& b) {
  ASSERT_EQ(a.all().size(), b.all().size());
  for (size_t i = 0; i < a.all().size(); ++i) {
    const cases::Tensor &x = a.all()[i], &y = b.all()[i];
    EXPECT_EQ(x.name(), y.name());
    EXPECT_EQ(x.dtype(), y.dtype()) << x.name();
    EXPECT_EQ(x.shape(), y.shape()) << x.name();
    ASSERT_EQ(x.nbytes(), y.nbytes()) << x.name();
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.nbytes()), 0) << x.name();
  }
}

TEST(GoldenFormat, RoundTripKeepsEveryBitAndAttribute) {
  TempDir dir;
  const auto cs = testing::small_cases();
  testing::write_fixture(dir / "f.h5", cs);
  FixtureReader r;
  ASSERT_TRUE(r.open(dir / "f.h5").ok());
  EXPECT_EQ(r.info().format_version, kFormatVersion);
  EXPECT_EQ(r.info().tolerance_policy, "tol-v1");
  ASSERT_EQ(r.case_groups().size(), cs.size());
  for (size_t i = 0; i < cs.size(); ++i) {
    const FixtureCase want = make_fixture_case(cs[i]);
    StatusOr<FixtureCase> got = r.read(i);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(got.value().c.id(), cs[i].id());  // in the order written
    EXPECT_EQ(got.value().generator_version, cases::kGeneratorVersion);
    expect_same_tensors(got.value().inputs, want.inputs);
    EXPECT_EQ(got.value().expected, want.expected);  // FP64, bit for bit
    ASSERT_EQ(got.value().outputs.size(), want.outputs.size());
    for (size_t j = 0; j < want.outputs.size(); ++j) {
      EXPECT_EQ(got.value().outputs[j].name, want.outputs[j].name);
      EXPECT_EQ(got.value().outputs[j].dtype, want.outputs[j].dtype);
      EXPECT_EQ(got.value().outputs[j].shape, want.outputs[j].shape);
    }
    for (const DatasetInfo& d : got.value().datasets) EXPECT_EQ(d.sha256.size(), 64u);
  }
  // bf16 inputs are stored as their bits with the dtype recorded.
  EXPECT_EQ(r.read(0).value().inputs.at("q").dtype(), cases::DType::kBF16);
}

TEST(GoldenFormat, SameCasesGiveTheSameBytes) {
  TempDir dir;
  testing::write_fixture(dir / "a.h5", testing::small_cases());
  testing::write_fixture(dir / "b.h5", testing::small_cases());
  EXPECT_EQ(testing::read_bytes(dir / "a.h5"), testing::read_bytes(dir / "b.h5"));
}

TEST(GoldenFormat, CaseIdsWithSlashesAreEscaped) {
  EXPECT_EQ(escape_case_id("op(a=1/2,b=50%)"), "op(a=1%2F2,b=50%25)");
  for (const std::string id : {"op(a=1/2,b=50%)", "x%2F/y", "plain(a=1)", "%%//"})
    EXPECT_EQ(unescape_case_id(escape_case_id(id)), id);
  EXPECT_EQ(escape_case_id("a/b").find('/'), std::string::npos);
}

TEST(GoldenFormat, WriterLeavesNothingBehindWithoutCommit) {
  TempDir dir;
  testing::write_bytes(dir / "keep.h5", {'o', 'l', 'd'});
  {
    FixtureWriter w;
    ASSERT_TRUE(w.open(dir / "keep.h5", {}).ok());
    ASSERT_TRUE(w.add(make_fixture_case(testing::small_cases()[0])).ok());
    EXPECT_TRUE(std::filesystem::exists(w.temp_path()));
  }  // destroyed before commit: an error or exception in the middle of generating
  EXPECT_EQ(testing::read_bytes(dir / "keep.h5"), (std::vector<char>{'o', 'l', 'd'}));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
  // A folder that does not exist: an error, and nothing created.
  FixtureWriter w;
  EXPECT_FALSE(w.open(dir / "missing/x.h5", {}).ok());
}

TEST(GoldenFormat, DuplicateCasesAreRefused) {
  TempDir dir;
  FixtureWriter w;
  ASSERT_TRUE(w.open(dir / "d.h5", {}).ok());
  const FixtureCase fc = make_fixture_case(testing::small_cases()[0]);
  ASSERT_TRUE(w.add(fc).ok());
  EXPECT_NE(w.add(fc).message().find("written twice"), std::string::npos);
}

// --- damaged files --------------------------------------------------------------------------

class DamagedFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::write_fixture(good_, testing::small_cases());
    std::filesystem::copy_file(good_, bad_);
    group_ = "/" + escape_case_id(testing::small_cases()[0].id());
  }
  // The first error reading the damaged copy: at open, or at the first case that fails.
  std::string first_error() {
    FixtureReader r;
    if (Status st = r.open(bad_); !st.ok()) return st.message();
    for (size_t i = 0; i < r.case_groups().size(); ++i) {
      StatusOr<FixtureCase> fc = r.read(i);
      if (!fc.ok()) return fc.status().message();
      if (Status st = check_stored(fc.value()); !st.ok()) return st.message();
    }
    return "";
  }
  TempDir dir_;
  std::string good_ = dir_ / "good.h5", bad_ = dir_ / "bad.h5", group_;
};

TEST_F(DamagedFixture, IntactCopyReadsCleanly) { EXPECT_EQ(first_error(), ""); }

TEST_F(DamagedFixture, FlippedDataByteIsAChecksumMismatch) {
  const haddr_t at = testing::data_offset(bad_, group_ + "/inputs/v");
  ASSERT_NE(at, HADDR_UNDEF);
  std::vector<char> bytes = testing::read_bytes(bad_);
  bytes[at + 5] ^= 0x10;
  testing::write_bytes(bad_, bytes);
  const std::string e = first_error();
  EXPECT_NE(e.find("inputs/v: checksum mismatch"), std::string::npos) << e;
}

TEST_F(DamagedFixture, FlippedExpectedByteIsAChecksumMismatch) {
  const haddr_t at = testing::data_offset(bad_, group_ + "/expected/o");
  std::vector<char> bytes = testing::read_bytes(bad_);
  bytes[at + 17] ^= 0x01;
  testing::write_bytes(bad_, bytes);
  EXPECT_NE(first_error().find("expected/o: checksum mismatch"), std::string::npos);
}

TEST_F(DamagedFixture, FlippedMetadataByteIsAnError) {
  // The superblock (format 1.8 and later) has a checksum of its own.
  std::vector<char> bytes = testing::read_bytes(bad_);
  bytes[20] ^= 0x40;
  testing::write_bytes(bad_, bytes);
  EXPECT_NE(first_error().find("not a readable HDF5 file"), std::string::npos) << first_error();
}

TEST_F(DamagedFixture, TruncatedFileIsAnError) {
  std::vector<char> bytes = testing::read_bytes(bad_);
  bytes.resize(bytes.size() / 2);
  testing::write_bytes(bad_, bytes);
  const std::string e = first_error();
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

TEST_F(DamagedFixture, RemovedExpectedDatasetIsAnError) {
  testing::edit_file(bad_, [&](hid_t f) {
    ASSERT_GE(H5Ldelete(f, (group_ + "/expected/final_state").c_str(), H5P_DEFAULT), 0);
  });
  EXPECT_NE(first_error().find("expected/final_state: dataset missing"), std::string::npos)
      << first_error();
}

TEST_F(DamagedFixture, RemovedInputDatasetIsAnError) {
  // Even an optional input: without its initial state the case would silently be another case.
  testing::edit_file(bad_, [&](hid_t f) {
    ASSERT_GE(H5Ldelete(f, (group_ + "/inputs/initial_state").c_str(), H5P_DEFAULT), 0);
  });
  EXPECT_NE(first_error().find("inputs/initial_state missing"), std::string::npos) << first_error();
}

TEST_F(DamagedFixture, UnknownFormatVersionIsAnError) {
  testing::edit_file(bad_, [](hid_t f) { testing::set_int_attr(f, "format_version", 7); });
  EXPECT_NE(first_error().find("unknown format version 7"), std::string::npos) << first_error();
}

TEST_F(DamagedFixture, UnparsableCaseIdIsAnError) {
  const std::string id = "gdr(layout=packed[5,x],seed=3)";
  testing::edit_file(bad_, [&](hid_t f) {
    ASSERT_GE(H5Lmove(f, group_.c_str(), f, escape_case_id(id).c_str(), H5P_DEFAULT, H5P_DEFAULT),
              0);
    hid_t g = H5Gopen2(f, escape_case_id(id).c_str(), H5P_DEFAULT);
    testing::set_string_attr(g, "case_id", id);
    H5Gclose(g);
  });
  EXPECT_NE(first_error().find("case id does not parse"), std::string::npos) << first_error();
}

TEST_F(DamagedFixture, RenamedGroupIsAnError) {
  testing::edit_file(bad_, [&](hid_t f) {
    ASSERT_GE(H5Lmove(f, group_.c_str(), f, "/other", H5P_DEFAULT, H5P_DEFAULT), 0);
  });
  EXPECT_NE(first_error().find("group name does not match"), std::string::npos) << first_error();
}

TEST_F(DamagedFixture, NotAFixtureIsAnError) {
  testing::write_bytes(bad_, {'n', 'o', 't', ' ', 'h', 'd', 'f', '5'});
  EXPECT_NE(first_error().find("not a readable HDF5 file"), std::string::npos);
  testing::edit_file(good_, [](hid_t f) { H5Adelete(f, "format"); });
  FixtureReader r;
  EXPECT_NE(r.open(good_).message().find("not a deltacheck golden fixture"), std::string::npos);
}

}  // namespace
}  // namespace deltacheck::golden
