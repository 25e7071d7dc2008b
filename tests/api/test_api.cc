// The public API (include/deltacheck/) as a user links it: selections, a backend made of one
// function or one gdr kernel, running, reports, the version, and the GoogleTest helper — each with
// a wrong input or a wrong implementation that must get the right verdict.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "deltacheck/deltacheck.h"
#include "deltacheck/gtest.h"
#include "deltacheck_test_paths.h"
#include "kernels/cpu/gated_delta_rule.h"  // a known-good kernel to wrap (not public API)

namespace dc = deltacheck;
namespace fs = std::filesystem;

namespace {

using dc::Verdict;

const char* const kPacked = "gdr(layout=packed[63,0,65],HV=4,gate=strong,seed=3)";

// A correct gdr kernel for gdr_backend(): the fp32 token recurrence on the problem's buffers.
dc::Status recurrent_kernel(const dc::GdrProblem& p) {
  deltacheck::kernels::GatedDeltaRuleParams k;
  k.batch = p.batch;
  k.seq_len = p.seq_len;
  k.num_heads = p.num_heads;
  k.num_value_heads = p.num_value_heads;
  k.key_dim = p.key_dim;
  k.value_dim = p.value_dim;
  k.dtype = dc::cases::kernel_dtype(p.dtype);
  k.q = p.q, k.k = p.k, k.v = p.v, k.g = p.g, k.beta = p.beta, k.o = p.o;
  k.cu_seqlens = p.cu_seqlens;
  k.num_seqs = p.cu_seqlens ? p.num_seqs : 0;
  k.initial_state = p.initial_state;
  k.final_state = p.final_state;
  k.scale = p.scale;
  k.use_qk_l2norm = p.use_qk_l2norm;
  return deltacheck::kernels::cpu::recurrent_gated_delta_rule(k);
}

// Sequences with at least one token: where a kernel that carries state across them leaks.
int64_t nonempty_sequences(const dc::Case& c) {
  int64_t n = 0;
  for (int64_t len : dc::Layout::parse(c.get("layout")).lengths) n += len > 0;
  return n;
}

std::unique_ptr<dc::Backend> wrap(const std::string& name, const std::string& builtin) {
  std::shared_ptr<dc::Backend> inner = dc::make_backend(builtin);
  return std::make_unique<dc::FunctionBackend>(
      name,
      [inner](const dc::Case& c, const dc::TensorMap& in, dc::TensorMap& out) {
        return inner->run(c, in, out);
      },
      [inner](const dc::Case& c) { return inner->supports(c); });
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// --- version -------------------------------------------------------------------------------

TEST(ApiVersion, HeadersLibraryAndToolAgree) {
  EXPECT_STREQ(dc::version(), DELTACHECK_VERSION_STRING);
  EXPECT_EQ(std::string(DELTACHECK_VERSION_STRING), std::to_string(DELTACHECK_VERSION_MAJOR) + "." +
                                                        std::to_string(DELTACHECK_VERSION_MINOR) +
                                                        "." +
                                                        std::to_string(DELTACHECK_VERSION_PATCH));
  FILE* p = popen(DELTACHECK_BINARY_DIR "/deltacheck --version", "r");
  ASSERT_NE(p, nullptr);
  char buf[128] = {};
  const size_t n = fread(buf, 1, sizeof buf - 1, p);
  EXPECT_EQ(pclose(p), 0);
  EXPECT_EQ(std::string(buf, n), std::string("deltacheck ") + DELTACHECK_VERSION_STRING + "\n");
}

// --- selections ----------------------------------------------------------------------------

TEST(ApiSelection, SuiteFilterExcludeSeed) {
  const auto gate = dc::suite("gate");
  EXPECT_EQ(dc::select("gate").size(), gate.size());
  const auto gdr = dc::select(dc::Selection("gate").filter("^gdr\\("));
  ASSERT_FALSE(gdr.empty());
  EXPECT_LT(gdr.size(), gate.size());
  for (const auto& c : gdr) EXPECT_EQ(c.op(), "gdr");
  const auto narrowed =
      dc::select(dc::Selection("gate").filter("^gdr\\(").filter("packed").exclude("dtype=fp16"));
  ASSERT_FALSE(narrowed.empty());
  for (const auto& c : narrowed) {
    EXPECT_NE(c.id().find("packed"), std::string::npos) << c.id();
    EXPECT_NE(c.get("dtype"), "fp16") << c.id();
  }
  for (const auto& c : dc::select(dc::Selection("smoke").seed(77))) EXPECT_EQ(c.seed(), 77u);
}

TEST(ApiSelection, ShardsPartitionTheSelectionInOrder) {
  const auto all = dc::select(dc::Selection("smoke").filter("^gdr\\("));
  std::vector<std::string> merged(all.size());
  size_t total = 0;
  for (int i = 0; i < 3; ++i) {
    const auto shard = dc::select(dc::Selection("smoke").filter("^gdr\\(").shard(i, 3));
    for (size_t k = 0; k < shard.size(); ++k) merged.at(k * 3 + i) = shard[k].id();
    total += shard.size();
  }
  EXPECT_EQ(total, all.size());
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(merged[i], all[i].id());
}

TEST(ApiSelection, BadSelectionsThrowNamingTheProblem) {
  EXPECT_THROW(dc::select("no-such-suite"), dc::CaseIdError);
  try {
    dc::select(dc::Selection("smoke").filter("gdr("));
    FAIL() << "a bad regex was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("filter 'gdr('"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dc::select(dc::Selection("smoke").shard(3, 3)), std::invalid_argument);
  EXPECT_THROW(dc::select(dc::Selection::case_ids({"gdr(layout=packed[1,2],H=3,HV=4)"})),
               dc::CaseIdError);  // HV % H != 0
  const auto two = dc::select(dc::Selection::case_ids({kPacked, "gdr(layout=single[5])"}));
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0], dc::parse_case(kPacked));
}

TEST(ApiSelection, ShortIdsParseBackToTheSameCase) {
  const dc::Case c = dc::parse_case(kPacked);
  EXPECT_EQ(dc::short_id(c), "gdr(layout=packed[63,0,65],HV=4,gate=strong,seed=3)");
  for (const auto& g : dc::suite("gate")) {
    const std::string s = dc::short_id(g);
    EXPECT_LE(s.size(), g.id().size());
    EXPECT_EQ(dc::parse_case(s), g) << s;
  }
}

// --- gtest names ---------------------------------------------------------------------------

TEST(ApiCase, FloatsStoredRoundToNearestEvenAndLoadExactly) {
  // bf16 keeps 7 fraction bits: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 (to the even: 1), and
  // 1 + 3 * 2^-8 one between 1 + 2^-7 and 1 + 2^-6 (to the even: 1 + 2^-6); fp16 keeps 10.
  const float in[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f, std::nanf(""), 1.0f + 0x1p-11f};
  uint16_t bf16[5], fp16[5];
  dc::store_floats(in, 5, dc::DType::kBF16, bf16);
  dc::store_floats(in, 5, dc::DType::kF16, fp16);
  EXPECT_EQ(bf16[0], 0x3F80);
  EXPECT_EQ(bf16[1], 0x3F82);
  EXPECT_EQ(bf16[2], 0xC020);
  EXPECT_EQ(fp16[4], 0x3C00);
  float back[5];
  dc::load_floats(bf16, 5, dc::DType::kBF16, back);
  EXPECT_EQ(back[1], 1.0f + 0x1p-6f);
  EXPECT_EQ(back[2], -2.5f);
  EXPECT_TRUE(std::isnan(back[3]));  // a NaN stays a NaN (it does not round into infinity)
  dc::load_floats(fp16, 5, dc::DType::kF16, back);
  EXPECT_EQ(back[2], -2.5f);
  EXPECT_TRUE(std::isnan(back[3]));
  float f32[5];
  dc::store_floats(in, 5, dc::DType::kF32, f32);
  EXPECT_EQ(std::memcmp(f32, in, sizeof f32), 0);
  EXPECT_THROW(dc::store_floats(in, 5, dc::DType::kF64, f32), std::invalid_argument);
  EXPECT_THROW(dc::load_floats(f32, 5, dc::DType::kI32, back), std::invalid_argument);
}

TEST(ApiGtest, TestNamesAreReadableIdentifiers) {
  EXPECT_EQ(dc::gtest::test_name(dc::parse_case(kPacked)),
            "gdr_layout_packed_63_0_65_HV_4_gate_strong_seed_3");
  EXPECT_EQ(dc::gtest::test_name(dc::parse_case("gdr(layout=packed[1*8],cache=decode)")),
            "gdr_layout_packed_1x8_cache_decode");
  const std::regex ident("[A-Za-z0-9]+(_[A-Za-z0-9]+)*");
  std::set<std::string> names;
  const auto gate = dc::suite("gate");
  for (const auto& c : gate) {
    const std::string n = dc::gtest::test_name(c);
    EXPECT_TRUE(std::regex_match(n, ident)) << n;
    names.insert(n);
  }
  EXPECT_EQ(names.size(), gate.size());  // distinct without the _2 suffixes
}

// --- backends ------------------------------------------------------------------------------

TEST(ApiBackend, FunctionBackendGetsTheVerdictsOfWhatItWraps) {
  const dc::Case c = dc::parse_case(kPacked);
  auto good = wrap("good", "cpu");
  auto leaky = wrap("leaky", "wrong:ignore-cu-seqlens");
  const dc::CaseResult ok = dc::run_case(c, *good);
  EXPECT_EQ(ok.verdict, Verdict::kPass) << dc::format_result(ok);
  EXPECT_EQ(ok.backend, "good");
  const dc::CaseResult bad = dc::run_case(c, *leaky);
  EXPECT_EQ(bad.verdict, Verdict::kLeak) << dc::format_result(bad);
  // packed[63,0,65]: the empty sequence 1 already ends with sequence 0's state instead of its own.
  EXPECT_EQ(bad.leak_seq, 1);
}

TEST(ApiBackend, StatusesThrowsAndRefusalsBecomeVerdicts) {
  const dc::Case c = dc::parse_case(kPacked);
  auto run_with = [&](dc::RunFunction f, dc::SupportFunction s = nullptr) {
    dc::FunctionBackend b("f", std::move(f), std::move(s));
    return dc::run_case(c, b);
  };
  auto ok_without_writing = [](const dc::Case&, const dc::TensorMap&, dc::TensorMap&) {
    return dc::Status::Ok();
  };
  dc::CaseResult r = run_with(ok_without_writing);
  EXPECT_EQ(r.verdict, Verdict::kError) << r.message;  // outputs still poisoned
  r = run_with([](const dc::Case&, const dc::TensorMap&, dc::TensorMap&) -> dc::Status {
    throw std::runtime_error("boom");
  });
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.message.find("boom"), std::string::npos) << r.message;
  r = run_with([](const dc::Case&, const dc::TensorMap&, dc::TensorMap&) {
    return dc::Status::Unsupported("no bf16 here");
  });
  EXPECT_EQ(r.verdict, Verdict::kUnsupported);
  EXPECT_EQ(r.message, "no bf16 here");
  r = run_with(ok_without_writing, [](const dc::Case&) { return dc::Support::No("not today"); });
  EXPECT_EQ(r.verdict, Verdict::kUnsupported);
  EXPECT_EQ(r.message, "not today");
}

TEST(ApiBackend, AFunctionThatWritesIntoItsInputsIsAnErrorWhenItsInputsAreChecked) {
  // A correct kernel that, on its n-th call, writes into element 77 of its input 'k' after
  // computing its outputs: the case's own call (copied when prepared), the repeat probe's (the
  // case's inputs again) and the isolation probe's (a variation, copied when its setup is
  // built), with and without preparing ahead; and a chunked case, whose calls the runner makes
  // from pieces of the inputs (copied before each call).
  std::shared_ptr<dc::Backend> cpu = dc::make_backend("cpu");
  int calls = 0, write_on = 0;
  bool wrote = false;
  dc::FunctionBackend writer(
      "writer",
      [&](const dc::Case& c, const dc::TensorMap& in, dc::TensorMap& out) {
        const dc::Status st = cpu->run(c, in, out);
        const dc::Tensor& k = in.at("k");
        if (++calls == write_on && k.numel() > 77) {  // not the alone call of an empty sequence
          const_cast<dc::Tensor&>(k).set(77, k.get(77) + 1.0);
          wrote = true;
        }
        return st;
      },
      [&](const dc::Case& c) { return cpu->supports(c); });
  writer.set_checks_inputs(true);
  const std::string chunked = dc::parse_case(kPacked).with({{"cache", "chunked"}}).id();
  for (const bool ahead : {false, true})
    for (const auto& [id, n, where] :
         std::vector<std::tuple<std::string, int, std::string>>{{kPacked, 0, ""},
                                                                {kPacked, 1, ""},
                                                                {kPacked, 2, "probe repeat: "},
                                                                {kPacked, 3, "probe isolation: "},
                                                                {chunked, 2, ""}}) {
      SCOPED_TRACE(id + ", writing on call " + std::to_string(n) + (ahead ? ", ahead" : ""));
      dc::RunOptions o;
      o.prepare_ahead = ahead;
      calls = 0;
      write_on = n;
      const dc::CaseResult r = dc::run({dc::parse_case(id)}, {&writer}, o).at(0);
      if (n == 0) {  // never: a correct kernel whose inputs are checked passes
        EXPECT_EQ(r.verdict, Verdict::kPass) << r.message;
        continue;
      }
      EXPECT_EQ(r.verdict, Verdict::kError) << r.message;
      // Caught by the call that wrote (not by the next call on the same inputs).
      EXPECT_EQ(r.message.rfind(where + "the backend wrote into its input 'k' (element 77 of ", 0),
                0u)
          << r.message;
    }
  // Every call the case makes, whichever probe makes it: a write into its inputs is an error.
  calls = 0;
  write_on = 0;
  ASSERT_EQ(dc::run({dc::parse_case(kPacked)}, {&writer}, {}).at(0).verdict, Verdict::kPass);
  const int total = calls;
  EXPECT_EQ(total, 10);  // the case's, repeat, isolation x 2, alone x 3, order, split x 2
  int caught = 0;
  for (const bool ahead : {false, true})
    for (int n = 1; n <= total; ++n) {
      SCOPED_TRACE("writing on call " + std::to_string(n) + " of " + std::to_string(total) +
                   (ahead ? ", ahead" : ""));
      dc::RunOptions o;
      o.prepare_ahead = ahead;
      calls = 0;
      write_on = n;
      wrote = false;
      const dc::CaseResult r = dc::run({dc::parse_case(kPacked)}, {&writer}, o).at(0);
      if (!wrote) {  // the call of the empty sequence alone: no element 77 to write
        EXPECT_EQ(r.verdict, Verdict::kPass) << r.message;
        continue;
      }
      ++caught;
      EXPECT_EQ(r.verdict, Verdict::kError) << r.message;
      EXPECT_NE(r.message.find("the backend wrote into its input 'k' (element 77 of "),
                std::string::npos)
          << r.message;
    }
  EXPECT_EQ(caught, 2 * (total - 1));
}

TEST(ApiBackend, GdrBackendPassesACorrectKernelInEveryCacheModeItTakes) {
  auto b = dc::gdr_backend("recurrent", recurrent_kernel);
  for (const std::string id :
       {kPacked, "gdr(layout=packed[63,0,65],dtype=bf16,seed=4)",
        "gdr(layout=batch[3x64],dtype=fp16,seed=5)", "gdr(layout=packed[1*8],cache=decode)",
        "gdr(layout=packed[63,0,65],cache=chunked,calls=3)",
        "gdr(layout=packed[3*8,300,2*8],cache=dynamic)",
        "gdr(layout=single[70],cache=none,state=none)",
        "gdr(layout=packed[15,64,65],H=1,HV=4,K=60,V=100)"}) {
    const dc::CaseResult r = dc::run_case(dc::parse_case(id), *b);
    EXPECT_EQ(r.verdict, Verdict::kPass) << dc::format_result(r);
  }
}

TEST(ApiBackend, GdrBackendFlagsAWrongKernelAndDeclinesWhatItCannotRun) {
  auto off_scale = dc::gdr_backend("off-scale", [](const dc::GdrProblem& p) {
    dc::GdrProblem q = p;
    q.scale *= 1.01f;
    return recurrent_kernel(q);
  });
  dc::CaseResult r = dc::run_case(dc::parse_case(kPacked), *off_scale);
  EXPECT_EQ(r.verdict, Verdict::kFail) << dc::format_result(r);

  dc::GdrBackendOptions fp32_only;
  fp32_only.dtypes = {dc::DType::kF32};
  auto b = dc::gdr_backend("fp32-only", recurrent_kernel, fp32_only);
  r = dc::run_case(dc::parse_case("gdr(layout=single[9],dtype=bf16)"), *b);
  EXPECT_EQ(r.verdict, Verdict::kUnsupported);
  EXPECT_EQ(r.message, "fp32-only does not take dtype bf16");
  r = dc::run_case(dc::parse_case("gdr(layout=packed[1*12],cache=pool)"), *b);
  EXPECT_EQ(r.verdict, Verdict::kUnsupported);
  EXPECT_NE(r.message.find("cache=pool"), std::string::npos) << r.message;
  r = dc::run_case(dc::parse_case("mask()"), *b);
  EXPECT_EQ(r.verdict, Verdict::kUnsupported);
  EXPECT_EQ(r.message, "fp32-only runs the gdr op only");

  dc::TensorMap in, out;
  const dc::GdrCall call = dc::gdr_problem(dc::parse_case("mask()"), in, out);
  EXPECT_EQ(call.status.code(), dc::StatusCode::kInvalidArgument);
}

// --- running and reports -------------------------------------------------------------------

TEST(ApiRun, RunsASelectionInOrderAndReportsIt) {
  const dc::Selection sel = dc::Selection("smoke").filter("^gdr\\(").filter("packed\\[63,0,65\\]");
  const auto cases = dc::select(sel);
  ASSERT_GE(cases.size(), 3u);
  auto good = dc::gdr_backend("mine", recurrent_kernel);
  auto leaky = dc::make_backend("wrong:ignore-cu-seqlens");
  dc::RunOptions o;
  o.jobs = 2;
  int calls = 0;
  const auto results =
      dc::run(cases, {good.get(), leaky.get()}, o, [&](const dc::CaseResult&) { ++calls; });
  ASSERT_EQ(results.size(), 2 * cases.size());
  EXPECT_EQ(calls, static_cast<int>(results.size()));
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(results[2 * i].case_id, cases[i].id());
    EXPECT_EQ(results[2 * i].backend, "mine");
    EXPECT_EQ(results[2 * i].verdict, Verdict::kPass) << dc::format_result(results[2 * i]);
    EXPECT_EQ(results[2 * i + 1].verdict, Verdict::kLeak);
  }
  EXPECT_TRUE(dc::fails(results));
  EXPECT_FALSE(dc::fails(results, {Verdict::kFail, Verdict::kError}));
  EXPECT_NE(dc::format_summary(results, 1.0).find("FAILED"), std::string::npos);

  dc::ReportOptions ro;
  ro.selection = sel;
  const dc::Report rep = dc::make_report(results, ro);
  EXPECT_EQ(rep.selected_cases, static_cast<int64_t>(cases.size()));
  ASSERT_EQ(rep.entries.size(), results.size());
  EXPECT_TRUE(rep.entries[0].rerun.empty());  // "mine" is not a backend the tool knows
  EXPECT_NE(rep.entries[1].rerun.find("wrong:ignore-cu-seqlens"), std::string::npos);
  const fs::path dir = fs::temp_directory_path() / ("dc_api_report_" + std::to_string(getpid()));
  ASSERT_TRUE(dc::write_report(rep, dir.string()).ok());
  for (const char* f : {"report.json", "junit.xml", "summary.md", "report.html"})
    EXPECT_TRUE(fs::exists(dir / f)) << f;
  const std::string junit = read_file(dir / "junit.xml");
  EXPECT_NE(junit.find("type=\"leak\""), std::string::npos);
  EXPECT_NE(junit.find("[mine]"), std::string::npos);
  const dc::LoadedReport back = dc::read_report(dir.string());
  ASSERT_TRUE(back.status.ok()) << back.status.message();
  EXPECT_EQ(back.report.entries.size(), results.size());
  fs::remove_all(dir);
  EXPECT_FALSE(dc::write_report(rep, "/proc/no/such/dir").ok());
}

TEST(ApiRun, PreparingAheadChangesNothingButTheWaiting) {
  // The smoke suite's gdr cases: bf16 ones the fp32-only backend declines, packed ones the leaky
  // kernel leaks on, and the rest; with prepare_ahead the next case is prepared on another
  // thread, while the backends are still called from the caller's thread in case order.
  const auto cases = dc::select(dc::Selection("smoke").filter("^gdr\\("));
  ASSERT_GE(cases.size(), 10u);
  dc::GdrBackendOptions fp32_only;
  fp32_only.dtypes = {dc::DType::kF32};
  auto good = dc::gdr_backend("fp32-only", recurrent_kernel, fp32_only);
  std::shared_ptr<dc::Backend> leaky_inner = dc::make_backend("wrong:ignore-cu-seqlens");
  std::vector<std::string> seen;  // the cases the leaky backend was called on, in call order
  std::set<std::thread::id> threads;
  dc::FunctionBackend leaky(
      "leaky",
      [&](const dc::Case& c, const dc::TensorMap& in, dc::TensorMap& out) {
        seen.push_back(c.id());
        threads.insert(std::this_thread::get_id());
        return leaky_inner->run(c, in, out);
      },
      [&](const dc::Case& c) { return leaky_inner->supports(c); });
  leaky.set_checks_inputs(true);  // its inputs copied ahead, too: the same verdicts
  auto run = [&](bool ahead) {
    dc::RunOptions o;
    o.prepare_ahead = ahead;
    seen.clear();
    threads.clear();
    return dc::run(cases, {good.get(), &leaky}, o);
  };
  const auto plain = run(false);
  const std::vector<std::string> seen_plain = seen;
  const auto ahead = run(true);
  ASSERT_EQ(plain.size(), ahead.size());
  std::set<Verdict> verdicts;
  for (size_t i = 0; i < plain.size(); ++i) {
    SCOPED_TRACE(plain[i].case_id + " on " + plain[i].backend);
    EXPECT_EQ(ahead[i].case_id, plain[i].case_id);
    EXPECT_EQ(ahead[i].backend, plain[i].backend);
    EXPECT_EQ(ahead[i].verdict, plain[i].verdict);
    EXPECT_EQ(ahead[i].message, plain[i].message);
    EXPECT_EQ(ahead[i].worst_rel_rms, plain[i].worst_rel_rms);
    ASSERT_EQ(ahead[i].probes.size(), plain[i].probes.size());
    for (size_t p = 0; p < plain[i].probes.size(); ++p)
      EXPECT_EQ(ahead[i].probes[p].detail, plain[i].probes[p].detail);
    verdicts.insert(plain[i].verdict);
  }
  EXPECT_EQ(verdicts, (std::set<Verdict>{Verdict::kPass, Verdict::kLeak, Verdict::kUnsupported}));
  EXPECT_EQ(seen, seen_plain);  // the same calls in the same order
  EXPECT_EQ(threads, std::set<std::thread::id>{std::this_thread::get_id()});
}

// --- what the tool needs: it stands on these alone (tools/deltacheck) ----------------------

TEST(ApiSelection, PositionsOfAShardAndPatternNamesInErrors) {
  const dc::Selection sel = dc::Selection("smoke").filter("^gdr\\(");
  const auto all = dc::select(sel);
  const dc::SelectedCases shard = dc::select_with_positions(dc::Selection(sel).shard(1, 3));
  EXPECT_EQ(shard.total, static_cast<int64_t>(all.size()));
  ASSERT_EQ(shard.cases.size(), shard.indices.size());
  ASSERT_FALSE(shard.cases.empty());
  for (size_t k = 0; k < shard.cases.size(); ++k) {
    EXPECT_EQ(shard.indices[k], static_cast<int64_t>(3 * k + 1));
    EXPECT_EQ(shard.cases[k], all.at(shard.indices[k]));
  }
  try {
    dc::select_with_positions(dc::Selection("smoke").exclude("gdr("), "--filter", "--exclude");
    FAIL() << "a bad regex was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--exclude 'gdr('"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(dc::IdFilter("seed=3", "f").matches(kPacked));
  EXPECT_FALSE(dc::IdFilter("seed=4", "f").matches(kPacked));
  bool has_gdr = false;
  for (const dc::OpSchema& op : dc::list_ops()) has_gdr = has_gdr || op.op == "gdr";
  EXPECT_TRUE(has_gdr);
  EXPECT_EQ(dc::printable_line("a\nb"), "a\\nb");
}

TEST(ApiRun, MemoryLimitsSkipAndFailuresReachTheCallbackWithTheOutputs) {
  const auto cases = dc::select(dc::Selection::case_ids({kPacked}));
  auto leaky = dc::make_backend("wrong:ignore-cu-seqlens");
  EXPECT_EQ(dc::parse_memory_size("2K"), 2048);
  EXPECT_THROW(dc::parse_memory_size("lots"), std::invalid_argument);
  EXPECT_NE(dc::memory_refusal(cases[0], 1024), "");
  EXPECT_EQ(dc::memory_refusal(cases[0], 0), "");
  dc::RunOptions o;
  o.max_memory_bytes = 1024;
  EXPECT_EQ(dc::run(cases, {leaky.get()}, o)[0].verdict, Verdict::kSkipped);
  o.max_memory_bytes = 0;
  int failures = 0;
  o.on_failure = [&](const dc::PreparedCase& pc, const dc::TensorMap& outputs,
                     const dc::CaseResult& r) {
    ++failures;
    EXPECT_EQ(pc.c, cases[0]);
    EXPECT_NE(outputs.find("o"), nullptr);
    EXPECT_EQ(r.verdict, Verdict::kLeak);
  };
  EXPECT_EQ(dc::run(cases, {leaky.get()}, o)[0].verdict, Verdict::kLeak);
  EXPECT_EQ(failures, 1);
  // A crash in an isolated backend is the verdict error, and the caller lives on.
  auto crash = dc::isolated_backend(dc::make_backend("wrong:segfault"), 30.0);
  EXPECT_EQ(dc::run_case(cases[0], *crash).verdict, Verdict::kError);
}

TEST(ApiGolden, AStoredCaseRunsAndRegeneratesAsItsId) {
  const fs::path file =
      fs::temp_directory_path() / ("dc_api_golden_" + std::to_string(getpid()) + ".h5");
  dc::FixtureFileInfo info;
  info.generator_version = dc::kGeneratorVersion;
  info.tolerance_policy = dc::tolerance_policy_id();
  dc::FixtureWriter w;
  ASSERT_TRUE(w.open(file.string(), info).ok());
  ASSERT_TRUE(w.add(dc::make_fixture_case(dc::parse_case(kPacked))).ok());
  ASSERT_TRUE(w.commit().ok());
  dc::FixtureReader reader;
  ASSERT_TRUE(dc::run_in_child([&] { return dc::FixtureReader().open(file.string()); }, 30).ok());
  ASSERT_TRUE(reader.open(file.string()).ok());
  ASSERT_EQ(reader.case_groups().size(), 1u);
  auto fc = reader.read(0);
  ASSERT_TRUE(fc.ok()) << fc.status().message();
  EXPECT_EQ(dc::unescape_case_id(reader.case_groups()[0]), fc.value().c.id());
  EXPECT_TRUE(dc::check_stored(fc.value()).ok());
  EXPECT_TRUE(dc::check_drift(fc.value()).ok);
  auto pc = dc::prepare_stored(fc.take());
  ASSERT_TRUE(pc.ok());
  auto cpu = dc::make_backend("cpu");
  auto leaky = dc::make_backend("wrong:ignore-cu-seqlens");
  EXPECT_EQ(dc::run_case(pc.value(), *cpu).verdict, Verdict::kPass);
  EXPECT_EQ(dc::run_case(pc.value(), *leaky).verdict, Verdict::kLeak);
  fs::remove(file);
  // A child that crashes or hangs is an error, not the caller's end.
  EXPECT_TRUE(dc::run_in_child([] { return dc::Status::Ok(); }, 30).ok());
  EXPECT_FALSE(dc::run_in_child([]() -> dc::Status { std::abort(); }, 30).ok());
}

// --- the GoogleTest helper -----------------------------------------------------------------

// Must fail: the verdict line is the message. (Globals: EXPECT_FATAL_FAILURE's statement cannot
// use locals.)
dc::Backend* g_backend = nullptr;
std::vector<Verdict> g_expected;

TEST(ApiGtest, CheckCaseFailsWithTheVerdictLine) {
  auto leaky = dc::make_backend("wrong:ignore-cu-seqlens");
  g_backend = leaky.get();
  g_expected = {Verdict::kPass};
  EXPECT_FATAL_FAILURE(dc::gtest::check_case(dc::parse_case(kPacked), *g_backend, g_expected),
                       "LEAK        wrong:ignore-cu-seqlens");
  auto cpu = dc::make_backend("cpu");
  g_backend = cpu.get();
  g_expected = {Verdict::kLeak};
  EXPECT_FATAL_FAILURE(dc::gtest::check_case(dc::parse_case(kPacked), *g_backend, g_expected),
                       "expected verdict leak, got pass");
  g_backend = nullptr;
}

TEST(ApiGtest, CheckCaseSkipsWhatTheBackendDeclines) {
  dc::GdrBackendOptions fp32_only;
  fp32_only.dtypes = {dc::DType::kF32};
  auto b = dc::gdr_backend("fp32-only", recurrent_kernel, fp32_only);
  ::testing::TestPartResultArray parts;
  {
    // Intercepted, so that this test reports what check_case did instead of being skipped.
    ::testing::ScopedFakeTestPartResultReporter intercept(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &parts);
    dc::gtest::check_case(dc::parse_case("gdr(layout=single[9],dtype=bf16)"), *b);
  }
  ASSERT_EQ(parts.size(), 1);
  EXPECT_TRUE(parts.GetTestPartResult(0).skipped());
  EXPECT_NE(std::string(parts.GetTestPartResult(0).message())
                .find("unsupported: fp32-only does not take dtype bf16"),
            std::string::npos)
      << parts.GetTestPartResult(0).message();
}

}  // namespace

// The helper itself: deltacheck's CPU backend passes the smoke suite's packed gdr cases, and the
// deliberately leaky backend (it ignores cu_seqlens) is flagged leak on every packed case with two
// or more sequences, and passes batch rows, which have no cu_seqlens to ignore (the probes keep a
// batch case a batch).
DELTACHECK_INSTANTIATE_SUITE(ApiSuiteCpu, dc::Selection("smoke").filter("^gdr\\(").filter("packed"),
                             [] { return dc::make_backend("cpu"); });
DELTACHECK_EXPECT_VERDICTS(
    ApiSuiteLeaky,
    dc::Selection("smoke").filter("^gdr\\(").exclude("cache=(pool|spec|ckpt|accept|tree)"),
    [] { return dc::make_backend("wrong:ignore-cu-seqlens"); },
    [](const dc::Case& c) {
      const bool packed = c.get("layout").rfind("packed", 0) == 0;
      return std::vector<Verdict>{packed && nonempty_sequences(c) >= 2 ? Verdict::kLeak
                                                                       : Verdict::kPass};
    });
