// core::parallel_for and the pool of threads it keeps: every index exactly once, whether
// the call gets the pool, finds it busy (a nested loop, another thread's loop) or runs in a forked
// child that has no pool threads; an exception from the calling thread's share comes back and
// leaves the pool usable.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/parallel_for.h"

namespace deltacheck::core {
namespace {

// parallel_for(n, threads) over counters; true when each of the n was visited exactly once.
bool each_once(int64_t n, int threads) {
  std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
  parallel_for(n, threads, [&](int64_t i) { seen[i].fetch_add(1); });
  for (const auto& s : seen)
    if (s.load() != 1) return false;
  return true;
}

TEST(ParallelFor, VisitsEveryIndexOnceCallAfterCall) {
  for (int round = 0; round < 200; ++round)
    for (int threads : {0, 1, 2, 3, 7})
      for (int64_t n : {0, 1, 2, 5, 64, 1000})
        ASSERT_TRUE(each_once(n, threads))
            << "round " << round << " threads " << threads << " n " << n;
}

TEST(ParallelFor, UsesTheThreadsItIsAskedFor) {
  // Four workers that wait for each other: only four threads running at once finish this.
  std::atomic<int> arrived{0};
  parallel_for(4, 4, [&](int64_t) {
    arrived.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (arrived.load() < 4 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
  });
  EXPECT_EQ(arrived.load(), 4);
  parallel_for(4, 4, [&](int64_t) { arrived.fetch_add(1); });
  EXPECT_EQ(arrived.load(), 8);
}

TEST(ParallelFor, NestedLoopsAndConcurrentCallersAllFinish) {
  // The inner loops find the pool busy and start threads of their own.
  std::atomic<int64_t> sum{0};
  parallel_for(8, 2, [&](int64_t i) {
    parallel_for(100, 2, [&](int64_t j) { sum.fetch_add(i * 100 + j); });
  });
  EXPECT_EQ(sum.load(), 799 * 800 / 2);
  // Two threads calling at once: one gets the pool, the other its own threads.
  std::atomic<bool> ok_a{true}, ok_b{true};
  std::thread a([&] {
    for (int r = 0; r < 100; ++r) ok_a = ok_a && each_once(500, 2);
  });
  std::thread b([&] {
    for (int r = 0; r < 100; ++r) ok_b = ok_b && each_once(500, 2);
  });
  a.join();
  b.join();
  EXPECT_TRUE(ok_a.load());
  EXPECT_TRUE(ok_b.load());
}

TEST(ParallelFor, AnExceptionOnTheCallingThreadComesBackAndThePoolStaysUsable) {
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> done{0};
  auto throwing = [&](int64_t) {
    if (std::this_thread::get_id() == caller) throw std::runtime_error("from the caller");
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // leaves indices to the caller
    done.fetch_add(1);
  };
  EXPECT_THROW(parallel_for(64, 2, throwing), std::runtime_error);
  EXPECT_TRUE(each_once(1000, 2));
}

TEST(ParallelFor, WorksInAForkedChildWhoseParentUsedThePool) {
  ASSERT_TRUE(each_once(1000, 2));  // the pool exists in the parent
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child has no pool threads: a call that waited for them would never return.
    bool ok = true;
    for (int r = 0; r < 20; ++r) ok = ok && each_once(1000, 2);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  pid_t got = 0;
  while ((got = waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (got == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL() << "the forked child's parallel_for did not return within 60 s";
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(each_once(1000, 2));  // and the parent's pool still works
}

}  // namespace
}  // namespace deltacheck::core
