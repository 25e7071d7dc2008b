// The one thread pool (the CPU kernels, the harness's poisoning and comparison, the benchmarks):
// independent (sequence, head) lanes spread over threads with an atomic counter, so long and short
// sequences balance themselves.
//
// The threads are kept between calls (a pool started on first use): starting and joining a thread
// costs 30-100 us here, which a kernel of a few milliseconds, and the harness's threaded poisoning
// and comparison around it, would pay on every call. A call that finds the pool busy (a nested
// loop, or another thread's loop: `deltacheck run --jobs N`) and any call in a forked child, where
// the pool's threads do not exist, starts threads of its own as before.
#pragma once

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace deltacheck::core {

inline int resolve_threads(int requested) {
  if (requested > 0) return requested;
  unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

namespace detail {

class WorkerPool {
 public:
  // The process's pool, or nullptr in a forked child (its threads were not copied).
  static WorkerPool* get() {
    // Never destroyed: its threads wait on it until the process ends, and a child that calls
    // exit() must not join threads it does not have.
    static WorkerPool* pool = [] {
      auto* p = new WorkerPool;
      pthread_atfork(nullptr, nullptr, [] { forked_child() = true; });
      return p;
    }();
    return forked_child() ? nullptr : pool;
  }

  // Runs `work` on `helpers` pool threads and the calling thread, and returns when all are done;
  // false (nothing run) when another call holds the pool. An exception from the calling thread's
  // share is rethrown once the others are done (one from a pool thread ends the process, as it
  // would from a std::thread).
  bool run(int helpers, const std::function<void()>& work) {
    bool idle = false;
    if (!busy_.compare_exchange_strong(idle, true, std::memory_order_acquire)) return false;
    bool wake = false;
    {
      const std::lock_guard<std::mutex> lock(mu_);
      try {
        while (static_cast<int>(threads_.size()) < helpers) {
          threads_.emplace_back([this, id = static_cast<int>(threads_.size())] { serve(id); });
          threads_.back().detach();
        }
      } catch (...) {  // no thread to be had: the caller's own fallback reports it
        busy_.store(false, std::memory_order_release);
        return false;
      }
      work_ = &work;
      wanted_ = helpers;
      running_.store(helpers, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
      wake = sleepers_ > 0;
    }
    if (wake) wake_.notify_all();
    std::exception_ptr error;
    try {
      work();
    } catch (...) {
      error = std::current_exception();
    }
    if (!spin_until([this] { return running_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock<std::mutex> lock(mu_);
      done_.wait(lock, [this] { return running_.load(std::memory_order_acquire) == 0; });
    }
    busy_.store(false, std::memory_order_release);
    if (error) std::rethrow_exception(error);
    return true;
  }

 private:
  static bool& forked_child() {
    static bool yes = false;
    return yes;
  }

  // Polls `ready` for a short while before a thread blocks: waking a blocked thread costs tens
  // of microseconds on a virtual machine, more than the gap between one loop and the next.
  template <typename Ready>
  static bool spin_until(const Ready& ready) {
    constexpr auto kSpin = std::chrono::microseconds(100);
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (int i = 0;; ++i) {
      if (ready()) return true;
      if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) return false;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
  }

  void serve(int id) {
    uint64_t seen = 0;
    for (;;) {
      auto fresh = [&] { return generation_.load(std::memory_order_acquire) != seen; };
      if (!spin_until(fresh)) {
        std::unique_lock<std::mutex> lock(mu_);
        ++sleepers_;
        wake_.wait(lock, fresh);
        --sleepers_;
      }
      std::unique_lock<std::mutex> lock(mu_);
      seen = generation_.load(std::memory_order_relaxed);
      if (id >= wanted_) continue;  // this call asked for fewer threads
      const std::function<void()>* work = work_;
      lock.unlock();
      (*work)();
      if (running_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        lock.lock();  // (the caller checks running_ under the lock before it blocks)
        done_.notify_one();
      }
    }
  }

  std::atomic<bool> busy_{false};  // a call is using the pool (a flag: the same thread may ask)
  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  const std::function<void()>* work_ = nullptr;  // these three: written under mu_
  int wanted_ = 0, sleepers_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> running_{0};
};

}  // namespace detail

template <typename Fn>
void parallel_for(int64_t n, int threads, Fn&& fn) {
  int64_t workers = std::min<int64_t>(n, resolve_threads(threads));
  if (workers <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  const std::function<void()> work = [&] {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i);
  };
  constexpr int64_t kMaxPooled = 256;
  if (detail::WorkerPool* pool = detail::WorkerPool::get();
      pool && workers <= kMaxPooled && pool->run(static_cast<int>(workers - 1), work))
    return;
  std::vector<std::thread> spawned;
  spawned.reserve(static_cast<size_t>(workers - 1));
  for (int64_t w = 1; w < workers; ++w) spawned.emplace_back(work);
  std::exception_ptr error;
  try {
    work();
  } catch (...) {
    error = std::current_exception();
  }
  for (auto& t : spawned) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace deltacheck::core
