// The cross-run expectation cache (harness/expectation_cache.h).
//
// File layout, little-endian: "DCEXPC01", u64 key length, key bytes, u64 payload length, payload,
// u64 checksum of the payload. The checksum is a four-lane multiply-xor over 64-bit words: it
// detects truncation and damaged bytes (not forgery: the directory is the user's own), at a few
// GB/s, where SHA-256 would cost more than the expectation it protects on small cases. The file
// name is a 128-bit hash of the key.
#include "harness/expectation_cache.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <thread>

#include "cases/generator_version.h"
#include "harness/expectation_build_id.h"

namespace deltacheck::harness {
namespace {

constexpr char kMagic[8] = {'D', 'C', 'E', 'X', 'P', 'C', '0', '1'};

uint64_t checksum(std::string_view s) {
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  uint64_t lane[4] = {0x243F6A8885A308D3ull, 0x13198A2E03707344ull, 0xA4093822299F31D0ull,
                      0x082EFA98EC4E6C89ull};
  const size_t words = s.size() / 8;
  const char* p = s.data();
  size_t i = 0;
  for (; i + 4 <= words; i += 4)
    for (int l = 0; l < 4; ++l) {
      uint64_t w;
      std::memcpy(&w, p + (i + l) * 8, 8);
      lane[l] = (lane[l] ^ w) * kMul;
      lane[l] ^= lane[l] >> 29;
    }
  uint64_t h = s.size();
  for (; i < words; ++i) {
    uint64_t w;
    std::memcpy(&w, p + i * 8, 8);
    h = ((h ^ w) * kMul) ^ (h >> 31);
  }
  for (size_t b = words * 8; b < s.size(); ++b)
    h = ((h ^ static_cast<uint8_t>(p[b])) * kMul) ^ (h >> 31);
  for (uint64_t l : lane) h = ((h ^ l) * kMul) ^ (h >> 29);
  return h;
}

class Writer {
 public:
  void u64(uint64_t v) { buf_.append(reinterpret_cast<const char*>(&v), 8); }
  void bytes(const void* p, size_t n) {
    u64(n);
    buf_.append(static_cast<const char*>(p), n);
  }
  void str(const std::string& s) { bytes(s.data(), s.size()); }
  void values(const ops::Values& v) {
    u64(v.size());
    for (const auto& [name, xs] : v) {
      str(name);
      bytes(xs.data(), xs.size() * sizeof(double));
    }
  }
  void tensors(const cases::TensorMap& m) {
    u64(m.all().size());
    for (const cases::Tensor& t : m.all()) {
      str(t.name());
      u64(static_cast<uint64_t>(t.dtype()));
      u64(t.shape().size());
      for (int64_t d : t.shape()) u64(static_cast<uint64_t>(d));
      bytes(t.data(), t.nbytes());
    }
  }
  void errors(const BaselineErrors& es) {
    u64(es.size());
    for (const auto& [output, list] : es) {
      str(output);
      u64(list.size());
      for (const BaselineError& e : list) {
        str(e.name);
        const Metrics& m = e.metrics;
        for (double d : {m.max_abs, m.rel_rms, m.nmse, m.ref_max_abs, m.ref_rms}) f64(d);
        for (int64_t i : {m.max_index, m.count, m.non_finite}) u64(static_cast<uint64_t>(i));
      }
    }
  }
  void f64(double d) { buf_.append(reinterpret_cast<const char*>(&d), 8); }
  std::string take() { return std::move(buf_); }

 private:
  std::string buf_;
};

// Reads what Writer wrote; any inconsistency throws (the entry is then rejected).
class Reader {
 public:
  // Reads s[pos, end).
  Reader(const std::string& s, size_t pos, size_t end) : s_(s), pos_(pos), end_(end) {}
  explicit Reader(const std::string& s) : Reader(s, 0, s.size()) {}
  size_t position() const { return pos_; }
  uint64_t u64() {
    need(8);
    uint64_t v;
    std::memcpy(&v, s_.data() + pos_, 8);
    pos_ += 8;
    return v;
  }
  std::string str() {
    const uint64_t n = u64();
    need(n);
    std::string out = s_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  ops::Values values() {
    ops::Values v;
    for (uint64_t n = count(), i = 0; i < n; ++i) {
      std::string name = str();
      const uint64_t b = u64();
      if (b % sizeof(double) != 0) throw std::runtime_error("bad value block");
      need(b);
      std::vector<double>& xs = v[name];
      xs.resize(b / sizeof(double));
      std::memcpy(xs.data(), s_.data() + pos_, b);
      pos_ += b;
    }
    return v;
  }
  cases::TensorMap tensors() {
    cases::TensorMap m;
    for (uint64_t n = count(), i = 0; i < n; ++i) {
      std::string name = str();
      const uint64_t dtype = u64();
      if (dtype > static_cast<uint64_t>(cases::DType::kU8)) throw std::runtime_error("bad dtype");
      std::vector<int64_t> shape(count());
      for (int64_t& d : shape) {
        d = static_cast<int64_t>(u64());
        if (d < 0) throw std::runtime_error("bad shape");
      }
      cases::Tensor t(std::move(name), static_cast<cases::DType>(dtype), std::move(shape), 0,
                      cases::Tensor::Init::kUnspecified);
      const uint64_t b = u64();
      if (b != t.nbytes()) throw std::runtime_error("tensor size does not match its shape");
      need(b);
      if (b > 0) std::memcpy(t.data(), s_.data() + pos_, b);
      pos_ += b;
      m.add(std::move(t));
    }
    return m;
  }
  BaselineErrors errors() {
    BaselineErrors es;
    for (uint64_t n = count(), i = 0; i < n; ++i) {
      std::vector<BaselineError>& list = es[str()];
      list.resize(count());
      for (BaselineError& e : list) {
        e.name = str();
        Metrics& m = e.metrics;
        for (double* d : {&m.max_abs, &m.rel_rms, &m.nmse, &m.ref_max_abs, &m.ref_rms}) *d = f64();
        for (int64_t* v : {&m.max_index, &m.count, &m.non_finite}) *v = static_cast<int64_t>(u64());
      }
    }
    return es;
  }
  double f64() {
    const uint64_t bits = u64();
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
  }
  void finish() const {
    if (pos_ != end_) throw std::runtime_error("trailing bytes");
  }

 private:
  void need(uint64_t n) const {
    if (n > end_ - pos_) throw std::runtime_error("truncated");
  }
  // A count of items each at least 8 bytes long, bounded by what is left.
  uint64_t count() {
    const uint64_t n = u64();
    if (n > (end_ - pos_) / 8 + 1) throw std::runtime_error("bad count");
    return n;
  }
  const std::string& s_;
  size_t pos_, end_;
};

std::string salts_text(const cases::GenOptions& o) {
  std::string s;
  for (const auto& [seq, salt] : o.sequence_salt)
    s += std::to_string(seq) + ":" + std::to_string(salt) + ",";
  return s;
}

std::string make_key(const std::string& role, const cases::Case& c, const std::string& salts,
                     const std::string& precision) {
  std::ostringstream k;
  k << "deltacheck expectation cache 1\nbuild " << ExpectationCache::build_id() << "\ngenerator "
    << cases::kGeneratorVersion << "\nrole " << role << "\ncase " << c.id() << "\nsalts " << salts
    << "\nprecision " << precision << "\n";
  return k.str();
}

bool read_file(const std::string& path, std::string& out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const off_t size = ::lseek(fd, 0, SEEK_END);
  bool ok = size >= 0 && ::lseek(fd, 0, SEEK_SET) == 0;
  if (ok) {
    out.resize(static_cast<size_t>(size));
    size_t done = 0;
    while (ok && done < out.size()) {
      const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
      if (n < 0 && errno == EINTR) continue;
      ok = n > 0;
      if (ok) done += static_cast<size_t>(n);
    }
  }
  ::close(fd);
  return ok;
}

}  // namespace

ExpectationCache::ExpectationCache(std::string directory, double read_bytes_per_second,
                                   int64_t max_total_bytes)
    : dir_(std::move(directory)),
      read_bytes_per_second_(read_bytes_per_second),
      max_total_bytes_(max_total_bytes) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec || !std::filesystem::is_directory(dir_))
    throw std::runtime_error("cannot use '" + dir_ + "' as the expectation cache directory: " +
                             (ec ? ec.message() : std::string("not a directory")));
  // What the entries already take (the budget counts them; a concurrent run may add more).
  int64_t used = 0;
  for (auto it = std::filesystem::recursive_directory_iterator(dir_, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
    if (it->is_regular_file(ec) && it->path().extension() == ".bin")
      used += static_cast<int64_t>(it->file_size(ec));
  used_bytes_ = used;
}

std::string ExpectationCache::build_id() { return kExpectationBuildId; }

std::string ExpectationCache::path_for(const std::string& key) const {
  // Two differently seeded 64-bit hashes of the key: a collision only costs a miss (the file
  // holds its full key).
  const std::string h = fmt::format("{:016x}{:016x}", checksum(key), checksum(key + "\x01second"));
  return dir_ + "/" + h.substr(0, 2) + "/" + h + ".bin";
}

std::optional<ExpectationCache::Entry> ExpectationCache::load(const std::string& key) const {
  const std::string path = path_for(key);
  Entry e;
  if (!read_file(path, e.file)) return std::nullopt;
  try {
    const std::string& file = e.file;
    if (file.size() < sizeof kMagic || std::memcmp(file.data(), kMagic, sizeof kMagic) != 0)
      throw std::runtime_error("bad magic");
    Reader body(file, sizeof kMagic, file.size());
    if (body.str() != key) return std::nullopt;  // another key with the same hash: a miss
    const uint64_t n = body.u64();
    e.begin = body.position();
    if (n > file.size() - e.begin || file.size() - e.begin - n != 8)
      throw std::runtime_error("truncated");
    e.end = e.begin + n;
    Reader tail(file, e.end, file.size());
    if (tail.u64() != checksum(std::string_view(file).substr(e.begin, n)))
      throw std::runtime_error("checksum");
    return e;
  } catch (const std::exception&) {
    ++rejected_;
    std::error_code ec;
    std::filesystem::remove(path, ec);
    return std::nullopt;
  }
}

void ExpectationCache::store(const std::string& key, const std::string& payload,
                             double compute_seconds) const {
  if (payload.size() > kMaxEntryBytes ||
      static_cast<double>(payload.size()) > compute_seconds * read_bytes_per_second_) {
    ++not_worth_;
    return;
  }
  if (used_bytes_.load() + static_cast<int64_t>(payload.size()) > max_total_bytes_) {
    ++full_;
    return;
  }
  Writer w;
  std::string file(kMagic, sizeof kMagic);
  w.str(key);
  w.str(payload);
  w.u64(checksum(payload));
  file += w.take();
  const std::string path = path_for(key);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  // A name no other writer uses: process id and a per-process counter.
  static std::atomic<uint64_t> serial{0};
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(serial++);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(file.data(), static_cast<std::streamsize>(file.size()));
    f.close();
    if (!f) {  // a full disk or a read-only directory: the run goes on uncached
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return;
  }
  used_bytes_ += static_cast<int64_t>(file.size());
  ++stores_;
}

// Payloads of each kind of entry.
namespace {

ExpectationCache::Prepared read_prepared(const std::string& s, size_t begin, size_t end) {
  Reader r(s, begin, end);
  ExpectationCache::Prepared p;
  p.inputs = r.tensors();
  p.expected = r.values();
  p.errors = r.errors();
  r.finish();
  return p;
}
std::string write_prepared(const ExpectationCache::Prepared& p) {
  Writer w;
  w.tensors(p.inputs);
  w.values(p.expected);
  w.errors(p.errors);
  return w.take();
}
cases::TensorMap read_tensors(const std::string& s, size_t begin, size_t end) {
  Reader r(s, begin, end);
  cases::TensorMap m = r.tensors();
  r.finish();
  return m;
}
std::string write_tensors(const cases::TensorMap& m) {
  Writer w;
  w.tensors(m);
  return w.take();
}
BaselineErrors read_errors(const std::string& s, size_t begin, size_t end) {
  Reader r(s, begin, end);
  BaselineErrors es = r.errors();
  r.finish();
  return es;
}
std::string write_errors(const BaselineErrors& es) {
  Writer w;
  w.errors(es);
  return w.take();
}

}  // namespace

template <class T>
T ExpectationCache::through(const std::string& key, const std::function<T()>& compute,
                            T (*read)(const std::string&, size_t, size_t),
                            std::string (*write)(const T&)) const {
  if (std::optional<Entry> hit = load(key)) {
    try {
      T value = read(hit->file, hit->begin, hit->end);
      ++hits_;
      return value;
    } catch (const std::exception&) {  // checksummed but unreadable: written by another layout
      ++rejected_;
    }
  }
  ++misses_;
  const auto t0 = std::chrono::steady_clock::now();
  T value = compute();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  store(key, write(value), seconds);
  return value;
}

ExpectationCache::Prepared ExpectationCache::prepared(
    const cases::Case& c, const cases::GenOptions& options, ops::MatmulPrecision precision,
    const std::function<Prepared()>& compute) const {
  return through<Prepared>(
      make_key("prepare", c, salts_text(options), ops::matmul_precision_name(precision)), compute,
      read_prepared, write_prepared);
}

cases::TensorMap ExpectationCache::inputs(const cases::Case& c, const cases::GenOptions& options,
                                          const std::function<cases::TensorMap()>& compute) const {
  return through<cases::TensorMap>(make_key("inputs", c, salts_text(options), ""), compute,
                                   read_tensors, write_tensors);
}

BaselineErrors ExpectationCache::errors(const std::string& role, const cases::Case& c,
                                        ops::MatmulPrecision precision,
                                        const std::function<BaselineErrors()>& compute) const {
  return through<BaselineErrors>(make_key(role, c, "", ops::matmul_precision_name(precision)),
                                 compute, read_errors, write_errors);
}

ExpectationCache::Stats ExpectationCache::stats() const {
  return {hits_.load(),     misses_.load(),    stores_.load(),
          rejected_.load(), not_worth_.load(), full_.load()};
}

std::shared_ptr<const ExpectationCache> open_expectation_cache(const std::string& directory) {
  if (directory.empty()) return nullptr;
  return std::make_shared<const ExpectationCache>(directory);
}

}  // namespace deltacheck::harness
