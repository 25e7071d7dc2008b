// A pass needs its probes (issue 35, E5): a backend that declines every probe call (unsupported
// for each variation) keeps its pass only as "pass (probes declined: ...)", and where the run
// requires the probes (RunOptions::require_probes: the tool's --deterministic, --batch-invariant)
// such a case is verdict error. Backends that run their probes keep their verdicts.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "backends/registry.h"
#include "harness/runner.h"

namespace deltacheck::harness {
namespace {

// The cpu backend for the first `runs` calls, then unsupported for every call after them: with
// runs = 1, it runs the case's own call and declines each probe's.
class DeclinesAfter : public Backend {
 public:
  explicit DeclinesAfter(int runs) : runs_(runs), cpu_(backends::make_backend("cpu")) {}
  std::string name() const override { return "declines-after-" + std::to_string(runs_); }
  std::string description() const override { return "declines every call after the first ones"; }
  Support supports(const cases::Case& c) const override { return cpu_->supports(c); }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    if (calls_++ >= runs_) return Status::Unsupported("no variations, only the case itself");
    return cpu_->run(c, in, out);
  }

 private:
  int runs_, calls_ = 0;
  std::unique_ptr<Backend> cpu_;
};

CaseResult run_one(const std::string& id, Backend& b, bool require) {
  RunOptions o;
  o.require_probes = require;
  return run_all({cases::Case::parse(id)}, {&b}, o, nullptr).at(0);
}

const char* kPack = "gdr(layout=packed[20,0,33],K=8,V=8,seed=3)";

TEST(ProbesDeclined, APassWithoutItsProbesSaysSo) {
  DeclinesAfter b(1);
  const CaseResult r = run_one(kPack, b, false);
  EXPECT_EQ(r.verdict, Verdict::kPass) << r.message;
  EXPECT_EQ(declined_probes(r), "repeat, isolation, alone, order, split");
}

TEST(ProbesDeclined, WhereTheRunRequiresTheProbesItIsAnError) {
  DeclinesAfter b(1);
  const CaseResult r = run_one(kPack, b, true);
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.message.find("a pass needs its leak probes, which this run requires: the backend "
                           "declined every one (repeat, isolation, alone, order, split): the "
                           "backend declined it: no variations"),
            std::string::npos)
      << r.message;
  // One sequence, no carried state: the repeat probe alone, declined.
  DeclinesAfter one(1);
  const CaseResult single =
      run_one("gdr(layout=single[9],cache=none,state=none,K=8,V=8)", one, true);
  EXPECT_EQ(single.verdict, Verdict::kError) << single.message;
  EXPECT_NE(single.message.find("declined it (repeat)"), std::string::npos) << single.message;
}

TEST(ProbesDeclined, BackendsThatRunTheirProbesKeepTheirVerdicts) {
  auto cpu = backends::make_backend("cpu");
  for (bool require : {false, true}) {
    const CaseResult r = run_one(kPack, *cpu, require);
    EXPECT_EQ(r.verdict, Verdict::kPass) << r.message;
    EXPECT_EQ(declined_probes(r), "");
  }
  // Some probes run, the rest declined: not "without its probes".
  DeclinesAfter some(3);
  const CaseResult r = run_one(kPack, some, true);
  EXPECT_EQ(r.verdict, Verdict::kPass) << r.message;
  EXPECT_EQ(declined_probes(r), "");
  // A wrong backend's fail stays a fail, required or not.
  auto wrong = backends::make_backend("wrong:readout-before-update");
  EXPECT_EQ(run_one(kPack, *wrong, true).verdict, Verdict::kFail);
  // Without probes (--no-probes) nothing was declined.
  DeclinesAfter none(1);
  RunOptions o;
  o.probes = false;
  o.require_probes = true;
  const CaseResult off = run_all({cases::Case::parse(kPack)}, {&none}, o, nullptr).at(0);
  EXPECT_EQ(off.verdict, Verdict::kPass) << off.message;
}

}  // namespace
}  // namespace deltacheck::harness
