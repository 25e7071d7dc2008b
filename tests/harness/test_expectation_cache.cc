// The cross-run expectation cache: a warm run gives the same bits and the same verdicts as a cold
// one, wrong implementations keep their verdicts, and a damaged or foreign entry is never used
// (hostile directories and the key file: test_expectation_cache_hostile.cc).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "backends/registry.h"
#include "cases/suites.h"
#include "harness/backend.h"
#include "harness/expectation_cache.h"
#include "harness/runner.h"

namespace deltacheck::backends {
namespace {

namespace fs = std::filesystem;

class ExpectationCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("deltacheck-cache-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    // The cache's key outside its folder, and not the user's own (harness/cache_key.h).
    key_ = dir_.string() + ".key";
    ::setenv("DELTACHECK_CACHE_KEY_FILE", key_.c_str(), 1);
  }
  void TearDown() override {
    fs::remove_all(dir_);
    fs::remove(key_);
    ::unsetenv("DELTACHECK_CACHE_KEY_FILE");
  }

  std::vector<fs::path> entries() const {
    std::vector<fs::path> out;
    for (const auto& e : fs::recursive_directory_iterator(dir_))
      if (e.is_regular_file()) out.push_back(e.path());
    return out;
  }

  fs::path dir_;
  std::string key_;
};

bool same_bits(const cases::TensorMap& a, const cases::TensorMap& b) {
  if (a.all().size() != b.all().size()) return false;
  for (const cases::Tensor& t : a.all()) {
    const cases::Tensor* u = b.find(t.name());
    if (!u || u->dtype() != t.dtype() || u->shape() != t.shape() ||
        std::memcmp(u->data(), t.data(), t.nbytes()) != 0)
      return false;
  }
  return true;
}

bool same_bits(const Values& a, const Values& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, v] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second.size() != v.size() ||
        std::memcmp(it->second.data(), v.data(), v.size() * sizeof(double)) != 0)
      return false;
  }
  return true;
}

bool same_bits(const BaselineErrors& a, const BaselineErrors& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, list] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second.size() != list.size()) return false;
    for (size_t i = 0; i < list.size(); ++i) {
      const Metrics &x = list[i].metrics, &y = it->second[i].metrics;
      if (list[i].name != it->second[i].name ||
          std::memcmp(&x.max_abs, &y.max_abs, sizeof(double)) != 0 ||
          std::memcmp(&x.rel_rms, &y.rel_rms, sizeof(double)) != 0 ||
          std::memcmp(&x.ref_rms, &y.ref_rms, sizeof(double)) != 0 || x.max_index != y.max_index ||
          x.count != y.count || x.non_finite != y.non_finite)
        return false;
    }
  }
  return true;
}

// Inputs, expectation and tolerance with the same bits; the baselines themselves (not kept by
// the cache) recompute to the same bits.
void expect_same_prepared(const PreparedCase& a, const PreparedCase& b) {
  EXPECT_TRUE(same_bits(a.inputs, b.inputs)) << a.c.id();
  EXPECT_TRUE(same_bits(a.expected, b.expected)) << a.c.id();
  EXPECT_TRUE(same_bits(a.baseline_errors, b.baseline_errors)) << a.c.id();
  const std::vector<Baseline> x = baselines_of(a), y = baselines_of(b);
  ASSERT_EQ(x.size(), y.size()) << a.c.id();
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(x[i].name, y[i].name);
    EXPECT_TRUE(same_bits(x[i].values, y[i].values)) << a.c.id();
  }
}

// Everything a report shows, timings aside.
void expect_same_result(const CaseResult& a, const CaseResult& b) {
  EXPECT_EQ(a.verdict, b.verdict) << a.case_id;
  EXPECT_EQ(a.message, b.message) << a.case_id;
  ASSERT_EQ(a.tensors.size(), b.tensors.size()) << a.case_id;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].metrics.max_abs, b.tensors[i].metrics.max_abs) << a.case_id;
    EXPECT_EQ(a.tensors[i].metrics.rel_rms, b.tensors[i].metrics.rel_rms) << a.case_id;
    EXPECT_EQ(a.tensors[i].baseline.rel_rms, b.tensors[i].baseline.rel_rms) << a.case_id;
  }
  ASSERT_EQ(a.probes.size(), b.probes.size()) << a.case_id;
  for (size_t i = 0; i < a.probes.size(); ++i) {
    EXPECT_EQ(a.probes[i].name, b.probes[i].name);
    EXPECT_EQ(a.probes[i].verdict, b.probes[i].verdict) << a.case_id << " " << a.probes[i].name;
  }
}

// Every entry stored, whatever the timing (the default stores only what is cheaper to read).
std::shared_ptr<const ExpectationCache> store_all(const fs::path& dir) {
  return std::make_shared<const ExpectationCache>(dir.string(),
                                                  std::numeric_limits<double>::infinity());
}

std::vector<cases::Case> some_cases() {
  std::vector<cases::Case> out;
  for (const char* id : {"gdr(layout=packed[40,0,70,3],H=1,HV=2,K=16,V=16,dtype=bf16,seed=4)",
                         "gdr(layout=packed[6,9],H=2,HV=2,K=8,V=8,cache=pool,seed=2)",
                         "mask(B=2,q=24,padding=left,packed=packed,seed=1)"})
    out.push_back(cases::Case::parse(id));
  return out;
}

TEST_F(ExpectationCacheTest, WarmPreparationHasTheColdBits) {
  auto cache = store_all(dir_);
  for (const cases::Case& c : some_cases()) {
    const PreparedCase plain = prepare(c);
    const PreparedCase cold = prepare(c, {}, cache);
    const PreparedCase warm = prepare(c, {}, cache);
    expect_same_prepared(plain, cold);
    expect_same_prepared(plain, warm);
  }
  const ExpectationCache::Stats s = cache->stats();
  EXPECT_EQ(s.misses, 3);
  EXPECT_EQ(s.hits, 3);
  EXPECT_EQ(s.stores, 3);
  EXPECT_EQ(entries().size(), 3u);
}

TEST_F(ExpectationCacheTest, VerdictsAndProbesAreTheSameWarm) {
  auto cache = store_all(dir_);
  for (const char* backend : {"cpu", "wrong:ignore-cu-seqlens", "wrong:drop-initial-state"}) {
    auto b = make_backend(backend);
    for (const cases::Case& c : some_cases()) {
      if (!b->supports(c).ok) continue;
      const CaseResult plain = run_case(prepare(c), *b, true);
      const CaseResult cold = run_case(prepare(c, {}, cache), *b, true);
      const CaseResult warm = run_case(prepare(c, {}, cache), *b, true);
      expect_same_result(plain, cold);
      expect_same_result(plain, warm);
    }
  }
  // The probes' own entries were written and then read: isolation inputs, split baselines.
  EXPECT_GT(cache->stats().hits, 6);
}

TEST_F(ExpectationCacheTest, AWrongKernelStaysALeakFromAWarmCache) {
  auto cache = store_all(dir_);
  auto leaky = make_backend("wrong:ignore-cu-seqlens");
  const cases::Case c = some_cases().front();
  (void)run_case(prepare(c, {}, cache), *leaky, true);
  const CaseResult warm = run_case(prepare(c, {}, cache), *leaky, true);
  EXPECT_EQ(warm.verdict, Verdict::kLeak) << warm.message;
}

TEST_F(ExpectationCacheTest, ADamagedEntryIsRejectedAndRecomputed) {
  auto cache = store_all(dir_);
  const cases::Case c = some_cases().front();
  const PreparedCase plain = prepare(c);
  (void)prepare(c, {}, cache);
  ASSERT_EQ(entries().size(), 1u);
  const fs::path file = entries().front();
  for (int damage = 0; damage < 2; ++damage) {
    std::string bytes;
    {
      std::ifstream in(file, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    if (damage == 0)
      bytes[bytes.size() / 2] ^= 0x10;  // one flipped bit in the payload
    else
      bytes.resize(bytes.size() - 100);  // truncated
    {
      std::ofstream out(file, std::ios::binary | std::ios::trunc);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    const int64_t rejected = cache->stats().rejected;
    expect_same_prepared(plain, prepare(c, {}, cache));
    EXPECT_EQ(cache->stats().rejected, rejected + 1) << "damage " << damage;
    // Rewritten whole: the next read is a hit.
    const int64_t hits = cache->stats().hits;
    expect_same_prepared(plain, prepare(c, {}, cache));
    EXPECT_EQ(cache->stats().hits, hits + 1);
  }
}

TEST_F(ExpectationCacheTest, AnEntryIsOnlyItsOwnCase) {
  auto cache = store_all(dir_);
  const cases::Case a = cases::Case::parse("gdr(layout=packed[6,9],H=1,HV=1,K=8,V=8,seed=1)");
  const cases::Case b = cases::Case::parse("gdr(layout=packed[6,9],H=1,HV=1,K=8,V=8,seed=2)");
  (void)prepare(a, {}, cache);
  const PreparedCase pb = prepare(b, {}, cache);
  EXPECT_EQ(cache->stats().hits, 0);
  expect_same_prepared(prepare(b), pb);
  // Salted inputs (the isolation probe's) are not the case's own: no cache is attached.
  cases::GenOptions salted;
  salted.sequence_salt[0] = 7;
  EXPECT_EQ(prepare(a, salted, cache).cache, nullptr);
}

TEST_F(ExpectationCacheTest, AnUnusableDirectoryIsAClearError) {
  fs::create_directories(dir_);
  const fs::path file = dir_ / "a-file";
  std::ofstream(file) << "x";
  try {
    (void)store_all(file);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("a-file"), std::string::npos) << e.what();
  }
  EXPECT_EQ(open_expectation_cache(""), nullptr);
}

TEST_F(ExpectationCacheTest, WhatIsFasterToComputeThanToReadIsNotStored) {
  // At one byte per second nothing is worth reading back.
  auto slow = std::make_shared<const ExpectationCache>(dir_.string(), 1.0);
  const cases::Case c = some_cases().front();
  expect_same_prepared(prepare(c), prepare(c, {}, slow));
  EXPECT_EQ(slow->stats().stores, 0);
  EXPECT_EQ(slow->stats().not_worth, 1);
  EXPECT_TRUE(entries().empty());
}

TEST_F(ExpectationCacheTest, NothingIsStoredPastTheSizeBudget) {
  auto first = store_all(dir_);
  const cases::Case a = some_cases()[0], b = some_cases()[1];
  (void)prepare(a, {}, first);
  ASSERT_EQ(entries().size(), 1u);
  const auto used = static_cast<int64_t>(fs::file_size(entries().front()));
  // A budget the existing entry already fills: the next case is computed, not stored.
  auto budget = std::make_shared<const ExpectationCache>(
      dir_.string(), std::numeric_limits<double>::infinity(), used + 10);
  expect_same_prepared(prepare(b), prepare(b, {}, budget));
  EXPECT_EQ(budget->stats().full, 1);
  EXPECT_EQ(entries().size(), 1u);
  (void)prepare(a, {}, budget);
  EXPECT_EQ(budget->stats().hits, 1);
}

TEST(ExpectationCacheBuildId, IsAHashOfTheSources) {
  const std::string id = ExpectationCache::build_id();
  EXPECT_EQ(id.size(), 64u);
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
}

}  // namespace
}  // namespace deltacheck::backends
