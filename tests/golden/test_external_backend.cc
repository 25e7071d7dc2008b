// The external backend: a right program passes; a program that exits non-zero, crashes, hangs,
// writes nothing, or writes missing, misshapen or mistyped outputs gets the verdict error with
// the reason (never a pass, never a harness crash); a declined case is unsupported. The fake
// programs are shell commands that copy output files the test prepared.
#include <gtest/gtest.h>

#include "backends/registry.h"
#include "golden/exchange.h"
#include "golden_test_util.h"
#include "tests/deadline.h"

namespace deltacheck::golden {
namespace {

using harness::Verdict;
using testing::TempDir;

class ExternalBackend : public ::testing::Test {
 protected:
  void SetUp() override {
    pc_ = std::make_unique<harness::PreparedCase>(harness::prepare(
        cases::Case::parse("gdr(layout=packed[6,0,9],H=1,HV=2,K=8,V=8,dtype=bf16,seed=2)")));
    // The right answer: the FP64 expectation rounded to each output's dtype.
    right_ = harness::allocate_outputs(pc_->outputs);
    for (cases::Tensor& t : right_.all()) {
      const std::vector<double>& e = pc_->expected.at(t.name());
      for (int64_t i = 0; i < t.numel(); ++i) t.set(i, e[i]);
    }
    ASSERT_TRUE(write_output_file(dir_ / "right.h5", right_).ok());
    // The backend's temporary folders go here, to see that they are removed.
    ASSERT_TRUE(std::filesystem::create_directory(dir_ / "tmp"));
    setenv("TMPDIR", (dir_ / "tmp").c_str(), 1);
  }
  void TearDown() override { unsetenv("TMPDIR"); }

  harness::CaseResult run(const std::string& cmd, double timeout_s = 30) {
    harness::BackendOptions o;
    o.cmd = cmd;
    o.timeout_s = timeout_s;
    auto backend = backends::make_backend("external", o);
    harness::CaseResult r = harness::run_case(*pc_, *backend);
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_ / "tmp"), {}), 0)
        << "temporary folder left behind";
    return r;
  }
  // A program that answers with `file`.
  std::string answer_with(const std::string& file) { return "cp '" + file + "' {out}; : {in}"; }

  // An output file with `edit` applied to a copy of the right outputs.
  template <typename F>
  std::string outputs_with(const std::string& name, F edit) {
    cases::TensorMap out;
    for (const cases::Tensor& t : right_.all()) {
      cases::Tensor copy(t.name(), t.dtype(), t.shape());
      std::memcpy(copy.data(), t.data(), t.nbytes());
      out.add(copy);
    }
    edit(out);
    EXPECT_TRUE(write_output_file(dir_ / name, out).ok());
    return dir_ / name;
  }

  TempDir dir_;
  std::unique_ptr<harness::PreparedCase> pc_;
  cases::TensorMap right_;
};

TEST_F(ExternalBackend, RightProgramPasses) {
  const harness::CaseResult r = run(answer_with(dir_ / "right.h5"));
  EXPECT_EQ(r.verdict, Verdict::kPass) << r.message;
}

TEST_F(ExternalBackend, ProgramSeesTheCaseInTheFixtureFormat) {
  const std::string seen = dir_ / "seen.h5";
  ASSERT_EQ(run("cp {in} '" + seen + "' && " + answer_with(dir_ / "right.h5")).verdict,
            Verdict::kPass);
  FixtureReader r;
  ASSERT_TRUE(r.open(seen).ok());
  StatusOr<FixtureCase> fc = r.read(0);
  ASSERT_TRUE(fc.ok()) << fc.status().message();
  EXPECT_EQ(fc.value().c.id(), pc_->c.id());
  EXPECT_TRUE(fc.value().expected.empty());  // the answer is not given away
  ASSERT_EQ(fc.value().outputs.size(), pc_->outputs.size());
  for (const cases::Tensor& t : pc_->inputs.all()) {
    const cases::Tensor& got = fc.value().inputs.at(t.name());
    ASSERT_EQ(got.nbytes(), t.nbytes());
    EXPECT_EQ(std::memcmp(got.data(), t.data(), t.nbytes()), 0) << t.name();
  }
}

TEST_F(ExternalBackend, NonZeroExitIsAnErrorWithWhatItSaid) {
  const harness::CaseResult r =
      run("echo 'ValueError: no kernel for this' >&2; exit 3; : {in} {out}");
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.message.find("exited with code 3: ValueError: no kernel for this"), std::string::npos)
      << r.message;
}

TEST_F(ExternalBackend, MissingProgramIsAnError) {
  const harness::CaseResult r = run("/nonexistent/program {in} {out}");
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.message.find("code 127 (command not found?)"), std::string::npos) << r.message;
}

TEST_F(ExternalBackend, CrashIsAnError) {
  const harness::CaseResult r = run(answer_with(dir_ / "right.h5") + "; kill -SEGV $$");
  EXPECT_EQ(r.verdict, Verdict::kError);  // even with right outputs written before the crash
  EXPECT_NE(r.message.find("crashed: killed by signal 11"), std::string::npos) << r.message;
}

TEST_F(ExternalBackend, TimeoutKillsTheProcessGroup) {
  // The program's own child keeps running too unless the whole group is killed.
  const harness::CaseResult r = deltacheck::testing::within_deadline(
      "a call to a program that hangs",
      [&] { return run("sleep 30 & sleep 30; : {in} {out}", 0.3); });
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.message.find("timed out after 0.3 s"), std::string::npos) << r.message;
}

TEST_F(ExternalBackend, NoOutputFileIsAnError) {
  const harness::CaseResult r = run("true {in} {out}");
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.message.find("wrote no output file"), std::string::npos) << r.message;
}

TEST_F(ExternalBackend, MissingDatasetIsAnError) {
  const std::string f = dir_ / "missing.h5";
  cases::TensorMap only_o;
  const cases::Tensor& o = right_.at("o");
  cases::Tensor& copy = only_o.add(cases::Tensor("o", o.dtype(), o.shape()));
  std::memcpy(copy.data(), o.data(), o.nbytes());
  ASSERT_TRUE(write_output_file(f, only_o).ok());
  const harness::CaseResult r = run(answer_with(f));
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.message.find("output 'final_state' missing from {out} (found: o)"), std::string::npos)
      << r.message;
}

TEST_F(ExternalBackend, WrongShapeIsAnError) {
  const std::string f = outputs_with("shape.h5", [](cases::TensorMap& out) {
    const cases::Tensor& o = out.at("o");
    std::vector<int64_t> shape = o.shape();
    std::swap(shape[2], shape[3]);  // same size, heads and values swapped
    cases::TensorMap fixed;
    cases::Tensor& t = fixed.add(cases::Tensor("o", o.dtype(), shape));
    std::memcpy(t.data(), o.data(), o.nbytes());
    fixed.add(out.at("final_state"));
    out = fixed;
  });
  const harness::CaseResult r = run(answer_with(f));
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.message.find("output 'o': shape [1,15,8,2], expected [1,15,2,8]"), std::string::npos)
      << r.message;
}

TEST_F(ExternalBackend, WrongDtypeIsAnError) {
  // fp32 where the case's output is bf16: the program did not round as the dtype requires.
  const std::string f = outputs_with("dtype.h5", [](cases::TensorMap& out) {
    const cases::Tensor& o = out.at("o");
    cases::TensorMap fixed;
    cases::Tensor& t = fixed.add(cases::Tensor("o", cases::DType::kF32, o.shape()));
    for (int64_t i = 0; i < o.numel(); ++i) t.set(i, o.get(i));
    fixed.add(out.at("final_state"));
    out = fixed;
  });
  const harness::CaseResult r = run(answer_with(f));
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.message.find("output 'o': dtype 32-bit float, expected bf16"), std::string::npos)
      << r.message;
}

TEST_F(ExternalBackend, WrongNumbersFail) {
  const std::string f = outputs_with("wrong.h5", [](cases::TensorMap& out) {
    cases::Tensor& o = out.at("o");
    for (int64_t i = 0; i < o.numel(); ++i) o.set(i, o.get(i) * 1.5);
  });
  EXPECT_EQ(run(answer_with(f)).verdict, Verdict::kFail);
}

TEST_F(ExternalBackend, DeclinedCaseIsUnsupported) {
  const std::string f = dir_ / "declined.h5";
  hid_t file = H5Fcreate(f.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  testing::set_string_attr(file, "unsupported", "needs a CUDA device");
  H5Fclose(file);
  const harness::CaseResult r = run(answer_with(f));
  EXPECT_EQ(r.verdict, Verdict::kUnsupported);
  EXPECT_EQ(r.message, "needs a CUDA device");
}

TEST_F(ExternalBackend, CommandWithoutPlaceholdersIsAnError) {
  EXPECT_EQ(run("true").verdict, Verdict::kError);
}

}  // namespace
}  // namespace deltacheck::golden
