// Resource limits (--max-memory): what a case will need, estimated from its shapes before
// anything is allocated, and the machine's default limit. A case over the limit is refused
// instead of being left to the kernel's out-of-memory killer halfway through a run.
#pragma once

#include <cstdint>
#include <string>

#include "cases/case.h"

namespace deltacheck::harness {

// The machine's RAM (MemTotal in /proc/meminfo); 0 when it cannot be read.
int64_t physical_memory_bytes();
// The default --max-memory: half the machine's RAM, or 8 GiB when /proc/meminfo is unreadable.
int64_t default_max_memory_bytes();
// "16G", "512M", "1.5GiB", "2000000000", "25%" (of RAM); K/M/G/T (with or without "iB"/"B")
// are powers of 1024; "0" or "none" is no limit (returns 0). Throws std::invalid_argument.
int64_t parse_memory_size(const std::string& text);
std::string format_bytes(double bytes);  // "1.2 GB"

// Peak memory of running a case, from its shapes alone (no allocation): the inputs and the
// outputs (with guard bands), the FP64 expectation and baseline, the FP64 copies the oracle and
// the judge make, and the repacked copies of the leakage probes. A conservative estimate.
// With an expectation cache, also the most an entry read (or held until written) can take: an
// entry is never read past that bound (ExpectationCache::max_payload_bytes).
struct MemoryEstimate {
  double inputs = 0, outputs = 0, cache = 0, total = 0;
};
MemoryEstimate estimate_case_memory(const cases::Case& c, bool expectation_cache = false);

// Empty when the case fits in `limit_bytes` (0: no limit), else why not, e.g. "needs about
// 41.2 GB (inputs 10.3 GB, outputs 2.1 GB), over --max-memory 11.7 GB".
std::string memory_refusal(const cases::Case& c, int64_t limit_bytes,
                           bool expectation_cache = false);

}  // namespace deltacheck::harness
