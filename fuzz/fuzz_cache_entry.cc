// Fuzz target: expectation cache entries (harness/expectation_cache.h), the files a candidate
// can plant in a cache folder. The first byte chooses what the rest is:
//   even: an entry file, planted where the cache keeps a fixed case's preparation (a fixed test
//         key in a scratch folder). The cache must then give the case's own values — computed on
//         a miss, or read back from an authentic entry — and never crash, hang or allocate more
//         than a small multiple of the file.
//   odd:  a payload sealed with the key (as a buggy writer or a forger holding the key would
//         make it): unsealing gives back exactly these bytes, and the parser either refuses them
//         (an exception) or gives values whose bytes fit in the payload.
// Seed corpus (fuzz/corpus/cache_entry/): real entries of small cases and their payloads, written
// by this target when DELTACHECK_FUZZ_WRITE_SEEDS names a folder.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>

#include "harness/expectation_cache.h"
#include "harness/runner.h"

namespace fs = std::filesystem;
using deltacheck::cases::Case;
using deltacheck::harness::CacheKey;
using deltacheck::harness::ExpectationCache;
using deltacheck::harness::PreparedCase;

namespace {

constexpr const char* kKeyText = "deltacheck fuzz_cache_entry";
constexpr const char* kCase = "gdr(layout=packed[3,0,2],H=1,HV=1,K=4,V=4,seed=1)";

CacheKey fixed_key() {
  CacheKey k;
  for (size_t i = 0; i < k.bytes.size(); ++i) k.bytes[i] = static_cast<unsigned char>(i * 7 + 1);
  return k;
}

struct World {
  std::shared_ptr<const ExpectationCache> cache;
  Case c = Case::parse(kCase);
  ExpectationCache::Prepared honest;
  std::string honest_payload;
  deltacheck::ops::PrecisionProfile precision;
  fs::path entry;  // where the cache keeps c's preparation
};

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

World& world() {
  static World* w = [] {
    auto* w = new World;
    const char* scratch = std::getenv("DELTACHECK_FUZZ_SCRATCH");
    const fs::path root = fs::path(scratch ? scratch : fs::temp_directory_path().c_str()) /
                          ("cache_entry-" + std::to_string(::getpid()));
    fs::remove_all(root);
    fs::create_directories(root);
    const fs::path key = root / "cache.key";
    const CacheKey k = fixed_key();
    write_file(key, std::string(reinterpret_cast<const char*>(k.bytes.data()), k.bytes.size()));
    ::chmod(key.c_str(), 0600);
    w->cache = std::make_shared<const ExpectationCache>(
        (root / "cache").string(), std::numeric_limits<double>::infinity(),
        ExpectationCache::kMaxTotalBytes, key.string());
    const PreparedCase pc = deltacheck::harness::prepare(w->c, {}, w->cache);
    w->honest = {pc.inputs, pc.expected, pc.baseline_errors};
    w->precision = pc.precision;
    w->honest_payload = ExpectationCache::write_prepared(w->honest);
    for (const auto& e : fs::recursive_directory_iterator(root / "cache"))
      if (e.path().extension() == ".bin") w->entry = e.path();
    if (w->entry.empty()) std::abort();
    return w;
  }();
  return *w;
}

// Seeds: the real entry (mode 0) and the payloads of a few small cases (mode 1).
void write_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  write_file(dir / "entry-real", std::string(1, '\0') + read_file(world().entry));
  int n = 0;
  for (const char* id : {kCase, "gdr(layout=batch[2x3],H=1,HV=2,K=4,V=4,dtype=bf16,seed=2)",
                         "mask(B=2,q=5,padding=left,packed=packed,seed=1)"}) {
    const PreparedCase pc = deltacheck::harness::prepare(Case::parse(id));
    write_file(
        dir / ("payload-" + std::to_string(n++)),
        "\x01" + ExpectationCache::write_prepared({pc.inputs, pc.expected, pc.baseline_errors}));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)world();
  if (const char* seeds = std::getenv("DELTACHECK_FUZZ_WRITE_SEEDS")) write_seeds(seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  World& w = world();
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    write_file(w.entry, bytes);
    const ExpectationCache::Prepared got =
        w.cache->prepared(w.c, {}, w.precision, [&] { return w.honest; });
    // Only the case's own values, bit for bit: anything else is a forgery believed.
    if (ExpectationCache::write_prepared(got) != w.honest_payload) std::abort();
    return 0;
  }
  std::string file = ExpectationCache::seal(fixed_key(), kKeyText, bytes);
  const auto span = ExpectationCache::unseal(fixed_key(), kKeyText, &file);
  if (!span || file.compare(span->begin, span->end - span->begin, bytes) != 0) std::abort();
  try {
    const ExpectationCache::Prepared p =
        ExpectationCache::read_prepared(file, span->begin, span->end);
    size_t held = 0;
    for (const auto& t : p.inputs.all()) held += t.nbytes();
    for (const auto& [name, v] : p.expected) held += v.size() * sizeof(double);
    if (held > bytes.size()) std::abort();  // more values than the payload holds
  } catch (const std::exception&) {
  }
  return 0;
}
