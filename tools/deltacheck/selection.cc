// Case selection shared by the subcommands, and sharding over CI runners (--shard I/N, or
// GoogleTest's GTEST_SHARD_INDEX / GTEST_TOTAL_SHARDS).
#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include "tools/deltacheck/commands.h"

namespace deltacheck::cli {

std::vector<std::string> split_commas(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const std::string& item : items) {
    size_t start = 0;
    while (start <= item.size()) {
      size_t comma = item.find(',', start);
      if (comma == std::string::npos) comma = item.size();
      if (comma > start) out.push_back(item.substr(start, comma - start));
      start = comma + 1;
    }
  }
  return out;
}

IdFilter make_id_filter(const std::string& filter) {
  try {
    return IdFilter(filter, "--filter");
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

void add_selection_options(CLI::App* app, Selection& s) {
  app->add_option("--suite,-s", s.suite, "suite: smoke, gate, full, or corpus:DIR (a hunt's finds)")
      ->capture_default_str();
  // Repeatable options take one value per occurrence (allow_extra_args(false)): a vector option
  // would otherwise take every word up to the next option, a positional FILE included.
  app->add_option("--case", s.case_ids, "exactly this case id (repeatable; overrides --suite)")
      ->allow_extra_args(false);
  app->add_option("--filter,-f", s.filter,
                  "keep cases whose id matches this regex (RE2 syntax, linear time)");
  app->add_option("--exclude,-x", s.excludes,
                  "drop cases whose id matches this regex (RE2 syntax; repeatable)")
      ->allow_extra_args(false);
  app->add_option("--seed", s.seed, "replace every case's seed with this one")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 62));
  app->add_option("--shard", s.shard,
                  "run shard I of N (0 <= I < N): case i of the selection goes to shard i % N; "
                  "default: GTEST_SHARD_INDEX / GTEST_TOTAL_SHARDS when both are set")
      ->type_name("I/N");
}

namespace {

// "I/N" -> {I, N}; `what` names the source in errors.
std::pair<int, int> parse_shard(const std::string& index, const std::string& count,
                                const std::string& what) {
  auto number = [&](const std::string& t) {
    if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos)
      throw UsageError(what + ": expected I/N with 0 <= I < N");
    if (t.size() > 6) throw UsageError(what + ": at most 999999 shards (N <= 999999)");
    return std::stoi(t);
  };
  const int i = number(index), n = number(count);
  if (n < 1 || i >= n) throw UsageError(what + ": expected I/N with 0 <= I < N");
  return {i, n};
}

}  // namespace

SelectedCases select_sharded(const Selection& s) {
  SelectedCases out;
  if (!s.shard.empty()) {
    const size_t slash = s.shard.find('/');
    std::tie(out.shard_index, out.shard_count) = parse_shard(
        s.shard.substr(0, slash), slash == std::string::npos ? "" : s.shard.substr(slash + 1),
        "--shard '" + s.shard + "'");
  } else if (const char* i = std::getenv("GTEST_SHARD_INDEX"),
             *n = std::getenv("GTEST_TOTAL_SHARDS");
             i && n) {
    // Both set, as GoogleTest requires; a test runner that shards sets them for every shard.
    std::tie(out.shard_index, out.shard_count) =
        parse_shard(i, n, std::string("GTEST_SHARD_INDEX=") + i + " GTEST_TOTAL_SHARDS=" + n);
    // Tell the runner that sharding is supported, as GoogleTest does.
    if (const char* status = std::getenv("GTEST_SHARD_STATUS_FILE")) std::ofstream touch(status);
  }
  deltacheck::Selection spec = s.case_ids.empty() ? deltacheck::Selection(s.suite)
                                                  : deltacheck::Selection::case_ids(s.case_ids);
  spec.filter(s.filter).seed(s.seed).shard(out.shard_index, out.shard_count);
  for (const std::string& e : s.excludes) spec.exclude(e);
  try {
    deltacheck::SelectedCases sel = select_with_positions(spec, "--filter", "--exclude");
    out.cases = std::move(sel.cases);
    out.indices = std::move(sel.indices);
    out.total = sel.total;
  } catch (const CaseIdError& e) {
    throw UsageError(e.what());
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  return out;
}

std::vector<Case> select_cases(const Selection& s) { return select_sharded(s).cases; }

}  // namespace deltacheck::cli
