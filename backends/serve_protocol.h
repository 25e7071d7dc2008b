// What a --serve worker sends back on its channel (docs/external.md, "The serve protocol"): bytes
// cut into lines, the handshake and the answer to each request, parsed. Pure functions of the
// bytes, apart from the process handling in external_backend.cc, so that anything a worker could
// send is fuzzed (fuzz/fuzz_serve_answer.cc): a value or an error, never a crash, a hang or an
// allocation beyond kMaxLine plus one read.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/status.h"

namespace deltacheck::backends::serve {

// worker -> deltacheck, first:  deltacheck-serve 1<LF>
//                     per call: ok<LF> | error <reason><LF> | unsupported <reason><LF>
constexpr std::string_view kHandshake = "deltacheck-serve 1";
// A line longer than this is garbage, not an answer.
constexpr size_t kMaxLine = size_t{64} << 10;

// The bytes received so far, taken a line at a time.
class LineBuffer {
 public:
  enum class Next { kLine, kMore, kTooLong };
  void append(const char* data, size_t n) { bytes_.append(data, n); }
  // The next whole line (without its LF, and a CR before it); kMore when no line break has come
  // yet; kTooLong when more than kMaxLine bytes have come without one.
  Next next(std::string& line);
  bool has_line() const { return bytes_.find('\n', start_) != std::string::npos; }
  bool empty() const { return start_ == bytes_.size(); }
  // What has come and not been taken (output a worker sent unasked, for a message).
  std::string_view pending() const { return std::string_view(bytes_).substr(start_); }
  void clear() {
    bytes_.clear();
    start_ = 0;
  }

 private:
  std::string bytes_;
  size_t start_ = 0;  // lines before it are taken
};

// The handshake line: Ok, or why it is not one (the line shown printable and cut).
Status check_handshake(std::string_view line);

struct Answer {
  enum class Kind { kOk, kError, kUnsupported };
  Kind kind = Kind::kOk;
  std::string reason;  // the worker's words, printable (cases/safe_text.h) and cut; may be empty
};

// One answer line; anything but ok, error <reason> or unsupported <reason> is an error value
// ("'<line>', expected ok, error <reason> or unsupported <reason>").
StatusOr<Answer> parse_answer(std::string_view line);

}  // namespace deltacheck::backends::serve
