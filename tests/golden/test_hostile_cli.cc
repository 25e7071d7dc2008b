// The command line as a careless user types it (issue 35, CLI1 and S1): options that take several
// values take one per occurrence, so a positional FILE after them stays the FILE; an error says
// what is wrong with what was given; zero-token cases that crashed are input errors in `run` and
// `golden generate` alike (one line, exit 2, nothing on stdout, no file written).
#include <gtest/gtest.h>

#include <filesystem>

#include "golden_test_util.h"

namespace deltacheck::golden {
namespace {

using testing::expect_one_line_error;
using testing::quote;
using testing::run_cli;
using testing::TempDir;

TEST(CommandLine, AFileAfterAMultiValueOptionIsTheFile) {
  TempDir dir;
  const std::string fixture = dir / "f.h5";
  ASSERT_EQ(run_cli("golden generate --case " + quote("gdr(layout=packed[3,4],K=8,V=8)") + " -o " +
                        fixture,
                    dir)
                .exit_code,
            0);
  for (const std::string& args :
       {"golden verify --backend cpu " + fixture + " -q",
        "golden verify -b cpu " + fixture + " --fail-on fail,leak",
        "golden verify --fail-on fail " + fixture + " --backend cpu -q",
        "golden verify --backend cpu --backend wrong:readout-before-update " + fixture + " -q"}) {
    const testing::CliResult r = run_cli(args, dir);
    EXPECT_NE(r.exit_code, 2) << args << ": " << r.err;
    EXPECT_EQ(r.err.find("file is required"), std::string::npos) << args << ": " << r.err;
  }
  // Repeated --case and --exclude still add up.
  const testing::CliResult r = run_cli("run -q --case " + quote("gdr(K=8,V=8)") + " --case " +
                                           quote("gdr(K=4,V=4)") + " --exclude K=4 --exclude H=7",
                                       dir);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("1 cases x 1 backends"), std::string::npos) << r.out;
}

TEST(CommandLine, ACommandWithoutItsFilesSaysWhichIsMissing) {
  TempDir dir;
  expect_one_line_error("no {out}", run_cli("run --backend external --cmd 'x {in}'", dir),
                        "--cmd must contain {out}");
  expect_one_line_error("no {in}", run_cli("run --backend external --cmd 'x {out}'", dir),
                        "--cmd must contain {in}");
  expect_one_line_error("no --cmd", run_cli("run --backend external", dir),
                        "--backend external needs --cmd 'PROGRAM {in} {out}'");
}

TEST(CommandLine, ZeroTokenCasesThatCrashedAreInputErrors) {
  TempDir dir;
  for (const char* id :
       {"gdr(layout=batch[4x0],cache=spec)", "gdr(layout=batch[1x0],cache=accept)",
        "gdr(layout=single[0],cache=spec)", "gdr(layout=packed[0],cache=none,state=none)",
        "layer(layout=packed[0])"}) {
    expect_one_line_error(id, run_cli("run --backend cpu --case " + quote(id), dir),
                          "holds no token");
    const std::string out = dir / "zero.h5";
    expect_one_line_error(id, run_cli("golden generate --case " + quote(id) + " -o " + out, dir),
                          "holds no token");
    EXPECT_FALSE(std::filesystem::exists(out)) << id;
  }
}

}  // namespace
}  // namespace deltacheck::golden
