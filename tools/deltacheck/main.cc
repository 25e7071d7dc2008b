// deltacheck: the command-line tool. Exit codes: 0 all pass, 1 a failing verdict, 2 usage or
// input error. Diagnostics are one line on stderr, prefixed "deltacheck: error: ".
#include <cstdio>
#include <string>
#include <vector>

#include "tools/deltacheck/commands.h"

int main(int argc, char** argv) {
  using namespace deltacheck::cli;
  CLI::App app{"deltacheck: conformance and differential testing of the gated delta rule"};
  app.set_version_flag("--version", std::string("deltacheck ") + DELTACHECK_VERSION);
  app.require_subcommand(1);
  app.footer(R"(examples:
  deltacheck run --suite smoke --backend cpu
  deltacheck run --suite smoke --backend cpu,wrong:ignore-cu-seqlens
  deltacheck run --suite gate --filter 'layout=packed.*dtype=bf16' --jobs 2
  deltacheck run --case 'gdr(layout=packed[63,0,65],dtype=bf16,gate=strong,seed=7)'
  deltacheck list backends
  deltacheck list cases --suite gate --filter 'gate=tail'
  deltacheck golden verify golden/fixtures.h5 --backend cpu
  deltacheck run --backend external --cmd 'python3 adapters/python/numpy_gdr.py {in} {out}'
  deltacheck run --suite gate --shard 0/4 --report-dir shard0 --fail-on fail,leak,error
  deltacheck report merge shard0 shard1 shard2 shard3 -o merged
  deltacheck bench compare old.json new.json --vs-ceiling
  deltacheck shrink --case 'gdr(layout=packed[1*40,2*30,3*20],HV=8)' --backend wrong:ignore-cu-seqlens
  deltacheck hunt --backend wrong:ignore-cu-seqlens --budget 30s --seed 1 --corpus found/
  deltacheck run --suite gate --backend mykernel --expect known.pins
  deltacheck report diff old-report new-report --factor 5
exit codes: 0 all pass, 1 a case failed (fail, leak, error; see --fail-on), 2 usage or input error)");

  register_optional_backends();
  const std::vector<Command> commands{
      add_run_command(app),    add_list_command(app),        add_golden_command(app),
      add_report_command(app), add_bench_command(app),       add_shrink_command(app),
      add_hunt_command(app),   add_report_diff_command(app),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "deltacheck: error: %s (see deltacheck --help)\n",
                 deltacheck::printable_line(e.what()).c_str());
    return kExitUsage;
  }
  try {
    for (const Command& c : commands)
      if (c.app->parsed()) return c.run();
  } catch (const std::exception& e) {
    // One line, whatever the message quotes (a --filter with a newline, a file's bytes).
    std::fprintf(stderr, "deltacheck: error: %s\n", deltacheck::printable_line(e.what()).c_str());
    return kExitUsage;
  }
  return kExitUsage;
}
