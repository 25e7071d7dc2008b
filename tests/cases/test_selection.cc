// cases::select, the one selection behind the tool's options and the API's Selection.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "cases/selection.h"

namespace deltacheck::cases {
namespace {

TEST(Selection, FiltersAllMustMatchAndAnyExcludeDrops) {
  SelectionSpec s;
  s.suite = "smoke";
  const int64_t all = select(s).total;
  s.filters = {"^gdr\\("};
  const SelectedCases gdr = select(s);
  ASSERT_GT(gdr.total, 0);
  ASSERT_LT(gdr.total, all);
  for (const Case& c : gdr.cases) EXPECT_EQ(c.op(), "gdr");
  s.filters.push_back("dtype=bf16");
  const SelectedCases bf16 = select(s);
  ASSERT_GT(bf16.total, 0);
  for (const Case& c : bf16.cases) EXPECT_NE(c.id().find("dtype=bf16"), std::string::npos);
  s.filters = {"^gdr\\("};
  s.excludes = {"dtype=bf16", "layout=single"};
  const SelectedCases rest = select(s);
  for (const Case& c : rest.cases) {
    EXPECT_EQ(c.id().find("dtype=bf16"), std::string::npos);
    EXPECT_EQ(c.id().find("layout=single"), std::string::npos);
  }
  EXPECT_LT(rest.total, gdr.total - bf16.total + 1);
}

TEST(Selection, ShardsStripeTheFilteredCasesAndKeepTheirPositions) {
  SelectionSpec s;
  s.suite = "smoke";
  s.excludes = {"^mask\\("};
  const SelectedCases whole = select(s);
  s.shard_count = 3;
  int64_t seen = 0;
  for (int i = 0; i < 3; ++i) {
    s.shard_index = i;
    const SelectedCases part = select(s);
    EXPECT_EQ(part.total, whole.total);
    for (size_t k = 0; k < part.cases.size(); ++k) {
      EXPECT_EQ(part.indices[k] % 3, i);
      EXPECT_EQ(part.cases[k].id(), whole.cases[static_cast<size_t>(part.indices[k])].id());
    }
    seen += static_cast<int64_t>(part.cases.size());
  }
  EXPECT_EQ(seen, whole.total);
  s.shard_index = 3;
  EXPECT_THROW(select(s), std::invalid_argument);
}

TEST(Selection, TheSeedIsReplacedBeforeFilteringAndBadPatternsNameTheirOption) {
  SelectionSpec s;
  s.ids = {"gdr(layout=single[5],seed=3)"};
  s.seed = 11;
  s.filters = {"seed=11\\)$"};
  ASSERT_EQ(select(s).cases.size(), 1u);
  s.exclude_name = "--exclude";
  s.excludes = {"x("};
  try {
    select(s);
    FAIL() << "a bad pattern was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--exclude 'x(' is not a valid regex", 0), 0u)
        << e.what();
  }
}

}  // namespace
}  // namespace deltacheck::cases
