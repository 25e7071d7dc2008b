// Memory estimates of cases and the --max-memory limit (harness/limits.h).
#include "harness/limits.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <fstream>
#include <stdexcept>

#include "cases/generate.h"
#include "harness/expectation_cache.h"
#include "harness/op_names.h"

namespace deltacheck::harness {

int64_t physical_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  int64_t kb = 0;
  while (f >> key >> kb >> unit)
    if (key == "MemTotal:") return kb * 1024;
  return 0;
}

int64_t default_max_memory_bytes() {
  const int64_t ram = physical_memory_bytes();
  return ram > 0 ? ram / 2 : int64_t{8} << 30;
}

int64_t parse_memory_size(const std::string& text) {
  const std::string bad =
      "'" + text + "' is not a memory size (e.g. 16G, 512M, 2000000000, 25%, or none)";
  if (text == "none" || text == "0") return 0;
  size_t end = 0;
  double value = 0;
  try {
    value = std::stod(text, &end);
  } catch (const std::exception&) {
    throw std::invalid_argument(bad);
  }
  if (!std::isfinite(value) || value <= 0 || !std::isdigit(static_cast<unsigned char>(text[0])))
    throw std::invalid_argument(bad);
  std::string unit = text.substr(end);
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  double scale = 0;
  if (unit == "%") {
    if (value > 100) throw std::invalid_argument(bad);
    const int64_t ram = physical_memory_bytes();
    if (ram <= 0) throw std::invalid_argument("'" + text + "': the machine's RAM is unknown");
    scale = static_cast<double>(ram) / 100.0;
  } else if (unit.empty() || unit == "B") {
    scale = 1;
  } else {
    const std::string powers = "KMGT";
    const size_t p = powers.find(unit[0]);
    const std::string rest = unit.substr(1);
    if (p == std::string::npos || !(rest.empty() || rest == "B" || rest == "IB"))
      throw std::invalid_argument(bad);
    scale = std::pow(1024.0, static_cast<double>(p + 1));
  }
  const double bytes = value * scale;
  if (bytes < 1 || bytes > 9.0e18) throw std::invalid_argument(bad);
  return static_cast<int64_t>(bytes);
}

std::string format_bytes(double bytes) {
  if (bytes >= 1e12) return fmt::format("{:.3g} TB", bytes / 1e12);
  if (bytes >= 1e9) return fmt::format("{:.1f} GB", bytes / 1e9);
  if (bytes >= 1e6) return fmt::format("{:.1f} MB", bytes / 1e6);
  return fmt::format("{:.1f} kB", bytes / 1e3);
}

MemoryEstimate estimate_case_memory(const cases::Case& c, bool expectation_cache) {
  MemoryEstimate m;
  m.inputs = static_cast<double>(cases::estimate_input_bytes(c));
  double out_storage = 0, out_doubles = 0;
  // Products in double: a hostile id's shapes must not overflow the estimate that guards them.
  for (const OutputSpec& s : operation_for(c).outputs(c)) {
    double n = 1;
    for (int64_t d : s.shape) n *= static_cast<double>(d);
    out_storage += n * cases::dtype_size(s.dtype) + 2048;  // guard bands
    out_doubles += n * 8;
  }
  m.outputs = out_storage;
  // Inputs: the case's, an FP64 copy in the oracle (up to 4x an fp16 input), a repacked copy for
  // the probes. Outputs: the backend's and a probe's. FP64: expectation, three baselines (four
  // under a TF32 declaration), the judge's copy of the output, the probes' cut expectation and
  // baselines.
  m.total = 6 * m.inputs + 2 * out_storage + 11 * out_doubles;
  // The cache's read buffer (or the entry held until the case's calls are done).
  if (expectation_cache)
    m.cache = static_cast<double>(ExpectationCache::max_payload_bytes(c) +
                                  ExpectationCache::kFileOverheadBytes);
  m.total += m.cache;
  return m;
}

std::string memory_refusal(const cases::Case& c, int64_t limit_bytes, bool expectation_cache) {
  if (limit_bytes <= 0) return "";
  const MemoryEstimate m = estimate_case_memory(c, expectation_cache);
  if (m.total <= static_cast<double>(limit_bytes)) return "";
  return fmt::format(
      "needs about {} (inputs {}, outputs {}{}), over --max-memory {}", format_bytes(m.total),
      format_bytes(m.inputs), format_bytes(m.outputs),
      m.cache > 0 ? ", expectation cache entry " + format_bytes(m.cache) : std::string(),
      format_bytes(static_cast<double>(limit_bytes)));
}

}  // namespace deltacheck::harness
