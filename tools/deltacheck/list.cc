// deltacheck list: suites, backends, operations, or the cases of a selection.
#include <cstdio>
#include <memory>

#include "tools/deltacheck/commands.h"

namespace deltacheck::cli {
namespace {

namespace dc = deltacheck;

int list(const std::string& what, const Selection& sel) {
  if (what == "suites" || what.empty()) {
    std::printf("suites:\n");
    for (const auto& s : dc::list_suites())
      std::printf("  %-8s %4zu cases  %s\n", s.name.c_str(), dc::suite(s.name).size(),
                  s.help.c_str());
  }
  if (what == "backends" || what.empty()) {
    std::printf("backends:\n");
    for (const auto& b : dc::list_backends())
      if (!b.deliberately_wrong && !b.deliberately_correct)
        std::printf("  %-30s %s\n", b.name.c_str(), b.description.c_str());
    std::printf(
        "deliberately correct, independent formulations (the false-positive panel, "
        "docs/panel.md):\n");
    for (const auto& b : dc::list_backends())
      if (b.deliberately_correct)
        std::printf("  %-30s %s\n", b.name.c_str(), b.description.c_str());
    std::printf("deliberately wrong backends (they prove the harness can fail):\n");
    for (const auto& b : dc::list_backends())
      if (b.deliberately_wrong) std::printf("  %-30s %s\n", b.name.c_str(), b.description.c_str());
  }
  if (what == "ops" || what.empty()) {
    std::printf("operations and case-id parameters:\n");
    for (const auto& s : dc::list_ops()) {
      std::printf("  %s: %s\n", s.op.c_str(), s.help.c_str());
      for (const auto& p : s.params) {
        // The values an id accepts, from the schema itself (help text can drift; this cannot).
        std::string values;
        for (const std::string& c : p.choices) values += (values.empty() ? "" : "|") + c;
        if (p.kind == dc::ParamSpec::Kind::kInt)
          values = std::to_string(p.min) + ".." + std::to_string(p.max);
        std::printf("    %-8s default %-12s %s%s\n", p.key.c_str(), p.default_value.c_str(),
                    p.help.c_str(), values.empty() ? "" : (" [" + values + "]").c_str());
      }
    }
  }
  if (what == "cases") {
    for (const auto& c : select_cases(sel)) std::printf("%s\n", c.id().c_str());
  }
  if (!what.empty() && what != "suites" && what != "backends" && what != "ops" && what != "cases")
    throw UsageError("list what? '" + what + "' (suites, backends, ops, cases)");
  return kExitPass;
}

struct ListArgs {
  std::string what;
  Selection sel;
};

}  // namespace

Command add_list_command(CLI::App& app) {
  auto args = std::make_shared<ListArgs>();
  CLI::App* cmd = app.add_subcommand("list", "list suites, backends, ops or the cases of a suite");
  cmd->add_option("what", args->what, "suites | backends | ops | cases (default: all but cases)");
  add_selection_options(cmd, args->sel);
  return {cmd, [args] { return list(args->what, args->sel); }};
}

}  // namespace deltacheck::cli
