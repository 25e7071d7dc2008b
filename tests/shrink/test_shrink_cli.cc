// The commands end to end: `shrink` prints the trail, the minimal id and its rerun line and writes
// the fixture, which judges the backend as the case did; `hunt --corpus` keeps the minimal ids and
// `run --suite corpus:DIR` replays them; `run --expect` holds while the pins hold and exits 1 when
// one flips; `report diff` exits 1 on drift and 0 between a report and itself; bad input is exit 2.
#include <gtest/gtest.h>

#include "tests/reports/report_test_util.h"

namespace deltacheck {
namespace {

using reports::testing::deltacheck;
using reports::testing::run_command;
using reports::testing::ScratchDir;
namespace fs = std::filesystem;

const std::string kCase = "'gdr(layout=packed[1*40,2*30,3*20],HV=8,seed=3)'";
const std::string kSmall = "'gdr(layout=packed[5,0,7],seed=10)'";  // leaks on the wrong backend

TEST(ShrinkCli, PrintsTheMinimalCaseAndWritesItsFixture) {
  ScratchDir dir("shrink_cli");
  const std::string fixture = (dir.path() / "min.h5").string();
  const auto r = run_command(deltacheck() + " shrink --backend wrong:ignore-cu-seqlens --case " +
                             kCase + " -o " + fixture);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("minimal: gdr(layout=packed[1,1],H=1,HV=1,K=1,V=1"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("still leak (o)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rerun: deltacheck run --backend wrong:ignore-cu-seqlens --case"),
            std::string::npos);
  EXPECT_NE(r.out.find(" 1. layout packed[1*40,2*30,3*20] -> "), std::string::npos) << r.out;
  // The fixture: the wrong backend still leaks on it, the CPU kernel passes it.
  EXPECT_EQ(run_command(deltacheck() + " golden verify " + fixture +
                        " --backend wrong:ignore-cu-seqlens --quiet")
                .code,
            1);
  EXPECT_EQ(run_command(deltacheck() + " golden verify " + fixture + " --backend cpu --quiet").code,
            0);
  // A case that passes: nothing to shrink, exit 2, no fixture.
  const std::string none = (dir.path() / "none.h5").string();
  const auto p =
      run_command(deltacheck() + " shrink --backend cpu --case " + kCase + " -o " + none);
  EXPECT_EQ(p.code, 2) << p.out;
  EXPECT_NE(p.out.find("deltacheck: error: case 'gdr("), std::string::npos) << p.out;
  EXPECT_FALSE(fs::exists(none));
}

TEST(ShrinkCli, RunShrinkShrinksTheFirstFailure) {
  const auto r = run_command(deltacheck() +
                             " run --backend cpu,wrong:ignore-cu-seqlens --quiet "
                             "--case " +
                             kCase + " --case 'gdr(layout=single[9],seed=1)' --shrink");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("shrink the first failure on wrong:ignore-cu-seqlens"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("shrink the first failure on cpu"), std::string::npos);
  EXPECT_NE(r.out.find("minimal: gdr(layout=packed[1,1]"), std::string::npos);
}

TEST(ShrinkCli, HuntKeepsACorpusThatRunsReplay) {
  ScratchDir dir("hunt_cli");
  const std::string corpus = (dir.path() / "found").string();
  const auto h = run_command(deltacheck() +
                             " hunt --backend wrong:ignore-cu-seqlens --seed 1 "
                             "--ops gdr --max-cases 10 --budget 2m --progress lines --corpus " +
                             corpus);
  ASSERT_EQ(h.code, 1) << h.out;
  EXPECT_NE(h.out.find("finding 1: "), std::string::npos) << h.out;
  EXPECT_NE(h.out.find("10 run"), std::string::npos) << h.out;
  ASSERT_TRUE(fs::is_directory(corpus));
  const auto replay_wrong = run_command(deltacheck() +
                                        " run --backend wrong:ignore-cu-seqlens "
                                        "--quiet --suite corpus:" +
                                        corpus);
  EXPECT_EQ(replay_wrong.code, 1) << replay_wrong.out;
  const auto replay_cpu =
      run_command(deltacheck() + " run --backend cpu --quiet --suite corpus:" + corpus);
  EXPECT_EQ(replay_cpu.code, 0) << replay_cpu.out;
  const auto missing = run_command(deltacheck() + " run --suite corpus:" + corpus + "/nope");
  EXPECT_EQ(missing.code, 2) << missing.out;
  EXPECT_EQ(run_command(deltacheck() + " hunt --backend cpu --ops nope --max-cases 1").code, 2);
}

TEST(ShrinkCli, ExpectHoldsUntilAPinFlips) {
  ScratchDir dir("expect_cli");
  const std::string pins = (dir.path() / "known.pins").string();
  const std::string run = deltacheck() + " run --quiet --case " + kSmall +
                          " --case 'gdr(layout=single[9],seed=1)' --backend ";
  const auto w = run_command(run + "wrong:ignore-cu-seqlens --expect-write " + pins);
  ASSERT_EQ(w.code, 0) << w.out;
  const auto held = run_command(run + "wrong:ignore-cu-seqlens --expect " + pins);
  EXPECT_EQ(held.code, 0) << held.out;
  EXPECT_NE(held.out.find("pins: 2 held, 0 flipped"), std::string::npos) << held.out;
  // The same pins on the correct kernel: under another backend name nothing is pinned, and the
  // gate passes; pinned for any backend ('*'), the known leak that passes now is a flip.
  std::string text = reports::testing::read_file(pins);
  for (size_t at; (at = text.find("wrong:ignore-cu-seqlens ")) != std::string::npos;)
    text.replace(at, std::string("wrong:ignore-cu-seqlens").size(), "*");
  reports::testing::write_file(pins, text);
  const auto flipped = run_command(run + "cpu --expect " + pins);
  EXPECT_EQ(flipped.code, 1) << flipped.out;
  EXPECT_NE(flipped.out.find("FLIP  cpu  leak -> pass"), std::string::npos) << flipped.out;
  reports::testing::write_file(pins, "cpu pass gdr(nope=1)\n");
  const auto bad = run_command(run + "cpu --expect " + pins);
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("known.pins:1: "), std::string::npos) << bad.out;
}

TEST(ShrinkCli, ReportDiffExitsOneOnDrift) {
  ScratchDir dir("diff_cli");
  const std::string a = (dir.path() / "a").string(), b = (dir.path() / "b").string();
  const std::string cases = " --quiet --case " + kSmall + " --case 'gdr(layout=single[9],seed=1)'";
  ASSERT_EQ(run_command(deltacheck() + " run --backend cpu --report-dir " + a + cases).code, 0);
  // The same cases with another verdict: the report of a leaky kernel renamed cpu is not needed,
  // the diff matches (case, backend), so run the wrong backend and diff against itself first.
  ASSERT_EQ(
      run_command(deltacheck() + " run --backend wrong:ignore-cu-seqlens --report-dir " + b + cases)
          .code,
      1);
  const auto same = run_command(deltacheck() + " report diff " + a + " " + a);
  EXPECT_EQ(same.code, 0) << same.out;
  EXPECT_NE(same.out.find("unchanged"), std::string::npos) << same.out;
  const auto other = run_command(deltacheck() + " report diff " + a + " " + b + " --markdown " +
                                 (dir.path() / "d.md").string());
  EXPECT_EQ(other.code, 0) << other.out;  // other backend: new and gone, no drift
  EXPECT_NE(other.out.find("2 new, 2 gone"), std::string::npos) << other.out;
  EXPECT_TRUE(fs::exists(dir.path() / "d.md"));
  EXPECT_EQ(run_command(deltacheck() + " report diff " + a + " " + b + " --factor 1").code, 2);
}

}  // namespace
}  // namespace deltacheck
