// Verdict integrity: a broken backend must never pass. Each way of being broken — writing
// nothing, NaN, zeros, outside the outputs, only part of them, throwing, returning an error,
// returning the right numbers for the wrong case, changing pool rows nobody addressed — gets its
// own verdict; and under isolation (harness/isolation.h) so do aborting, segfaulting, calling
// exit() and hanging, while the run goes on with the next case.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <stdexcept>
#include <thread>

#include "backends/registry.h"
#include "cases/generate.h"
#include "harness/backend.h"
#include "harness/isolation.h"
#include "harness/op_names.h"
#include "harness/runner.h"
#include "tests/deadline.h"

#if defined(__SANITIZE_ADDRESS__)
#define DELTACHECK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DELTACHECK_ASAN 1
#endif
#endif

namespace deltacheck::backends {
namespace {

using cases::Case;
using cases::TensorMap;
using Body = std::function<Status(const Case&, const TensorMap&, TensorMap&)>;

// A backend whose run() is the test's lambda.
class FakeBackend : public Backend {
 public:
  FakeBackend(std::string name, Body body) : name_(std::move(name)), body_(std::move(body)) {}
  std::string name() const override { return name_; }
  std::string description() const override { return "test backend"; }
  bool deliberately_wrong() const override { return true; }
  Support supports(const Case&) const override { return Support::Yes(); }
  Status run(const Case& c, const TensorMap& in, TensorMap& out) override {
    return body_(c, in, out);
  }

 private:
  std::string name_;
  Body body_;
};

// The right answer: the CPU backend (kernels/cpu).
Status correct(const Case& c, const TensorMap& in, TensorMap& out) {
  static const auto cpu = make_backend("cpu");
  return cpu->run(c, in, out);
}

// Every output element from a function of (output, index).
void fill(TensorMap& out, const std::function<double(const std::string&, int64_t)>& f) {
  for (cases::Tensor& t : out.all())
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, f(t.name(), i));
}

const Case& packed_case() {
  static const Case c =
      Case::parse("gdr(layout=packed[5,0,7],H=1,HV=2,K=8,V=8,gate=strong,state=rand,seed=3)");
  return c;
}

struct Broken {
  const char* name;
  Body body;
  Verdict verdict;
  const char* message;  // a part of the verdict's message
};

// Breakage the runner must catch in-process.
std::vector<Broken> in_process_breakage() {
  return {
      {"writes-nothing", [](const Case&, const TensorMap&, TensorMap&) { return Status::Ok(); },
       Verdict::kError, "unwritten"},
      {"writes-nan",
       [](const Case&, const TensorMap&, TensorMap& out) {
         fill(out, [](const std::string&, int64_t) { return std::nan(""); });
         return Status::Ok();
       },
       Verdict::kFail, "non-finite"},
      {"writes-inf-once",
       [](const Case& c, const TensorMap& in, TensorMap& out) {
         const Status st = correct(c, in, out);
         out.at("o").set(3, INFINITY);
         return st;
       },
       Verdict::kFail, "non-finite"},
      {"writes-zeros",
       [](const Case&, const TensorMap&, TensorMap& out) {
         fill(out, [](const std::string&, int64_t) { return 0.0; });
         return Status::Ok();
       },
       Verdict::kFail, "rel_rms"},
      {"writes-past-the-end",
       [](const Case& c, const TensorMap& in, TensorMap& out) {
         const Status st = correct(c, in, out);
         cases::Tensor& o = out.at("o");
         static_cast<float*>(o.data())[o.numel()] = 1.0f;  // one element past 'o' (guard band)
         return st;
       },
       Verdict::kError, "wrote outside output 'o'"},
      {"writes-before-the-start",
       [](const Case& c, const TensorMap& in, TensorMap& out) {
         const Status st = correct(c, in, out);
         static_cast<float*>(out.at("final_state").data())[-1] = 1.0f;
         return st;
       },
       Verdict::kError, "wrote outside output 'final_state'"},
      {"returns-early",
       [](const Case& c, const TensorMap& in, TensorMap& out) {
         // The first half of 'o', the right numbers, and nothing more.
         TensorMap full;
         for (const cases::Tensor& t : out.all())
           full.add(cases::Tensor(t.name(), t.dtype(), t.shape()));
         const Status st = correct(c, in, full);
         cases::Tensor& o = out.at("o");
         for (int64_t i = 0; i < o.numel() / 2; ++i) o.set(i, full.at("o").get(i));
         return st;
       },
       Verdict::kError, "elements of 'o' unwritten"},
      {"final-state-unwritten",
       [](const Case& c, const TensorMap& in, TensorMap& out) {
         TensorMap o_only;
         o_only.add(cases::Tensor("o", out.at("o").dtype(), out.at("o").shape()));
         o_only.add(
             cases::Tensor("final_state", cases::DType::kF32, out.at("final_state").shape()));
         const Status st = correct(c, in, o_only);
         for (int64_t i = 0; i < o_only.at("o").numel(); ++i)
           out.at("o").set(i, o_only.at("o").get(i));
         return st;
       },
       Verdict::kError, "'final_state' unwritten"},
      {"throws",
       [](const Case&, const TensorMap&, TensorMap&) -> Status {
         throw std::runtime_error("kernel exploded");
       },
       Verdict::kError, "threw: kernel exploded"},
      {"throws-non-standard", [](const Case&, const TensorMap&, TensorMap&) -> Status { throw 42; },
       Verdict::kError, "non-standard exception"},
      {"returns-an-error",
       [](const Case&, const TensorMap&, TensorMap&) { return Status::Internal("device lost"); },
       Verdict::kError, "device lost"},
      {"reference-output-of-another-case",
       [](const Case& c, const TensorMap&, TensorMap& out) {
         // The FP64 oracle's own answer — for the same shapes, another seed.
         const Case other = c.with("seed", std::to_string(c.seed() + 1));
         const TensorMap other_in = cases::generate_inputs(other);
         const Values v = operation_for(other).oracle(other, other_in);
         fill(out, [&](const std::string& name, int64_t i) { return v.at(name)[i]; });
         return Status::Ok();
       },
       Verdict::kFail, ""},
      {"sequences-swapped",
       [](const Case& c, const TensorMap& in, TensorMap& out) {
         // The right numbers in the wrong place: sequences 0 and 2 exchanged in the states.
         const Status st = correct(c, in, out);
         cases::Tensor& fs = out.at("final_state");
         const int64_t per = fs.numel() / 3;
         for (int64_t i = 0; i < per; ++i) {
           const double a = fs.get(i), b = fs.get(2 * per + i);
           fs.set(i, b);
           fs.set(2 * per + i, a);
         }
         return st;
       },
       Verdict::kFail, ""},
  };
}

class InProcess : public ::testing::TestWithParam<Broken> {};

TEST_P(InProcess, NeverPasses) {
  const Broken& b = GetParam();
  const PreparedCase pc = prepare(packed_case());
  FakeBackend backend(b.name, b.body);
  // The oracle comparison alone gives the verdict the breakage deserves...
  const CaseResult r = run_case(pc, backend, false);
  EXPECT_EQ(r.verdict, b.verdict) << b.name << ": " << verdict_name(r.verdict) << " " << r.message;
  EXPECT_NE(r.message.find(b.message), std::string::npos) << b.name << ": " << r.message;
  // ...and the probes may sharpen a fail into a leak, but never make it a pass.
  const CaseResult with_probes = run_case(pc, backend, true);
  EXPECT_TRUE(is_failure(with_probes.verdict))
      << b.name << ": " << verdict_name(with_probes.verdict) << " " << with_probes.message;
}

INSTANTIATE_TEST_SUITE_P(Breakage, InProcess, ::testing::ValuesIn(in_process_breakage()),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

TEST(VerdictIntegrity, TheRightAnswerPassesSoTheChecksAreNotVacuous) {
  FakeBackend backend("correct", correct);
  const CaseResult r = run_case(prepare(packed_case()), backend, true);
  EXPECT_EQ(r.verdict, Verdict::kPass) << r.message;
}

TEST(VerdictIntegrity, ChangingAPoolRowNobodyAddressesFails) {
  const Case c = Case::parse("gdr(layout=packed[1*12],H=1,HV=2,K=8,V=8,cache=pool,seed=2)");
  const PreparedCase pc = prepare(c);
  FakeBackend backend("touches-free-slots", [](const Case& c, const TensorMap& in, TensorMap& out) {
    const Status st = correct(c, in, out);
    cases::Tensor& pool = out.at("state_pool");
    for (int64_t i = 0; i < pool.numel(); ++i) pool.set(i, pool.get(i) + 1e-3);
    return st;
  });
  const CaseResult r = run_case(pc, backend, true);
  EXPECT_EQ(r.verdict, Verdict::kFail) << r.message;
  EXPECT_NE(r.message.find("must stay bit-identical"), std::string::npos) << r.message;
}

TEST(VerdictIntegrity, MalformedIndexOutputsOfAnExactOperationFail) {
  // A segments case: an implementation returning non-monotonic cu_seqlens (what an external
  // program might send back) is a mismatch, not a crash and not a pass.
  const Case c = Case::parse("segments(source=position,B=2,T=16,seed=1)");
  const PreparedCase pc = prepare(c);
  FakeBackend backend("bad-cu-seqlens", [](const Case& c, const TensorMap& in, TensorMap& out) {
    const Status st = correct(c, in, out);
    cases::Tensor& cu = out.at("cu_seqlens");
    cu.as<int64_t>()[1] = -5;
    cu.as<int64_t>()[2] = std::numeric_limits<int64_t>::max();
    return st;
  });
  const CaseResult r = run_case(pc, backend, true);
  EXPECT_EQ(r.verdict, Verdict::kFail) << r.message;
  EXPECT_NE(r.message.find("'cu_seqlens' differ"), std::string::npos) << r.message;
}

// --- isolation ----------------------------------------------------------------------------

std::unique_ptr<Backend> isolated(const char* name, Body body, double timeout_s = 10.0) {
  return make_isolated_backend(std::make_unique<FakeBackend>(name, std::move(body)), {timeout_s});
}

TEST(Isolation, CorrectOutputsComeBackAndPass) {
  auto b = isolated("correct", correct);
  const CaseResult r = run_case(prepare(packed_case()), *b, true);
  EXPECT_EQ(r.verdict, Verdict::kPass) << r.message;
}

TEST(Isolation, PoisonAndGuardBandsTravelBack) {
  // Unwritten elements and writes into the guard band happen in the child; the parent sees them.
  auto nothing =
      isolated("nothing", [](const Case&, const TensorMap&, TensorMap&) { return Status::Ok(); });
  CaseResult r = run_case(prepare(packed_case()), *nothing, false);
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.message.find("unwritten"), std::string::npos) << r.message;
  auto past_end = isolated("past-end", [](const Case& c, const TensorMap& in, TensorMap& out) {
    const Status st = correct(c, in, out);
    static_cast<float*>(out.at("o").data())[out.at("o").numel() + 3] = 0.0f;
    return st;
  });
  r = run_case(prepare(packed_case()), *past_end, false);
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.message.find("wrote outside output 'o'"), std::string::npos) << r.message;
}

TEST(Isolation, StatusesAndExceptionsComeBackAsTheyWere) {
  auto throws = isolated("throws", [](const Case&, const TensorMap&, TensorMap&) -> Status {
    throw std::runtime_error("kernel exploded");
  });
  CaseResult r = run_case(prepare(packed_case()), *throws, false);
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_EQ(r.message, "threw: kernel exploded");
  auto declines = isolated("declines", [](const Case&, const TensorMap&, TensorMap&) {
    return Status::Unsupported("K=8 is below the kernel's minimum");
  });
  r = run_case(prepare(packed_case()), *declines, false);
  EXPECT_EQ(r.verdict, Verdict::kUnsupported);
  EXPECT_EQ(r.message, "K=8 is below the kernel's minimum");
}

struct Fatal {
  const char* name;
  Body body;
  const char* message;
};

[[noreturn]] void segfault() {
  raise(SIGSEGV);  // what a wild pointer ends in (a null store would be UBSan's first)
  std::abort();    // not reached
}

std::vector<Fatal> fatal_breakage() {
  return {
      {"aborts", [](const Case&, const TensorMap&, TensorMap&) -> Status { std::abort(); },
       "crashed with SIGABRT (Aborted)"},
      {"segfaults", [](const Case&, const TensorMap&, TensorMap&) -> Status { segfault(); },
#ifdef DELTACHECK_ASAN
       // AddressSanitizer reports the SEGV and exits (with ASAN_OPTIONS' exit code).
       "exited with code"
#else
       "crashed with SIGSEGV (Segmentation fault)"
#endif
      },
      {"killed-by-a-signal",
       [](const Case&, const TensorMap&, TensorMap&) -> Status {
         raise(SIGKILL);
         return Status::Ok();
       },
       "crashed with SIGKILL (Killed)"},
      {"calls-exit",
       [](const Case&, const TensorMap&, TensorMap& out) -> Status {
         fill(out, [](const std::string&, int64_t) { return 0.5; });
         _exit(0);
       },
       "exited with code 0 before returning"},
      {"hangs",
       [](const Case&, const TensorMap&, TensorMap&) -> Status {
         for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
       },
       "timed out after 0.5 s"},
  };
}

class Isolated : public ::testing::TestWithParam<Fatal> {};

TEST_P(Isolated, ErrorVerdictAndTheRunContinues) {
  const Fatal& f = GetParam();
  // The broken backend crashes on seed 3 only; the next case of the same run still passes.
  // The hang costs its 0.5 s timeout; the other deaths get time to die (under ASan the report of
  // the segfault, symbolized, can take longer than 0.5 s: it then read "timed out").
  const Case bad = packed_case(), good = packed_case().with("seed", "4");
  auto backend = isolated(
      f.name,
      [&](const Case& c, const TensorMap& in, TensorMap& out) {
        return c.seed() == 3 ? f.body(c, in, out) : correct(c, in, out);
      },
      std::string(f.name) == "hangs" ? 0.5 : 5.0);
  RunOptions o;
  o.probes = true;
  // A hang must cost its timeout, not the run (a deadline far beyond it, tests/deadline.h).
  const std::vector<CaseResult> rs =
      deltacheck::testing::within_deadline(std::string(f.name) + "'s run", [&] {
        return run_all({bad, good}, {backend.get()}, o, nullptr);
      });
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[0].verdict, Verdict::kError) << f.name << ": " << rs[0].message;
  EXPECT_NE(rs[0].message.find(f.message), std::string::npos) << f.name << ": " << rs[0].message;
  EXPECT_EQ(rs[1].verdict, Verdict::kPass) << f.name << ": " << rs[1].message;
}

INSTANTIATE_TEST_SUITE_P(Fatal, Isolated, ::testing::ValuesIn(fatal_breakage()),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

TEST(Isolation, NoChildIsLeftBehind) {
  auto hangs = isolated(
      "hangs",
      [](const Case&, const TensorMap&, TensorMap&) -> Status {
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
      },
      0.2);
  (void)run_case(prepare(packed_case()), *hangs, false);
  // Every child was reaped: nothing left to wait for.
  int status = 0;
  EXPECT_EQ(waitpid(-1, &status, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

}  // namespace
}  // namespace deltacheck::backends
