// Tests of things that must not hang (a timeout that must kill, a parser that must not go
// quadratic) give them a deadline far beyond any honest run instead of asserting on how long they
// took: speed is measured with Google Benchmark, never asserted in a test. Past the deadline the
// test process stops with the reason (a hang is a failure, not a wait).
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>

namespace deltacheck::testing {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kDeadlineSeconds = 180;  // sanitizers slow everything several times
#else
constexpr int kDeadlineSeconds = 60;
#endif

// work() on a thread of its own; its result when it finishes within the deadline, else the test
// process exits 1 with "`what` was still going after N s".
template <typename Work>
auto within_deadline(const std::string& what, Work work) -> decltype(work()) {
  auto running = std::async(std::launch::async, std::move(work));
  if (running.wait_for(std::chrono::seconds(kDeadlineSeconds)) != std::future_status::ready) {
    std::fprintf(stderr, "FAILED: %s was still going after %d s (a hang)\n", what.c_str(),
                 kDeadlineSeconds);
    std::_Exit(1);
  }
  return running.get();
}

}  // namespace deltacheck::testing
