// The expectation cache against a hostile directory (issue 35, C1-C4): a candidate runs as the
// user and can write the cache folder, and a cache folder may be restored from anywhere. Planted
// or moved entries never change a verdict, no entry gives its expectation away, a FIFO or a huge
// file in an entry's place neither blocks nor is read, and no entry of a case exists while the
// case's calls run. The key file's rules (harness/cache_key.h) are here too.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <thread>

#include "backends/registry.h"
#include "cases/suites.h"
#include "harness/backend.h"
#include "harness/call_plan.h"
#include "harness/expectation_cache.h"
#include "harness/limits.h"
#include "harness/runner.h"
#include "tests/deadline.h"

namespace deltacheck::backends {
namespace {

namespace fs = std::filesystem;

constexpr const char* kKeyVariable = "DELTACHECK_CACHE_KEY_FILE";

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_all(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Bytes this process has read with read() and friends so far (/proc/self/io).
int64_t bytes_read_so_far() {
  std::ifstream io("/proc/self/io");
  std::string key;
  int64_t value = 0;
  while (io >> key >> value)
    if (key == "rchar:") return value;
  return -1;
}

class HostileCache : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("deltacheck-hostile-cache-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    dir_ = root_ / "cache";
    // The user's key, outside the cache folder; never the real ~/.local/state one.
    use_key(root_ / "keys" / "user.key");
  }
  void TearDown() override {
    ::unsetenv(kKeyVariable);
    fs::remove_all(root_);
  }
  void use_key(const fs::path& file) { ::setenv(kKeyVariable, file.c_str(), 1); }

  // Every entry stored, whatever the timing.
  std::shared_ptr<const ExpectationCache> cache_at(const fs::path& dir) const {
    return std::make_shared<const ExpectationCache>(dir.string(),
                                                    std::numeric_limits<double>::infinity());
  }
  std::vector<fs::path> entries(const fs::path& dir) const {
    std::vector<fs::path> out;
    if (!fs::exists(dir)) return out;
    for (const auto& e : fs::recursive_directory_iterator(dir))
      if (e.is_regular_file() && e.path().extension() == ".bin") out.push_back(e.path());
    return out;
  }

  fs::path root_, dir_;
};

const cases::Case& packed_case() {
  static const cases::Case c =
      cases::Case::parse("gdr(layout=packed[40,0,70,3],H=1,HV=2,K=16,V=16,dtype=bf16,seed=4)");
  return c;
}

// Everything the cache keeps of a preparation (inputs, expectation, errors), as bytes: equal
// when they have the same bits.
std::string kept(const PreparedCase& pc) {
  return ExpectationCache::write_prepared({pc.inputs, pc.expected, pc.baseline_errors});
}

// C1: a forger makes a valid-looking entry the way anyone can (deltacheck's own code, with a key
// of its own) whose expectation is a wrong kernel's outputs, and plants it in the user's cache.
TEST_F(HostileCache, APlantedEntryDoesNotChangeAVerdict) {
  const cases::Case& c = packed_case();
  auto wrong = make_backend("wrong:readout-before-update");
  auto cpu = make_backend("cpu");
  const PreparedCase honest = prepare(c);
  ASSERT_EQ(run_case(honest, *wrong, true).verdict, Verdict::kFail);
  // The forged expectation: what the wrong kernel writes.
  cases::TensorMap out = allocate_outputs(honest.outputs);
  ASSERT_TRUE(execute(*wrong, c, honest.inputs, out).ok());
  ExpectationCache::Prepared forged{honest.inputs, {}, honest.baseline_errors};
  for (const OutputSpec& s : honest.outputs) forged.expected[s.name] = out.at(s.name).to_double();
  {
    use_key(root_ / "keys" / "forger.key");
    auto forger = cache_at(root_ / "forger");
    (void)forger->prepared(c, {}, honest.precision, [&] { return forged; });
  }
  const std::vector<fs::path> made = entries(root_ / "forger");
  ASSERT_EQ(made.size(), 1u);
  // Planted at the same place in the user's cache (the file name is a hash of the key text).
  const fs::path planted = dir_ / fs::relative(made.front(), root_ / "forger");
  fs::create_directories(planted.parent_path());
  fs::copy_file(made.front(), planted);

  use_key(root_ / "keys" / "user.key");
  auto cache = cache_at(dir_);
  const CaseResult w = run_case(prepare(c, {}, cache), *wrong, true);
  EXPECT_EQ(w.verdict, Verdict::kFail) << w.message;
  EXPECT_EQ(cache->stats().rejected, 1);
  EXPECT_EQ(cache->stats().hits, 0);
  // The planted file was overwritten by the user's own entry: the next run hits it, and the
  // correct kernel passes from it.
  const CaseResult r = run_case(prepare(c, {}, cache), *cpu, true);
  EXPECT_EQ(r.verdict, Verdict::kPass) << r.message;
  EXPECT_GE(cache->stats().hits, 1);
  EXPECT_EQ(cache->stats().rejected, 1);
}

TEST_F(HostileCache, AnEntryMovedToAnotherCasesFileIsRejected) {
  auto cache = cache_at(dir_);
  const cases::Case a = cases::Case::parse("gdr(layout=packed[6,9],H=1,HV=1,K=8,V=8,seed=1)");
  const cases::Case b = cases::Case::parse("gdr(layout=packed[6,9],H=1,HV=1,K=8,V=8,seed=2)");
  (void)prepare(a, {}, cache);
  const std::vector<fs::path> only_a = entries(dir_);
  ASSERT_EQ(only_a.size(), 1u);
  (void)prepare(b, {}, cache);
  std::vector<fs::path> both = entries(dir_);
  ASSERT_EQ(both.size(), 2u);
  const fs::path b_file = both[0] == only_a[0] ? both[1] : both[0];
  fs::copy_file(only_a[0], b_file, fs::copy_options::overwrite_existing);  // a's entry as b's

  const int64_t rejected = cache->stats().rejected, hits = cache->stats().hits;
  const PreparedCase pb = prepare(b, {}, cache);
  EXPECT_EQ(kept(pb), kept(prepare(b)));
  EXPECT_EQ(cache->stats().rejected, rejected + 1);
  EXPECT_EQ(cache->stats().hits, hits);
}

// C2: what is on disk gives no expectation away.
TEST_F(HostileCache, AnEntryHoldsNoRecognisableExpectation) {
  auto cache = cache_at(dir_);
  const PreparedCase pc = prepare(packed_case(), {}, cache);
  ASSERT_EQ(entries(dir_).size(), 1u);
  const std::string file = read_all(entries(dir_).front());
  for (const auto& [name, values] : pc.expected) {
    ASSERT_GE(values.size(), 4u) << name;
    // Any four consecutive expected doubles, as they are in memory.
    for (size_t i = 0; i + 4 <= values.size(); i += values.size() / 8 + 1) {
      const std::string raw(reinterpret_cast<const char*>(values.data() + i), 4 * sizeof(double));
      EXPECT_EQ(file.find(raw), std::string::npos) << name << "[" << i << "] is in the entry";
    }
  }
  // Nor the case it belongs to.
  EXPECT_EQ(file.find("layout=packed"), std::string::npos);
}

// The cpu backend, counting the cache's entries at each call.
class Spy : public Backend {
 public:
  explicit Spy(std::function<size_t()> count) : count_(std::move(count)) {}
  std::string name() const override { return "spy"; }
  std::string description() const override { return "cpu, looking at the cache"; }
  Support supports(const cases::Case& c) const override { return cpu_->supports(c); }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    seen.push_back(count_());
    return cpu_->run(c, in, out);
  }
  std::vector<size_t> seen;

 private:
  std::function<size_t()> count_;
  std::unique_ptr<Backend> cpu_ = make_backend("cpu");
};

// C2 (timing): the case's own entry is written after its calls, so on a cold run a candidate
// finds nothing of its case in the cache while it runs.
TEST_F(HostileCache, NoEntryOfACaseExistsWhileItsCallsRun) {
  auto cache = cache_at(dir_);
  Spy spy([&] { return entries(dir_).size(); });
  const std::vector<size_t>& seen = spy.seen;
  harness::RunOptions o;
  o.probes = false;
  o.cache = cache;
  const auto results = harness::run_all({packed_case()}, {&spy}, o, nullptr);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].verdict, Verdict::kPass) << results[0].message;
  ASSERT_FALSE(seen.empty());
  for (size_t n : seen) EXPECT_EQ(n, 0u) << "an entry existed during a call";
  EXPECT_EQ(entries(dir_).size(), 1u);  // written once the calls were done
  // Warm: read back.
  (void)harness::run_all({packed_case()}, {&spy}, o, nullptr);
  EXPECT_EQ(cache->stats().hits, 1);
}

// Finds the file the cache keeps packed_case()'s preparation in.
fs::path entry_file(const fs::path& dir, const std::shared_ptr<const ExpectationCache>& cache) {
  (void)prepare(packed_case(), {}, cache);
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".bin") return e.path();
  return {};
}

// C3: a FIFO in an entry's place is not opened for reading (it would block until a writer
// came): a miss, removed, and the fresh entry stored.
TEST_F(HostileCache, AFifoInAnEntrysPlaceDoesNotBlock) {
  auto cache = cache_at(dir_);
  const fs::path file = entry_file(dir_, cache);
  ASSERT_FALSE(file.empty());
  fs::remove(file);
  ASSERT_EQ(::mkfifo(file.c_str(), 0600), 0);
  const PreparedCase plain = prepare(packed_case());
  const PreparedCase pc = deltacheck::testing::within_deadline(
      "preparing a case whose entry is a FIFO", [&] { return prepare(packed_case(), {}, cache); });
  EXPECT_EQ(kept(pc), kept(plain));
  EXPECT_EQ(cache->stats().rejected, 1);
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(file))) << "the FIFO is still there";
}

TEST_F(HostileCache, ALinkInAnEntrysPlaceIsNotFollowed) {
  auto cache = cache_at(dir_);
  const fs::path file = entry_file(dir_, cache);
  ASSERT_FALSE(file.empty());
  // The user's file a link points at: neither read nor truncated nor removed.
  const fs::path users = root_ / "users-file.bin";
  fs::copy_file(file, users);
  const std::string before = read_all(users);
  fs::remove(file);
  fs::create_symlink(users, file);
  const int64_t hits = cache->stats().hits;
  (void)prepare(packed_case(), {}, cache);
  EXPECT_EQ(cache->stats().hits, hits) << "an entry was read through a link";
  EXPECT_EQ(cache->stats().rejected, 1);
  EXPECT_EQ(read_all(users), before);
  EXPECT_FALSE(fs::is_symlink(fs::symlink_status(file)));
}

// C4: a huge file in an entry's place is refused by its size, never read (nor allocated).
TEST_F(HostileCache, AHugeJunkEntryIsRefusedWithoutBeingRead) {
  auto cache = cache_at(dir_);
  const fs::path file = entry_file(dir_, cache);
  ASSERT_FALSE(file.empty());
  const int64_t junk = int64_t{256} << 20;  // sparse: no disk taken
  {
    const int fd = ::open(file.c_str(), O_WRONLY | O_TRUNC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, junk), 0);
    ::close(fd);
  }
  const int64_t read_before = bytes_read_so_far();
  ASSERT_GE(read_before, 0);
  (void)prepare(packed_case(), {}, cache);
  EXPECT_LT(bytes_read_so_far() - read_before, junk / 16) << "the junk was read";
  EXPECT_EQ(cache->stats().rejected, 1);
  EXPECT_LT(static_cast<int64_t>(fs::file_size(file)), junk) << "the junk is still there";
}

TEST_F(HostileCache, EveryEntryOfTheSmokeSuiteFitsItsCasesBound) {
  // The read bound (max_payload_bytes, counted against --max-memory) never refuses a real
  // entry: a warm pass over the smoke suite reads every preparation back.
  auto cache = cache_at(dir_);
  const std::vector<cases::Case> cs = cases::suite("smoke");
  for (const cases::Case& c : cs) (void)prepare(c, {}, cache);
  const int64_t stored = cache->stats().stores;
  EXPECT_EQ(cache->stats().not_worth, 0);
  for (const cases::Case& c : cs) (void)prepare(c, {}, cache);
  EXPECT_EQ(cache->stats().hits, stored);
  EXPECT_EQ(cache->stats().rejected, 0);
  for (const cases::Case& c : cs) {
    EXPECT_GT(harness::estimate_case_memory(c, true).total,
              harness::estimate_case_memory(c, false).total);
    EXPECT_LE(harness::estimate_case_memory(c, true).cache,
              static_cast<double>(ExpectationCache::kMaxEntryBytes +
                                  ExpectationCache::kFileOverheadBytes));
  }
}

TEST_F(HostileCache, AnEmptyOutputRoundTrips) {
  // fuzz_cache_entry found it (fuzz/corpus/cache_entry/empty-values): an empty value block was
  // copied to an empty vector's null data() (undefined behaviour, UBSan).
  ExpectationCache::Prepared p;
  p.expected["o"] = {};
  p.expected["s"] = {1.5, -2.0};
  const std::string payload = ExpectationCache::write_prepared(p);
  const ExpectationCache::Prepared q = ExpectationCache::read_prepared(payload, 0, payload.size());
  EXPECT_EQ(ExpectationCache::write_prepared(q), payload);
  EXPECT_TRUE(q.expected.at("o").empty());
}

TEST_F(HostileCache, ATensorWhoseExtentsOverflowIsRefused) {
  // fuzz_cache_entry found it (fuzz/corpus/cache_entry/overflowing-shape): a zero-size tensor
  // whose other extents multiply past int64 (UBSan: signed overflow in the tensor's size).
  std::string payload;
  auto u64 = [&](uint64_t v) { payload.append(reinterpret_cast<const char*>(&v), 8); };
  u64(1);  // one tensor
  u64(1);
  payload += "q";
  u64(0);  // dtype
  u64(3);  // rank
  for (uint64_t d : {uint64_t{1} << 42, uint64_t{1} << 42, uint64_t{0}}) u64(d);
  u64(0);  // bytes
  u64(0);  // no values
  u64(0);  // no errors
  EXPECT_THROW((void)ExpectationCache::read_prepared(payload, 0, payload.size()),
               std::runtime_error);
}

// --- the key file ---------------------------------------------------------------------------

TEST_F(HostileCache, TheKeyIsMadeOnFirstUseAndPrivate) {
  const fs::path key = root_ / "state" / "deltacheck" / "cache.key";
  StatusOr<harness::CacheKey> made = harness::open_cache_key(key.string());
  ASSERT_TRUE(made.ok()) << made.status().message();
  struct stat st {};
  ASSERT_EQ(::stat(key.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_size, 32);
  ASSERT_EQ(::stat(key.parent_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 077, 0u);
  StatusOr<harness::CacheKey> again = harness::open_cache_key(key.string());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.value().bytes, made.value().bytes);
  // Nothing left beside it.
  EXPECT_EQ(std::distance(fs::directory_iterator(key.parent_path()), {}), 1);
}

TEST_F(HostileCache, RunsRacingToMakeTheKeyAgreeOnIt) {
  for (int round = 0; round < 20; ++round) {
    const std::string key = (root_ / ("race" + std::to_string(round)) / "cache.key").string();
    std::vector<StatusOr<harness::CacheKey>> got(4, Status::Internal("not run"));
    std::vector<std::thread> ts;
    for (size_t t = 0; t < got.size(); ++t)
      ts.emplace_back([&, t] { got[t] = harness::open_cache_key(key); });
    for (auto& t : ts) t.join();
    for (const auto& g : got) {
      ASSERT_TRUE(g.ok()) << g.status().message();
      EXPECT_EQ(g.value().bytes, got[0].value().bytes) << "round " << round;
    }
  }
}

TEST_F(HostileCache, AKeyFileBreakingTheRulesIsRefusedWithOneLine) {
  const fs::path good = root_ / "keys" / "good.key";
  ASSERT_TRUE(harness::open_cache_key(good.string()).ok());
  struct Bad {
    const char* what;
    std::function<void(const fs::path&)> make;
    const char* says;
  };
  const std::vector<Bad> bad = {
      {"readable by others",
       [&](const fs::path& p) {
         fs::copy_file(good, p);
         fs::permissions(p, fs::perms(0644));
       },
       "mode 0644"},
      {"a symbolic link", [&](const fs::path& p) { fs::create_symlink(good, p); },
       "a symbolic link"},
      {"31 bytes",
       [&](const fs::path& p) {
         write_all(p, std::string(31, 'k'));
         fs::permissions(p, fs::perms(0600));
       },
       "31 bytes"},
      {"a FIFO", [&](const fs::path& p) { ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0); }, "a FIFO"},
      {"a folder", [&](const fs::path& p) { fs::create_directories(p); }, "a folder"},
  };
  for (const Bad& b : bad) {
    const fs::path p = root_ / "keys" / (std::string(b.what) + ".key");
    b.make(p);
    const StatusOr<harness::CacheKey> k = deltacheck::testing::within_deadline(
        b.what, [&] { return harness::open_cache_key(p.string()); });
    ASSERT_FALSE(k.ok()) << b.what;
    const std::string& m = k.status().message();
    EXPECT_NE(m.find("cache key file '" + p.string() + "'"), std::string::npos) << m;
    EXPECT_NE(m.find(b.says), std::string::npos) << b.what << ": " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    // Through the cache: the constructor's error is the same line.
    use_key(p);
    try {
      (void)cache_at(dir_);
      ADD_FAILURE() << b.what << ": the cache opened";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), m);
    }
  }
}

TEST_F(HostileCache, AKeyInsideTheCacheFolderIsRefused) {
  // A cache folder that carries its own key would let anyone who plants the folder forge it.
  use_key(dir_ / "cache.key");
  try {
    (void)cache_at(dir_);
    FAIL() << "the cache opened with its key inside";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("inside the expectation cache directory"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(HostileCache, AnotherKeyMakesEveryEntryAMiss) {
  // A cache restored without its key file: every entry is rejected, recomputed and replaced.
  {
    auto first = cache_at(dir_);
    (void)prepare(packed_case(), {}, first);
  }
  use_key(root_ / "keys" / "new.key");
  auto second = cache_at(dir_);
  const PreparedCase pc = prepare(packed_case(), {}, second);
  EXPECT_EQ(kept(pc), kept(prepare(packed_case())));
  EXPECT_EQ(second->stats().rejected, 1);
  (void)prepare(packed_case(), {}, second);
  EXPECT_EQ(second->stats().hits, 1);
}

}  // namespace
}  // namespace deltacheck::backends
