// Outside text made safe (cases/safe_text.h): invalid UTF-8 replaced, control characters
// escaped, valid text of any script kept as it is.
#include <gtest/gtest.h>

#include "cases/safe_text.h"

namespace deltacheck::cases {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(SafeText, InvalidUtf8BecomesTheReplacementCharacter) {
  EXPECT_EQ(valid_utf8("caf\xE9"), "caf" + kFffd);                           // Latin-1 byte
  EXPECT_EQ(valid_utf8("\xC0\xAF"), kFffd + kFffd);                          // overlong '/'
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), kFffd + kFffd + kFffd);              // a surrogate
  EXPECT_EQ(valid_utf8("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // > U+10FFFF
  EXPECT_EQ(valid_utf8("\xE2\x82"), kFffd + kFffd);                          // cut short
  EXPECT_EQ(valid_utf8("a\nb"), "a\nb");  // controls stay in valid_utf8
}

TEST(SafeText, ValidTextIsKept) {
  for (const std::string s : {"plain", "caf\xC3\xA9", "\xE2\x80\x94 dash", "\xF0\x9F\x98\x80"})
    EXPECT_EQ(printable_line(s), s) << s;
}

TEST(SafeText, ControlCharactersAreEscapedOnOneLine) {
  EXPECT_EQ(printable_line("x\n\x1B[32mPASS\r"), "x\\n\\x1B[32mPASS\\r");
  EXPECT_EQ(printable_line("tab\there\x7F"), "tab\\there\\x7F");
  EXPECT_EQ(printable_line("c1 \xC2\x9B"
                           "31m"),
            "c1 \\u009B31m");  // CSI as a C1 control
  EXPECT_EQ(printable_line("caf\xE9\n"), "caf" + kFffd + "\\n");
}

TEST(SafeText, LongTextIsCut) {
  EXPECT_EQ(printable_line(std::string(10, 'a'), 4), "aaaa...");
  // Never in the middle of a character.
  EXPECT_EQ(printable_line("\xC3\xA9\xC3\xA9", 3), "\xC3\xA9\xC3\xA9");
}

}  // namespace
}  // namespace deltacheck::cases
