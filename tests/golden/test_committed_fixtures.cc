// The committed fixtures (golden/*.h5) cover every operation and every cache mode this build
// knows, so a new op or mode cannot go without ground truth unnoticed. (CI's golden.verify.* and
// golden.check.* tests judge and regenerate the same files.)
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "cases/op.h"
#include "deltacheck_test_paths.h"
#include "golden_test_util.h"

namespace deltacheck::golden {
namespace {

TEST(CommittedFixtures, CoverEveryOpAndCacheMode) {
  std::map<std::string, std::set<std::string>> seen;  // op -> cache modes
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(DELTACHECK_SOURCE_DIR "/golden")) {
    if (e.path().extension() != ".h5") continue;
    ++files;
    FixtureReader r;
    ASSERT_TRUE(r.open(e.path().string()).ok()) << e.path();
    for (size_t i = 0; i < r.case_groups().size(); ++i) {
      StatusOr<FixtureCase> fc = r.read(i);
      ASSERT_TRUE(fc.ok()) << fc.status().message();
      std::string cache = "-";
      for (const auto& [k, v] : fc.value().c.params())
        if (k == "cache") cache = v;
      seen[fc.value().c.op()].insert(cache);
    }
  }
  ASSERT_GT(files, 0) << "no fixture in golden/";
  const char* fix =
      ": add a case to golden/fixtures.cases and regenerate: build/deltacheck golden generate "
      "--cases-from golden/fixtures.cases -o golden/fixtures.h5";
  for (const cases::OpSchema& s : cases::op_schemas()) {
    EXPECT_TRUE(seen.count(s.op)) << "op '" << s.op << "' has no golden fixture" << fix;
    for (const cases::ParamSpec& p : s.params) {
      if (p.key != "cache") continue;
      for (const std::string& mode : p.choices) {
        EXPECT_TRUE(seen[s.op].count(mode))
            << "op '" << s.op << "', cache=" << mode << " has no golden fixture" << fix;
      }
    }
  }
}

}  // namespace
}  // namespace deltacheck::golden
