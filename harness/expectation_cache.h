// A cross-run cache of what a case id alone determines: the generated inputs, the FP64
// expectation and the tolerance (the baselines' measured errors, per output and per sequence),
// including the probes' (the isolation probe's regenerated inputs, the split probe's tolerance).
// A warm run of the same cases (a pytest rerun, a CI shard run again, a kernel developer's
// edit-run loop) then spends its time on the backend and the comparisons, not on recomputing the
// same expectations. The baselines' values are not kept (they are two or three times the
// expectation's size); a failure dump or a leak confirmation that needs them recomputes them.
// An entry is stored only when reading it back is cheaper than computing it again (its bytes at
// 1 GB/s against the time its computation took), so large states with few tokens stay uncached.
//
// Safety: an entry is used only when everything it depends on matches exactly. The key names the
// value's role, the case id, the generator options (probe salts), the matmul precision, the
// generator version and a build id: the SHA-256 of every source file of cases/, ops/, reference/,
// core/ and harness/ plus the compiler (generated at build time, harness/CMakeLists.txt), so a
// change to any code that computes expectations starts from an empty cache. Each file stores its
// full key (a hash collision is a miss) and a checksum of its payload; a file that fails either
// check is a miss and is removed. Writes go to a temporary file renamed into place, so a crash
// or a concurrent run never leaves a partial entry. Values round-trip bit for bit.
//
// Off unless a directory is given (`deltacheck run --cache-dir`, DELTACHECK_CACHE_DIR, the
// Python package's `cache_dir`, the pytest plugin: .pytest_cache). docs/performance.md.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cases/case.h"
#include "cases/op.h"
#include "cases/tensor.h"
#include "harness/compare.h"
#include "ops/operation.h"

namespace deltacheck::harness {

class ExpectationCache {
 public:
  struct Stats {
    int64_t hits = 0, misses = 0, stores = 0;
    int64_t rejected = 0;   // entries found damaged (checksum, truncation) and removed
    int64_t not_worth = 0;  // computed values not stored: faster to compute than to read
    int64_t full = 0;       // computed values not stored: the directory is at its size budget
  };

  // The read speed the store-or-not rule assumes (bytes per second).
  static constexpr double kReadBytesPerSecond = 1e9;
  // The directory's size budget: once its entries take this much, nothing more is stored
  // (nothing is evicted: remove the directory to start over).
  static constexpr int64_t kMaxTotalBytes = int64_t{2} << 30;

  // Creates `directory` if needed; throws std::runtime_error naming it when it cannot.
  // `read_bytes_per_second`: an entry is stored when its bytes read at this speed take less time
  // than computing it took (infinity: store everything up to kMaxEntryBytes).
  explicit ExpectationCache(std::string directory,
                            double read_bytes_per_second = kReadBytesPerSecond,
                            int64_t max_total_bytes = kMaxTotalBytes);

  const std::string& directory() const { return dir_; }
  // The build id entries are keyed by (hex).
  static std::string build_id();

  // `compute()`'s result, from the cache when an entry for (role, case, options, precision)
  // exists, else computed and stored. `role` names what the value is ("prepare", "split", ...).
  struct Prepared {
    cases::TensorMap inputs;
    ops::Values expected;
    BaselineErrors errors;
  };
  Prepared prepared(const cases::Case& c, const cases::GenOptions& options,
                    ops::MatmulPrecision precision, const std::function<Prepared()>& compute) const;
  cases::TensorMap inputs(const cases::Case& c, const cases::GenOptions& options,
                          const std::function<cases::TensorMap()>& compute) const;
  BaselineErrors errors(const std::string& role, const cases::Case& c,
                        ops::MatmulPrecision precision,
                        const std::function<BaselineErrors()>& compute) const;

  Stats stats() const;

  // Entries larger than this are never stored.
  static constexpr size_t kMaxEntryBytes = size_t{64} << 20;

 private:
  // A file read whole, and where its payload is in it.
  struct Entry {
    std::string file;
    size_t begin = 0, end = 0;
  };
  std::optional<Entry> load(const std::string& key) const;
  void store(const std::string& key, const std::string& payload, double compute_seconds) const;
  std::string path_for(const std::string& key) const;
  // `compute()` through the entry `key`: `read` parses a stored payload, `write` makes one.
  template <class T>
  T through(const std::string& key, const std::function<T()>& compute,
            T (*read)(const std::string&, size_t, size_t), std::string (*write)(const T&)) const;

  std::string dir_;
  double read_bytes_per_second_;
  int64_t max_total_bytes_;
  mutable std::atomic<int64_t> used_bytes_{0}, full_{0};
  mutable std::atomic<int64_t> hits_{0}, misses_{0}, stores_{0}, rejected_{0}, not_worth_{0};
};

// The cache a run uses: `directory` if non-empty, else none.
std::shared_ptr<const ExpectationCache> open_expectation_cache(const std::string& directory);

}  // namespace deltacheck::harness
