// GoogleTest integration: a selection of deltacheck cases as GoogleTest tests for your backend,
// one test per case, so that `ctest` (with gtest_discover_tests) and your CI's test report list
// deltacheck's cases by name. Header-only: link GTest yourself (GTest::gtest_main) along with
// deltacheck::deltacheck.
//
//   DELTACHECK_INSTANTIATE_SUITE(MyKernel, deltacheck::Selection("gate").filter("^gdr\\("),
//                                [] { return deltacheck::gdr_backend("my-kernel", my_kernel); });
//
// registers MyKernel.<case> for every selected case, e.g.
//   MyKernel.gdr_layout_packed_63_0_65_HV_4_dtype_bf16_gate_strong_seed_7
// (the case id with default parameters left out, punctuation as '_' and '*' as 'x'; the full id
// is the test's case_id property and is in its failure message). A test passes on verdict pass,
// is skipped (with the reason) on unsupported or skipped, and fails otherwise with the verdict
// line as the failure message. Every test records the verdict and the metrics per output tensor
// with RecordProperty (they appear in --gtest_output=xml and ctest's JUnit output).
//
//   DELTACHECK_EXPECT_VERDICTS(LeakyKernel, selection, factory,
//                              [](const deltacheck::Case& c) { return verdicts...; });
//
// does the same, except that each test passes when the case's verdict is one of those the
// function returns for it: for a backend known to be wrong (a deliberately leaky kernel, a bug
// not fixed yet), so that its test proves deltacheck flags it.
//
// The backend is made by the factory once per suite and process, on the first test that runs.
// A selection that selects nothing, or does not parse, is one failing test `<Name>.selection`.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "deltacheck/deltacheck.h"

namespace deltacheck::gtest {

// Makes the backend under test.
using BackendFactory = std::function<std::unique_ptr<Backend>()>;
// The verdicts a case may get for its test to pass.
using ExpectedVerdicts = std::function<std::vector<Verdict>(const Case& c)>;

// The test name of a case: its short id (default parameters left out) with every run of
// characters other than letters and digits as one '_', except '*' (repeated lengths) as 'x'.
inline std::string test_name(const Case& c) {
  const std::string id = short_id(c);
  std::string out;
  for (const char ch : id) {
    if (std::isalnum(static_cast<unsigned char>(ch))) {
      out += ch;
    } else if (ch == '*') {
      out += 'x';
    } else if (!out.empty() && out.back() != '_') {
      out += '_';
    }
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

namespace internal {

inline std::string sci(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", x);
  return buf;
}

// The result as test properties: verdict, case id, backend, message, margin, and per output
// tensor its error and the threshold it was judged by (exact tensors: how many elements differ).
inline void record_properties(const CaseResult& r) {
  using ::testing::Test;
  Test::RecordProperty("case_id", r.case_id);
  Test::RecordProperty("backend", r.backend);
  Test::RecordProperty("verdict", verdict_name(r.verdict));
  if (!r.message.empty()) Test::RecordProperty("message", r.message);
  if (r.tensors.empty()) return;
  Test::RecordProperty("margin", sci(r.margin));
  for (const TensorReport& t : r.tensors) {
    if (t.exact) {
      Test::RecordProperty(t.name + ".mismatches", std::to_string(t.mismatches));
      continue;
    }
    Test::RecordProperty(t.name + ".rel_rms", sci(t.metrics.rel_rms));
    Test::RecordProperty(t.name + ".rel_rms_threshold", sci(t.threshold.rel_rms));
    Test::RecordProperty(t.name + ".max_abs", sci(t.metrics.max_abs));
    Test::RecordProperty(t.name + ".max_abs_threshold", sci(t.threshold.max_abs));
  }
  if (r.verdict == Verdict::kLeak) {
    Test::RecordProperty("leak_seq", std::to_string(r.leak_seq));
    Test::RecordProperty("leak_token", std::to_string(r.leak_token));
  }
}

inline std::string verdict_list(const std::vector<Verdict>& vs) {
  std::string s;
  for (Verdict v : vs) s += (s.empty() ? "" : " or ") + std::string(verdict_name(v));
  return s;
}

}  // namespace internal

// Runs one case on a backend and makes the verdict this test's outcome: success when the verdict
// is in `expected`, GTEST_SKIP when it is unsupported or skipped (and not expected), a fatal
// failure with the verdict line otherwise. Records the properties above. Usable in your own
// TEST()s too.
inline void check_case(const Case& c, Backend& backend,
                       const std::vector<Verdict>& expected = {Verdict::kPass},
                       const RunOptions& options = {}) {
  const CaseResult r = run_case(c, backend, options);
  internal::record_properties(r);
  if (std::find(expected.begin(), expected.end(), r.verdict) != expected.end()) return;
  if (r.verdict == Verdict::kUnsupported || r.verdict == Verdict::kSkipped)
    GTEST_SKIP() << verdict_name(r.verdict) << ": " << r.message;
  const bool only_pass = expected.size() == 1 && expected[0] == Verdict::kPass;
  // With DELTACHECK_SHRINK set (not "0"), a failing case is shrunk first (within 60 s) and the
  // message ends with the smallest case that fails the same way (docs/shrinking.md).
  std::string shrunk;
  if (const char* env = std::getenv("DELTACHECK_SHRINK");
      env && *env && std::string(env) != "0" && only_pass && is_failure(r.verdict)) {
    ShrinkOptions so;
    so.probes = options.probes;
    so.budget_seconds = 60;
    const ShrinkResult s = shrink(c, backend, so);
    if (s.status.ok())
      shrunk = "\nshrunk: " + short_id(parse_derived_case(s.minimal.case_id)) + " (" +
               s.after.str() + "; still " + s.kept.str() + ")\n" + format_result(s.minimal);
  }
  FAIL() << (only_pass ? std::string()
                       : "expected verdict " + internal::verdict_list(expected) + ", got " +
                             verdict_name(r.verdict) + "\n")
         << format_result(r) << shrunk;
}

namespace internal {

// What the tests of one registered suite share: the backend, made on first use.
struct SuiteState {
  BackendFactory factory;
  ExpectedVerdicts expected;
  std::unique_ptr<Backend> backend;
  std::string error;  // the factory failed: every test fails with this
  bool made = false;

  Backend* get() {
    if (!made) {
      made = true;
      try {
        backend = factory();
        if (!backend) error = "the backend factory returned null";
      } catch (const std::exception& e) {
        error = std::string("the backend factory threw: ") + e.what();
      }
    }
    return backend.get();
  }
};

class CaseTest : public ::testing::Test {
 public:
  CaseTest(std::shared_ptr<SuiteState> state, std::optional<Case> c, std::string error)
      : state_(std::move(state)), case_(std::move(c)), error_(std::move(error)) {}

  void TestBody() override {
    if (!case_) FAIL() << error_;
    Backend* backend = state_->get();
    if (!backend) FAIL() << state_->error;
    std::vector<Verdict> expected{Verdict::kPass};
    if (state_->expected) expected = state_->expected(*case_);
    check_case(*case_, *backend, expected);
  }

 private:
  std::shared_ptr<SuiteState> state_;
  std::optional<Case> case_;
  std::string error_;
};

// Registers one test per selected case under test suite `name`; returns how many.
inline int register_suite(const char* name, const Selection& selection, BackendFactory factory,
                          ExpectedVerdicts expected, const char* file, int line) {
  auto state = std::make_shared<SuiteState>();
  state->factory = std::move(factory);
  state->expected = std::move(expected);
  std::vector<Case> cases;
  std::string error;
  try {
    cases = select(selection);
    if (cases.empty()) error = "no case selected by " + selection.describe();
  } catch (const std::exception& e) {
    error = "bad selection (" + selection.describe() + "): " + e.what();
  }
  if (!error.empty()) {
    ::testing::RegisterTest(
        name, "selection", nullptr, nullptr, file, line,
        [state, error]() -> ::testing::Test* { return new CaseTest(state, std::nullopt, error); });
    return 0;
  }
  std::set<std::string> used;
  for (const Case& c : cases) {
    std::string test = test_name(c);
    for (int k = 2; !used.insert(test).second; ++k) test = test_name(c) + "_" + std::to_string(k);
    // No value_param: gtest_discover_tests would append "# GetParam() = <id>" to the ctest name.
    ::testing::RegisterTest(
        name, test.c_str(), nullptr, nullptr, file, line,
        [state, c]() -> ::testing::Test* { return new CaseTest(state, c, std::string()); });
  }
  return static_cast<int>(cases.size());
}

}  // namespace internal
}  // namespace deltacheck::gtest

// One GoogleTest test per case of `selection` (a Selection or a suite name) on the backend
// `factory()` makes; each passes on verdict pass (see the top of this file).
#define DELTACHECK_INSTANTIATE_SUITE(name, selection, factory)                                    \
  [[maybe_unused]] static const int deltacheck_gtest_suite_##name##_ =                            \
      ::deltacheck::gtest::internal::register_suite(#name, selection, factory, nullptr, __FILE__, \
                                                    __LINE__)

// The same, where each test passes when its case's verdict is one of `expected(case)`.
#define DELTACHECK_EXPECT_VERDICTS(name, selection, factory, expected)                             \
  [[maybe_unused]] static const int deltacheck_gtest_suite_##name##_ =                             \
      ::deltacheck::gtest::internal::register_suite(#name, selection, factory, expected, __FILE__, \
                                                    __LINE__)
