// An external program declares its precision profile in its {out} file (a root attribute
// `profile`, docs/external.md): the same outputs are judged against that profile's baselines
// and the row shows it; a bad declaration is the verdict error naming the bad choice. The fake
// program copies output files the test prepared: wrong:rounded-stk's outputs on a bf16
// converged-memory case, which pass under the default profile (the tensor-core baseline allows
// them) and fail declared operands=fp32, as a recurrent kernel would declare itself.
#include <gtest/gtest.h>
#include <hdf5.h>

#include "backends/registry.h"
#include "golden/exchange.h"
#include "golden_test_util.h"

namespace deltacheck::golden {
namespace {

using harness::Verdict;
using testing::TempDir;

class ExternalProfile : public ::testing::Test {
 protected:
  void SetUp() override {
    pc_ = std::make_unique<harness::PreparedCase>(harness::prepare(cases::Case::parse(
        "gdr(layout=packed[63,0,65],H=2,HV=4,K=64,V=64,dtype=bf16,gate=zero,beta=rand,keys=norm,"
        "regime=converged,l2=1,state=rand,cache=prefill,calls=3,seed=4000)")));
    cases::TensorMap out = harness::allocate_outputs(pc_->outputs);
    auto bug = backends::make_backend("wrong:rounded-stk");
    ASSERT_TRUE(bug->run(pc_->c, pc_->inputs, out).ok());
    ASSERT_TRUE(write_output_file(dir_ / "plain.h5", out).ok());
    ASSERT_TRUE(write_output_file(dir_ / "declared.h5", out).ok());
    ASSERT_TRUE(write_output_file(dir_ / "bad.h5", out).ok());
    with_attribute("declared.h5", "operands=fp32");
    with_attribute("bad.h5", "operands=fp32,chunk=0");
  }

  void with_attribute(const std::string& name, const std::string& profile) {
    hid_t f = H5Fopen((dir_ / name).c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    testing::set_string_attr(f, "profile", profile);
    H5Fclose(f);
  }

  harness::CaseResult run(const std::string& file, const std::string& cli_profile = "") {
    harness::BackendOptions o;
    o.cmd = "cp '" + (dir_ / file) + "' {out}; : {in}";
    o.profile = harness::profile_from_name(cli_profile);
    auto backend = backends::make_backend("external", o);
    return harness::run_case(*pc_, *backend);
  }

  TempDir dir_;
  std::unique_ptr<harness::PreparedCase> pc_;
};

TEST_F(ExternalProfile, TheOutFilesDeclarationJudgesTheCase) {
  const harness::CaseResult plain = run("plain.h5");
  EXPECT_EQ(plain.verdict, Verdict::kPass) << plain.message;
  EXPECT_EQ(plain.precision, "fp32");
  const harness::CaseResult declared = run("declared.h5");
  EXPECT_EQ(declared.verdict, Verdict::kFail) << declared.message;
  EXPECT_EQ(declared.precision, "operands=fp32");
  // The same declaration on the command line.
  const harness::CaseResult cli = run("plain.h5", "operands=fp32");
  EXPECT_EQ(cli.verdict, Verdict::kFail);
  EXPECT_EQ(cli.precision, "operands=fp32");
}

TEST_F(ExternalProfile, ABadDeclarationIsAnErrorNamingTheChoice) {
  const harness::CaseResult r = run("bad.h5");
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.message.find("attribute profile: bad profile choice 'chunk=0'"), std::string::npos)
      << r.message;
}

}  // namespace
}  // namespace deltacheck::golden
