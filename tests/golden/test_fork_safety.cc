// fork() while other threads use HDF5 or the tensor storage pool (cases/fork_guard.h): a child
// of run_isolated() reads HDF5 and allocates storage, so it must never start with one of their
// locks held by a thread that does not exist in the child. Before the guard, the external
// backend under --jobs 2 now and then timed out reading {out} (CI: "reading the external
// program's {out} timed out after 120 s").
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "cases/fork_guard.h"
#include "golden/exchange.h"
#include "golden/format.h"
#include "golden_test_util.h"
#include "harness/isolation.h"

namespace deltacheck::golden {
namespace {

using testing::TempDir;

cases::TensorMap outputs_like(int64_t rows) {
  cases::TensorMap m;
  // 2 MiB: large enough to come from the recycled storage pool, in the parent and the child.
  m.add(cases::Tensor("o", cases::DType::kF32, {rows, 128}, 1024));
  return m;
}

std::string write_answer(const TempDir& dir, int64_t rows) {
  cases::TensorMap m = outputs_like(rows);
  for (int64_t i = 0; i < m.at("o").numel(); ++i) m.at("o").set(i, 0.25 * (i % 17));
  const std::string path = dir.path() + "/out.h5";
  EXPECT_TRUE(write_output_file(path, m).ok());
  return path;
}

Status read_isolated(const std::string& path, cases::TensorMap& into) {
  return harness::run_isolated([&](cases::TensorMap& m) { return read_output_file(path, m); }, into,
                               {10.0});
}

TEST(ForkSafety, ForkWaitsForAThreadInsideASectionAndTheChildStartsFree) {
  TempDir dir;
  const std::string path = write_answer(dir, 4096);
  std::atomic<bool> inside{false};
  std::thread other([&] {
    const cases::NoForkSection section;
    inside = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  });
  while (!inside) std::this_thread::yield();
  const auto t0 = std::chrono::steady_clock::now();
  cases::TensorMap into = outputs_like(4096);
  const Status st = read_isolated(path, into);  // the child takes sections of its own
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  other.join();
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_GE(waited, 0.2);  // it did not fork while the other thread was inside
  EXPECT_EQ(into.at("o").get(18), 0.25);
}

TEST(ForkSafety, IsolatedReadsWhileAnotherThreadWritesAndReadsFixtures) {
  TempDir dir;
  const std::string path = write_answer(dir, 4096);
  std::atomic<bool> stop{false};
  std::atomic<int> busy_rounds{0};
  // Another thread in HDF5 and the storage pool all the time, as a second --jobs worker is.
  std::thread other([&] {
    const std::string mine = dir.path() + "/other.h5";
    while (!stop) {
      cases::TensorMap m = outputs_like(4096);
      for (int64_t i = 0; i < m.at("o").numel(); ++i) m.at("o").set(i, 1.0);
      ASSERT_TRUE(write_output_file(mine, m).ok());
      cases::TensorMap back = outputs_like(4096);
      ASSERT_TRUE(read_output_file(mine, back).ok());
      ++busy_rounds;
    }
  });
  for (int i = 0; i < 40; ++i) {
    cases::TensorMap into = outputs_like(4096);
    const Status st = read_isolated(path, into);
    ASSERT_TRUE(st.ok()) << "round " << i << ": " << st.message();
    ASSERT_EQ(into.at("o").get(35), 0.25);
  }
  stop = true;
  other.join();
  EXPECT_GT(busy_rounds.load(), 0);
}

TEST(ForkSafety, SectionsNest) {
  const cases::NoForkSection outer;
  { const cases::NoForkSection inner; }
  // A fork from inside a section cannot wait for itself; it goes ahead.
  cases::ForkSection fork_section;
  SUCCEED();
}

}  // namespace
}  // namespace deltacheck::golden
