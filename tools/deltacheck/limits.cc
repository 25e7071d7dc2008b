// Resource limits on the command line: --max-memory (memory limits in deltacheck/runner.h).
#include <fmt/format.h>

#include "tools/deltacheck/commands.h"

namespace deltacheck::cli {

void add_max_memory_option(CLI::App* app, std::string& max_memory) {
  app->add_option("--max-memory", max_memory,
                  fmt::format("refuse cases whose tensors would need more memory than this, "
                              "before allocating (16G, 512M, 25%, none; default: half the RAM, "
                              "{}): a suite's case is skipped with the reason, a --case or a "
                              "fixture is an error (exit 2)",
                              format_bytes(static_cast<double>(default_max_memory_bytes()))))
      ->type_name("SIZE");
}

int64_t max_memory_bytes(const std::string& max_memory) {
  if (max_memory.empty()) return default_max_memory_bytes();
  try {
    return parse_memory_size(max_memory);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--max-memory: ") + e.what());
  }
}

void refuse_if_too_big(const Case& c, int64_t max_memory_bytes, bool expectation_cache) {
  std::string why;
  try {
    why = memory_refusal(c, max_memory_bytes, expectation_cache);
  } catch (const std::exception& e) {
    throw UsageError("case '" + c.id() + "': " + e.what());
  }
  if (!why.empty()) throw UsageError("case '" + c.id() + "': " + why);
}

}  // namespace deltacheck::cli
