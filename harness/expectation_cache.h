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
// Keyed by everything the value depends on: the value's role, the case id, the generator options
// (probe salts), the precision profile, the generator version and a build id: the SHA-256 of every
// source file of cases/, ops/, reference/, core/ and harness/ plus the compiler (generated at
// build time, harness/CMakeLists.txt), so a change to any code that computes expectations starts
// from an empty cache. Values round-trip bit for bit.
//
// The directory is NOT trusted (issue 35): a candidate runs as the same user and can write it,
// and a cache folder may be restored from elsewhere (a CI cache). So every entry is encrypted and
// authenticated (XChaCha20-Poly1305, libsodium) with a secret key kept outside the directory
// (harness/cache_key.h), its full key text as the additional data: a planted, edited, damaged or
// truncated entry, or one moved to another key's file, fails authentication and is a miss
// (counted as rejected, recomputed and overwritten), and what is on disk gives a reader without
// the key no expectation. The directory is reached through cases::SafeDir: no link followed below
// it, regular files only (a FIFO, a device or a link in an entry's place is a miss and removed,
// never opened for reading), and an entry is read only up to the bound its case allows
// (max_payload_bytes(), counted against --max-memory), so a huge file is a miss without being
// read. Writes go to a temporary file (O_EXCL) renamed into place, so a crash or a concurrent run
// never leaves a partial entry. Whoever can read the key file can forge entries and read
// expectations: a competition must sandbox the candidate (docs/reliability.md).
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
#include "cases/safe_file.h"
#include "cases/tensor.h"
#include "harness/cache_key.h"
#include "harness/compare.h"
#include "ops/operation.h"

namespace deltacheck::harness {

class ExpectationCache {
 public:
  struct Stats {
    int64_t hits = 0, misses = 0, stores = 0;
    // entries refused and removed: failed authentication (planted, damaged, truncated, another
    // key's, another key file's), larger than their case allows, or not a regular file
    int64_t rejected = 0;
    int64_t not_worth = 0;  // computed values not stored: faster to compute than to read
    int64_t full = 0;       // computed values not stored: the directory is at its size budget
  };

  // The read speed the store-or-not rule assumes (bytes per second).
  static constexpr double kReadBytesPerSecond = 1e9;
  // The directory's size budget: once its entries take this much, nothing more is stored
  // (nothing is evicted: remove the directory to start over).
  static constexpr int64_t kMaxTotalBytes = int64_t{2} << 30;
  // Entries larger than this are never stored (nor read).
  static constexpr size_t kMaxEntryBytes = size_t{64} << 20;
  // What an entry file holds beyond its payload: format tag, nonce, authentication tag.
  static constexpr size_t kFileOverheadBytes = 8 + 24 + 16;

  // Creates `directory` if needed and opens the key in `key_file` ("": default_cache_key_file(),
  // made on first use; harness/cache_key.h). Throws std::runtime_error, one line naming the
  // directory or the key file and what is wrong, when either is unusable.
  // `read_bytes_per_second`: an entry is stored when its bytes read at this speed take less time
  // than computing it took (infinity: store everything up to kMaxEntryBytes).
  explicit ExpectationCache(std::string directory,
                            double read_bytes_per_second = kReadBytesPerSecond,
                            int64_t max_total_bytes = kMaxTotalBytes, std::string key_file = "");
  ~ExpectationCache();
  ExpectationCache(const ExpectationCache&) = delete;
  ExpectationCache& operator=(const ExpectationCache&) = delete;

  const std::string& directory() const { return dir_.path(); }
  const std::string& key_file() const { return key_file_; }
  // The build id entries are keyed by (hex).
  static std::string build_id();

  // The most payload bytes an entry of case `c` can hold (its inputs, expectation and per-sequence
  // errors, generously, at most kMaxEntryBytes): a file larger than this plus kFileOverheadBytes
  // is not read. harness/limits.h counts it against --max-memory where a cache is in use.
  static size_t max_payload_bytes(const cases::Case& c);

  struct Prepared {
    cases::TensorMap inputs;
    ops::Values expected;
    BaselineErrors errors;
  };
  // An entry computed and not yet written (prepared() with `defer`): write() stores it. The
  // runner writes a case's entry after the case's calls (a candidate never finds an entry its
  // own calls made, even encrypted, on a cold run).
  struct Unwritten {
    std::string key, payload;
    double compute_seconds = 0;
    size_t max_payload = 0;
  };
  // `compute()`'s result, from the cache when an entry for (case, options, precision) exists,
  // else computed and stored (with `defer`: left in *defer for write()).
  Prepared prepared(const cases::Case& c, const cases::GenOptions& options,
                    const ops::PrecisionProfile& precision,
                    const std::function<Prepared()>& compute, Unwritten* defer = nullptr) const;
  void write(Unwritten entry) const;
  cases::TensorMap inputs(const cases::Case& c, const cases::GenOptions& options,
                          const std::function<cases::TensorMap()>& compute) const;
  // `role` names what the errors are ("split", ...).
  BaselineErrors errors(const std::string& role, const cases::Case& c,
                        const ops::PrecisionProfile& precision,
                        const std::function<BaselineErrors()>& compute) const;

  Stats stats() const;

  // The entry file format, for the fuzzer (fuzz/fuzz_cache_entry.cc) and the tests: `payload`
  // sealed for `key` under `secret`, and the payload of `file` when it is such an entry (its
  // bytes [begin, end) of *file after decrypting in place), else nullopt.
  static std::string seal(const CacheKey& secret, const std::string& key, std::string payload);
  struct Span {
    size_t begin = 0, end = 0;
  };
  static std::optional<Span> unseal(const CacheKey& secret, const std::string& key,
                                    std::string* file);
  // The payload parsers (throw std::runtime_error on any inconsistency, never allocate more than
  // a small multiple of the payload's size).
  static Prepared read_prepared(const std::string& s, size_t begin, size_t end);
  static std::string write_prepared(const Prepared& p);

 private:
  struct Entry {
    std::string file;
    Span payload;
  };
  std::optional<Entry> load(const std::string& key, size_t max_payload) const;
  void store(const std::string& key, std::string payload, double compute_seconds,
             size_t max_payload) const;
  // `compute()` through the entry `key`: `read` parses a stored payload, `write` makes one.
  template <class T>
  T through(const std::string& key, size_t max_payload, const std::function<T()>& compute,
            T (*read)(const std::string&, size_t, size_t), std::string (*write)(const T&),
            Unwritten* defer) const;

  cases::SafeDir dir_;
  std::string key_file_;
  CacheKey secret_;
  double read_bytes_per_second_;
  int64_t max_total_bytes_;
  mutable std::atomic<int64_t> used_bytes_{0}, full_{0};
  mutable std::atomic<int64_t> hits_{0}, misses_{0}, stores_{0}, rejected_{0}, not_worth_{0};
};

// The cache a run uses: `directory` if non-empty (its key from default_cache_key_file()), else
// none. Throws what the constructor throws.
std::shared_ptr<const ExpectationCache> open_expectation_cache(const std::string& directory);

}  // namespace deltacheck::harness
