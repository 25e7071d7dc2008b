// The --serve channel's lines, parsed (backends/serve_protocol.h).
#include "backends/serve_protocol.h"

#include "cases/safe_text.h"

namespace deltacheck::backends::serve {

LineBuffer::Next LineBuffer::next(std::string& line) {
  const size_t nl = bytes_.find('\n', start_);
  if (nl == std::string::npos) {
    bytes_.erase(0, start_);  // what is taken goes: the buffer holds one partial line at most
    start_ = 0;
    return bytes_.size() > kMaxLine ? Next::kTooLong : Next::kMore;
  }
  line.assign(bytes_, start_, nl - start_);
  start_ = nl + 1;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return Next::kLine;
}

Status check_handshake(std::string_view line) {
  if (line == kHandshake) return Status::Ok();
  return Status::InvalidArgument(
      "external worker's first line is '" + cases::printable_line(line, 80) + "', expected '" +
      std::string(kHandshake) +
      "' (--serve runs a program that speaks docs/external.md; --cmd runs one per call)");
}

StatusOr<Answer> parse_answer(std::string_view line) {
  const size_t space = line.find(' ');
  const std::string_view word = line.substr(0, space);
  Answer a;
  if (space != std::string_view::npos)
    a.reason = cases::printable_line(line.substr(space + 1), 300);
  if (line == "ok") return a;
  if (word == "error" || word == "unsupported") {
    a.kind = word == "error" ? Answer::Kind::kError : Answer::Kind::kUnsupported;
    return a;
  }
  return Status::InvalidArgument("'" + cases::printable_line(line, 80) +
                                 "', expected ok, error <reason> or unsupported <reason>");
}

}  // namespace deltacheck::backends::serve
