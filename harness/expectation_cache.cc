// The cross-run expectation cache (harness/expectation_cache.h).
//
// File layout: "DCEXPC02", a 24-byte random nonce, then the payload encrypted and authenticated
// with XChaCha20-Poly1305 (libsodium's crypto_aead_xchacha20poly1305_ietf, the 16-byte tag after
// the ciphertext) under the secret key of harness/cache_key.h, with the entry's full key text as
// the additional data. The key text is not stored: an entry read under another key (a file moved
// to another case's name, a file-name hash collision) fails authentication like a forged one.
// The nonce is random (randombytes_buf): determinism is a rule for generating cases, not for
// nonces, which must never repeat under one key. Encryption and decryption work in place, so a
// read holds one copy of the entry. The file name is a 128-bit hash of the key text (public: it
// tells where an entry is, not what it holds).
#include "harness/expectation_cache.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sodium.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "cases/generate.h"
#include "cases/generator_version.h"
#include "harness/expectation_build_id.h"
#include "harness/op_names.h"

namespace deltacheck::harness {
namespace {

constexpr char kMagic[8] = {'D', 'C', 'E', 'X', 'P', 'C', '0', '2'};
constexpr size_t kNonceBytes = crypto_aead_xchacha20poly1305_ietf_NPUBBYTES;
constexpr size_t kTagBytes = crypto_aead_xchacha20poly1305_ietf_ABYTES;
static_assert(sizeof kMagic + kNonceBytes + kTagBytes == ExpectationCache::kFileOverheadBytes);
static_assert(CacheKey::kBytes == crypto_aead_xchacha20poly1305_ietf_KEYBYTES);

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
      if (b > 0) std::memcpy(xs.data(), s_.data() + pos_, b);  // an empty vector's data() is null
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
      // The shape's bytes must be in the entry before a tensor of that shape is allocated, and
      // its non-zero extents must multiply without overflow (the tensor multiplies them all).
      uint64_t bytes = cases::dtype_size(static_cast<cases::DType>(dtype)), extent = 1;
      constexpr uint64_t kMaxExtent = uint64_t{1} << 40;
      for (int64_t& d : shape) {
        const uint64_t e = u64();
        if (e != 0 && e > kMaxExtent / extent) throw std::runtime_error("bad shape");
        if (e != 0) extent *= e;
        d = static_cast<int64_t>(e);
        bytes = e == 0 ? 0 : (bytes > (end_ - pos_) / e ? end_ - pos_ + 1 : bytes * e);
      }
      const uint64_t b = u64();
      if (b != bytes) throw std::runtime_error("tensor size does not match its shape");
      need(b);
      cases::Tensor t(std::move(name), static_cast<cases::DType>(dtype), std::move(shape), 0,
                      cases::Tensor::Init::kUnspecified);
      if (b != t.nbytes()) throw std::runtime_error("tensor size does not match its shape");
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
  k << "deltacheck expectation cache 2\nbuild " << ExpectationCache::build_id() << "\ngenerator "
    << cases::kGeneratorVersion << "\nrole " << role << "\ncase " << c.id() << "\nsalts " << salts
    << "\nprecision " << precision << "\n";
  return k.str();
}

}  // namespace

namespace {

cases::SafeDir open_directory(const std::string& path) {
  if (path.empty()) throw std::runtime_error("an empty expectation cache directory name");
  StatusOr<cases::SafeDir> d = cases::SafeDir::open(path, /*create=*/true);
  if (!d.ok()) throw std::runtime_error("expectation cache directory " + d.status().message());
  return d.take();
}

std::string key_file_or_default(std::string file) {
  if (!file.empty()) return file;
  StatusOr<std::string> f = default_cache_key_file();
  if (!f.ok()) throw std::runtime_error(f.status().message());
  return f.take();
}

// Whether `file` lies inside the folder `dir` (links resolved as far as they exist).
bool inside(const std::string& file, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path d = fs::canonical(dir, ec);
  if (ec) return false;
  const fs::path f = fs::weakly_canonical(file, ec);
  if (ec) return false;
  auto fi = f.begin();
  for (auto di = d.begin(); di != d.end(); ++di, ++fi)
    if (fi == f.end() || *fi != *di) return false;
  return true;
}

// The entry's place: a two-character bucket folder and the file in it.
struct Place {
  std::string bucket, file;
};
Place place_of(const std::string& key) {
  // Two differently seeded 64-bit hashes of the key: a collision only costs a miss (the key text
  // is the additional data the entry is authenticated with).
  const std::string h = fmt::format("{:016x}{:016x}", checksum(key), checksum(key + "\x01second"));
  return {h.substr(0, 2), h + ".bin"};
}

Status write_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::Internal(std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace

ExpectationCache::ExpectationCache(std::string directory, double read_bytes_per_second,
                                   int64_t max_total_bytes, std::string key_file)
    : dir_(open_directory(directory)),
      key_file_(key_file_or_default(std::move(key_file))),
      read_bytes_per_second_(read_bytes_per_second),
      max_total_bytes_(max_total_bytes) {
  if (inside(key_file_, dir_.path()))
    throw std::runtime_error("cache key file '" + key_file_ +
                             "': inside the expectation cache directory '" + dir_.path() +
                             "': a copied or planted cache folder would carry its key (keep it "
                             "outside, see DELTACHECK_CACHE_KEY_FILE)");
  StatusOr<CacheKey> key = open_cache_key(key_file_);
  if (!key.ok()) throw std::runtime_error(key.status().message());
  secret_ = key.value();
  sodium_memzero(key.value().bytes.data(), key.value().bytes.size());
  // What the entries already take (the budget counts them; a concurrent run may add more).
  // Sizes only: nothing is opened, no link followed.
  namespace fs = std::filesystem;
  std::error_code ec;
  int64_t used = 0;
  for (auto it = fs::recursive_directory_iterator(dir_.path(), ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->symlink_status(ec).type() == fs::file_type::regular && it->path().extension() == ".bin")
      used += static_cast<int64_t>(it->file_size(ec));
  used_bytes_ = used;
}

ExpectationCache::~ExpectationCache() {
  sodium_memzero(secret_.bytes.data(), secret_.bytes.size());
}

std::string ExpectationCache::build_id() { return kExpectationBuildId; }

size_t ExpectationCache::max_payload_bytes(const cases::Case& c) {
  // The payload is the inputs' bytes, 8 per expected element, and per output one error record
  // per sequence plus the whole (names, 5 doubles, 3 integers), each with a few length fields.
  // The inputs' estimate leaves out small tensors (cu_seqlens, slots): twice it, and 4 kB per
  // sequence, cover them with room to spare.
  try {
    double expected = 0, outputs = 0;
    for (const OutputSpec& s : operation_for(c).outputs(c)) {
      double n = 1;
      for (int64_t d : s.shape) n *= static_cast<double>(d);
      expected += 8 * n;
      ++outputs;
    }
    const double seqs = c.has_layout() ? static_cast<double>(c.layout().num_seqs()) : 1;
    const double bound = 2 * static_cast<double>(cases::estimate_input_bytes(c)) + expected +
                         (seqs + 2) * (outputs + 16) * 256 + (1 << 20);
    return bound >= static_cast<double>(kMaxEntryBytes) ? kMaxEntryBytes
                                                        : static_cast<size_t>(bound);
  } catch (const std::exception&) {  // a case that cannot be prepared: the general bound
    return kMaxEntryBytes;
  }
}

std::string ExpectationCache::seal(const CacheKey& secret, const std::string& key,
                                   std::string payload) {
  const size_t n = payload.size();
  std::string file(kFileOverheadBytes + n, '\0');
  std::memcpy(file.data(), kMagic, sizeof kMagic);
  auto* nonce = reinterpret_cast<unsigned char*>(file.data() + sizeof kMagic);
  randombytes_buf(nonce, kNonceBytes);
  auto* body = nonce + kNonceBytes;
  std::memcpy(body, payload.data(), n);
  sodium_memzero(payload.data(), payload.size());
  unsigned long long written = 0;  // NOLINT(runtime/int): libsodium's type
  crypto_aead_xchacha20poly1305_ietf_encrypt(body, &written, body, n,
                                             reinterpret_cast<const unsigned char*>(key.data()),
                                             key.size(), nullptr, nonce, secret.bytes.data());
  return file;
}

std::optional<ExpectationCache::Span> ExpectationCache::unseal(const CacheKey& secret,
                                                               const std::string& key,
                                                               std::string* file) {
  if (file->size() < kFileOverheadBytes || std::memcmp(file->data(), kMagic, sizeof kMagic) != 0)
    return std::nullopt;
  auto* nonce = reinterpret_cast<unsigned char*>(file->data() + sizeof kMagic);
  auto* body = nonce + kNonceBytes;
  const size_t sealed = file->size() - sizeof kMagic - kNonceBytes;
  unsigned long long n = 0;  // NOLINT(runtime/int): libsodium's type
  if (crypto_aead_xchacha20poly1305_ietf_decrypt(body, &n, nullptr, body, sealed,
                                                 reinterpret_cast<const unsigned char*>(key.data()),
                                                 key.size(), nonce, secret.bytes.data()) != 0)
    return std::nullopt;
  const size_t begin = sizeof kMagic + kNonceBytes;
  return Span{begin, begin + static_cast<size_t>(n)};
}

std::optional<ExpectationCache::Entry> ExpectationCache::load(const std::string& key,
                                                              size_t max_payload) const {
  const Place at = place_of(key);
  StatusOr<cases::SafeDir> bucket = dir_.sub(at.bucket, /*create=*/false);
  if (!bucket.ok()) {
    // Nothing there is a miss; something that is not a folder (a link, a file) is removed, so
    // the fresh entry can be stored.
    if (dir_.exists(at.bucket)) {
      ++rejected_;
      (void)dir_.remove(at.bucket);
    }
    return std::nullopt;
  }
  StatusOr<std::string> file = bucket.value().read(at.file, kFileOverheadBytes + max_payload);
  if (!file.ok()) {
    // Too large, a link, a FIFO, a device, a folder: refused unread, removed (unlinkat: a link
    // goes, never what it points to; a folder stays and the store's rename fails on it).
    if (!cases::is_not_found(file.status())) {
      ++rejected_;
      (void)bucket.value().remove(at.file);
    }
    return std::nullopt;
  }
  Entry e{file.take(), {}};
  std::optional<Span> payload = unseal(secret_, key, &e.file);
  if (!payload) {  // forged, damaged, truncated, another key's entry or another key file's
    ++rejected_;
    (void)bucket.value().remove(at.file);
    return std::nullopt;
  }
  e.payload = *payload;
  return e;
}

void ExpectationCache::store(const std::string& key, std::string payload, double compute_seconds,
                             size_t max_payload) const {
  if (payload.size() > std::min(max_payload, kMaxEntryBytes) ||
      static_cast<double>(payload.size()) > compute_seconds * read_bytes_per_second_) {
    ++not_worth_;
    return;
  }
  if (used_bytes_.load() + static_cast<int64_t>(payload.size()) > max_total_bytes_) {
    ++full_;
    return;
  }
  const std::string file = seal(secret_, key, std::move(payload));
  const Place at = place_of(key);
  StatusOr<cases::SafeDir> bucket = dir_.sub(at.bucket, /*create=*/true);
  if (!bucket.ok()) return;  // a full disk, a read-only directory: the run goes on uncached
  // A name no other writer uses (process id and a per-process counter), created O_EXCL.
  static std::atomic<uint64_t> serial{0};
  const std::string tmp =
      at.file + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(serial++);
  {
    StatusOr<cases::UniqueFd> f = bucket.value().open_write(tmp, O_EXCL, 0600);
    if (!f.ok()) return;
    if (!write_all(f.value().get(), file).ok()) {
      (void)bucket.value().remove(tmp);
      return;
    }
  }
  if (!bucket.value().rename(tmp, at.file).ok()) {
    (void)bucket.value().remove(tmp);
    return;
  }
  used_bytes_ += static_cast<int64_t>(file.size());
  ++stores_;
}

void ExpectationCache::write(Unwritten entry) const {
  store(entry.key, std::move(entry.payload), entry.compute_seconds, entry.max_payload);
}

// Payloads of each kind of entry.
ExpectationCache::Prepared ExpectationCache::read_prepared(const std::string& s, size_t begin,
                                                           size_t end) {
  Reader r(s, begin, end);
  ExpectationCache::Prepared p;
  p.inputs = r.tensors();
  p.expected = r.values();
  p.errors = r.errors();
  r.finish();
  return p;
}
std::string ExpectationCache::write_prepared(const ExpectationCache::Prepared& p) {
  Writer w;
  w.tensors(p.inputs);
  w.values(p.expected);
  w.errors(p.errors);
  return w.take();
}

namespace {

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
T ExpectationCache::through(const std::string& key, size_t max_payload,
                            const std::function<T()>& compute,
                            T (*read)(const std::string&, size_t, size_t),
                            std::string (*write)(const T&), Unwritten* defer) const {
  if (std::optional<Entry> hit = load(key, max_payload)) {
    try {
      T value = read(hit->file, hit->payload.begin, hit->payload.end);
      ++hits_;
      return value;
    } catch (const std::exception&) {  // authentic but unreadable: another layout's (a bug)
      ++rejected_;
    }
  }
  ++misses_;
  const auto t0 = std::chrono::steady_clock::now();
  T value = compute();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (defer)
    *defer = Unwritten{key, write(value), seconds, max_payload};
  else
    store(key, write(value), seconds, max_payload);
  return value;
}

ExpectationCache::Prepared ExpectationCache::prepared(const cases::Case& c,
                                                      const cases::GenOptions& options,
                                                      const ops::PrecisionProfile& precision,
                                                      const std::function<Prepared()>& compute,
                                                      Unwritten* defer) const {
  return through<Prepared>(
      make_key("prepare", c, salts_text(options), ops::profile_name(precision)),
      max_payload_bytes(c), compute, read_prepared, write_prepared, defer);
}

cases::TensorMap ExpectationCache::inputs(const cases::Case& c, const cases::GenOptions& options,
                                          const std::function<cases::TensorMap()>& compute) const {
  return through<cases::TensorMap>(make_key("inputs", c, salts_text(options), ""),
                                   max_payload_bytes(c), compute, read_tensors, write_tensors,
                                   nullptr);
}

BaselineErrors ExpectationCache::errors(const std::string& role, const cases::Case& c,
                                        const ops::PrecisionProfile& precision,
                                        const std::function<BaselineErrors()>& compute) const {
  return through<BaselineErrors>(make_key(role, c, "", ops::profile_name(precision)),
                                 max_payload_bytes(c), compute, read_errors, write_errors, nullptr);
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
