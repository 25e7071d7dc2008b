// A minimal work-sharing loop for the CPU kernels: independent (sequence, head) lanes spread over
// threads with an atomic counter, so long and short sequences balance themselves.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace deltacheck::kernels::cpu {

inline int resolve_threads(int requested) {
  if (requested > 0) return requested;
  unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

template <typename Fn>
void parallel_for(int64_t n, int threads, Fn&& fn) {
  int64_t workers = std::min<int64_t>(n, resolve_threads(threads));
  if (workers <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i);
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(workers - 1));
  for (int64_t w = 1; w < workers; ++w) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

}  // namespace deltacheck::kernels::cpu
