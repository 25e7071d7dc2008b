// Layouts that hold no token (single[0], packed[0,0,0], batch[1x0], batch[4x0]) in every op that
// takes a layout, in each of its cache modes and state regimes: each case either parses and passes
// on the cpu backend with its probes, or is refused when its id is parsed, with one line that
// names the layout. Never a crash (cache=spec and accept divided by zero), and never a verdict
// error that blames the backends for a case nobody could prepare (issue 35, S1 and S2).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "cases/case.h"
#include "harness/runner.h"

namespace deltacheck::harness {
namespace {

const std::vector<std::string> kZeroTokenLayouts{"single[0]", "packed[0]", "packed[0,0,0]",
                                                 "batch[1x0]", "batch[4x0]"};

// The values a parameter of `schema` takes in the sweep: every choice of the parameters that
// decide what a zero-token case checks, a block size cache=ckpt accepts too, and a padding tail.
std::vector<std::string> values_of(const cases::OpSchema& schema, const std::string& key) {
  for (const cases::ParamSpec& p : schema.params) {
    if (p.key != key) continue;
    if (key == "calls") return {p.default_value, "16"};
    if (key == "tail") return {"0", "5"};
    return p.choices;
  }
  return {""};  // the op has no such parameter
}

struct Tally {
  int passed = 0, refused = 0;
};

TEST(ZeroTokens, EveryOpAndCacheModeParsesAndPassesOrIsRefusedAtParse) {
  auto cpu = backends::make_backend("cpu");
  std::map<std::string, Tally> per_op;
  std::vector<std::string> passing;
  for (const cases::OpSchema& schema : cases::op_schemas()) {
    if (std::none_of(schema.params.begin(), schema.params.end(),
                     [](const cases::ParamSpec& p) { return p.key == "layout"; }))
      continue;
    for (const std::string& layout : kZeroTokenLayouts)
      for (const std::string& cache : values_of(schema, "cache"))
        for (const std::string& state : values_of(schema, "state"))
          for (const std::string& dht : values_of(schema, "dht"))
            for (const std::string& calls : values_of(schema, "calls"))
              for (const std::string& tail : values_of(schema, "tail")) {
                std::string id = schema.op + "(layout=" + layout;
                for (const auto& [k, v] :
                     std::vector<std::pair<std::string, std::string>>{{"cache", cache},
                                                                      {"state", state},
                                                                      {"dht", dht},
                                                                      {"calls", calls},
                                                                      {"tail", tail}})
                  if (!v.empty()) id += "," + k + "=" + v;
                id += ")";
                const StatusOr<cases::Case> c = cases::Case::from_id(id);
                if (!c.ok()) {
                  // Refused at parse: one line, and a zero-token refusal names the layout.
                  const std::string& why = c.status().message();
                  EXPECT_EQ(why.find('\n'), std::string::npos) << id << ": " << why;
                  EXPECT_FALSE(why.empty()) << id;
                  ++per_op[schema.op].refused;
                  continue;
                }
                const std::vector<CaseResult> r = run_all({c.value()}, {cpu.get()}, {}, nullptr);
                ASSERT_EQ(r.size(), 1u) << id;
                EXPECT_EQ(r[0].verdict, Verdict::kPass)
                    << id << ": " << verdict_name(r[0].verdict) << " " << r[0].message;
                ++per_op[schema.op].passed;
                passing.push_back(c.value().id());
              }
  }
  // The meaningful ones still run: a prefill's final state is its initial state, a pool comes
  // back as it was, a backward's dh0 is its dht.
  for (const char* op : {"gdr", "gdr_grad"}) EXPECT_GT(per_op[op].passed, 0) << op;
  for (const char* op : {"gdr", "gdr_grad", "layer", "layer_grad"})
    EXPECT_GT(per_op[op].refused, 0) << op;
  for (const char* id : {"gdr(layout=batch[4x0],cache=prefill,state=rand)",
                         "gdr(layout=packed[0,0,0],cache=pool,state=rand)",
                         "gdr(layout=single[0],cache=ckpt,state=rand,calls=16)",
                         "gdr_grad(layout=packed[0],state=rand,dht=rand,tail=5)"})
    EXPECT_NE(std::find(passing.begin(), passing.end(), cases::Case::parse(id).id()), passing.end())
        << id;
}

TEST(ZeroTokens, TheCasesThatCrashedAreRefusedWithTheRule) {
  const std::vector<std::pair<std::string, std::string>> refused{
      {"gdr(layout=batch[4x0],cache=spec)", "cache=spec needs at least one draft token"},
      {"gdr(layout=batch[1x0],cache=accept)", "cache=accept needs 1 + k >= 1 tokens"},
      {"gdr(layout=batch[4x0],cache=tree)", "cache=tree needs at least one draft token"},
      {"gdr(layout=packed[0],cache=none,state=none)", "cache=none has no output then"},
      {"gdr(layout=single[0],cache=prefill,state=none)", "all zeros with state=none"},
      {"gdr(layout=packed[0,0],cache=chunked,state=mixed)", "with state=mixed (give state=rand)"},
      {"layer(layout=packed[0])", "a layer case needs at least one"},
      {"layer_grad(layout=packed[0],dht=rand)", "a layer case needs at least one"},
      {"gdr_grad(layout=packed[0])", "dh0, which equals dht (give dht=rand)"},
  };
  for (const auto& [id, rule] : refused) {
    const StatusOr<cases::Case> c = cases::Case::from_id(id);
    ASSERT_FALSE(c.ok()) << id;
    EXPECT_NE(c.status().message().find("holds no token"), std::string::npos)
        << id << ": " << c.status().message();
    EXPECT_NE(c.status().message().find(rule), std::string::npos)
        << id << ": " << c.status().message();
  }
}

// A zero-token pass is earned: a backend that returns early when there is no token fails the
// case, with verdict error when it leaves the final state unwritten (malformed output) and fail
// when it zeroes it.
class NoTokenNoState : public Backend {
 public:
  explicit NoTokenNoState(bool zero) : zero_(zero) {}
  std::string name() const override { return zero_ ? "zeroes-state" : "writes-nothing"; }
  std::string description() const override { return "returns early when there is no token"; }
  Support supports(const cases::Case&) const override { return Support::Yes(); }
  Status run(const cases::Case&, const cases::TensorMap&, cases::TensorMap& out) override {
    if (zero_)
      for (cases::Tensor& t : out.all())
        for (int64_t i = 0; i < t.numel(); ++i) t.set(i, 0.0);
    return Status::Ok();
  }

 private:
  bool zero_;
};

TEST(ZeroTokens, ABackendThatSkipsTheStateFails) {
  const cases::Case c = cases::Case::parse("gdr(layout=batch[4x0],cache=prefill,state=rand)");
  for (bool zero : {false, true}) {
    NoTokenNoState b(zero);
    const std::vector<CaseResult> r = run_all({c}, {&b}, {}, nullptr);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].verdict, zero ? Verdict::kFail : Verdict::kError)
        << b.name() << ": " << r[0].message;
  }
}

// The rule is for cases given to deltacheck: the probes still run a pack's zero-length sequence
// alone (a derived case that holds no token), whatever the op and its states.
TEST(ZeroTokens, PacksWithZeroLengthSequencesKeepTheirProbes) {
  auto cpu = backends::make_backend("cpu");
  for (const char* id : {"gdr(layout=packed[63,0,65],state=none,K=8,V=8)",
                         "gdr(layout=packed[0,5],cache=none,state=none,K=8,V=8)",
                         "layer(layout=packed[16,0],state=none)",
                         "layer_grad(layout=packed[16,0],state=none,dconv=rand,tail=1)",
                         "gdr_grad(layout=packed[0,7],state=none,K=8,V=8)"}) {
    const std::vector<CaseResult> r =
        run_all({cases::Case::parse(id)}, {cpu.get()}, RunOptions{}, nullptr);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].verdict, Verdict::kPass) << id << ": " << r[0].message;
    const bool alone = std::any_of(r[0].probes.begin(), r[0].probes.end(), [](const auto& p) {
      return p.name == "alone" && p.verdict == Verdict::kPass;
    });
    EXPECT_TRUE(alone) << id;
  }
}

}  // namespace
}  // namespace deltacheck::harness
