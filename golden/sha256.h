// SHA-256 (FIPS 180-4), for the checksum of every dataset in a golden fixture. Small and
// dependency-free; tested against the standard's test vectors (tests/golden/test_sha256.cc).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace deltacheck::golden {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  // The digest of everything passed to update(); the object must not be used afterwards.
  std::array<uint8_t, 32> finish();

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_{};
  size_t buffered_ = 0;
  uint64_t total_ = 0;
};

// Lower-case hex digest of a buffer.
std::string sha256_hex(const void* data, size_t n);

}  // namespace deltacheck::golden
