// Fuzz target: what a --serve worker sends back on its channel (backends/serve_protocol.h): any
// bytes, arriving in reads of any size up to one recv() (4096 bytes), cut into lines and parsed as
// the handshake and then as answers. Every line parses to an answer or an error value (no crash,
// no exception, no undefined behaviour); the buffer never holds more than kMaxLine bytes after a
// read is taken; the words that reach reports and the console are printable UTF-8.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "backends/serve_protocol.h"
#include "cases/safe_text.h"

namespace {

using deltacheck::backends::serve::LineBuffer;

// Valid UTF-8 without C0 or C1 controls or DEL: what cases::printable_line promises.
void require_printable(std::string_view s) {
  if (deltacheck::cases::valid_utf8(s) != s) std::abort();
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F) std::abort();
    if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
        static_cast<unsigned char>(s[i + 1]) <= 0x9F)
      std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace serve = deltacheck::backends::serve;
  FuzzedDataProvider in(data, size);
  LineBuffer buffer;
  std::string line;
  bool handshake = true;
  while (in.remaining_bytes() > 0) {
    const std::string read = in.ConsumeBytesAsString(in.ConsumeIntegralInRange<size_t>(1, 4096));
    buffer.append(read.data(), read.size());
    for (;;) {
      const LineBuffer::Next next = buffer.next(line);
      if (next == LineBuffer::Next::kMore) break;
      if (next == LineBuffer::Next::kTooLong) return 0;  // the worker is killed
      if (line.size() > serve::kMaxLine + 4096) std::abort();
      if (handshake) {
        handshake = false;
        const deltacheck::Status st = serve::check_handshake(line);
        if (st.ok() != (line == serve::kHandshake)) std::abort();
        require_printable(st.message());
        continue;
      }
      const deltacheck::StatusOr<serve::Answer> a = serve::parse_answer(line);
      require_printable(a.ok() ? a.value().reason : a.status().message());
      if (a.ok() && a.value().kind == serve::Answer::Kind::kOk && line != "ok") std::abort();
    }
    if (buffer.pending().size() > serve::kMaxLine) std::abort();
  }
  return 0;
}
