#include "core/utf8.hpp"

#include <gtest/gtest.h>

namespace extsvc::core {
namespace {

TEST(Utf8, AcceptsWellFormed) {
  EXPECT_FALSE(first_invalid_utf8(""));
  EXPECT_FALSE(first_invalid_utf8("plain ascii"));
  EXPECT_FALSE(first_invalid_utf8("\xC3\xA9"));          // é
  EXPECT_FALSE(first_invalid_utf8("\xE2\x82\xAC"));      // €
  EXPECT_FALSE(first_invalid_utf8("\xED\x9F\xBF"));      // U+D7FF, last before surrogates
  EXPECT_FALSE(first_invalid_utf8("\xEE\x80\x80"));      // U+E000, first after
  EXPECT_FALSE(first_invalid_utf8("\xF0\x9F\x98\x80"));  // 😀
  EXPECT_FALSE(first_invalid_utf8("\xF4\x8F\xBF\xBF"));  // U+10FFFF
}

TEST(Utf8, RefusesMalformed) {
  EXPECT_EQ(first_invalid_utf8("ab\xC0\xAF"), 2u);        // overlong '/'
  EXPECT_EQ(first_invalid_utf8("\xE0\x80\xAF"), 0u);      // overlong 3-byte
  EXPECT_EQ(first_invalid_utf8("\xF0\x80\x80\xAF"), 0u);  // overlong 4-byte
  EXPECT_EQ(first_invalid_utf8("x\xED\xA0\x80"), 1u);     // surrogate U+D800
  EXPECT_EQ(first_invalid_utf8("\xED\xBF\xBF"), 0u);      // surrogate U+DFFF
  EXPECT_EQ(first_invalid_utf8("\xF4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(first_invalid_utf8("\xF5\x80\x80\x80"), 0u);
  EXPECT_EQ(first_invalid_utf8("abc\xE2\x82"), 3u);  // truncated
  EXPECT_EQ(first_invalid_utf8("\xC3"), 0u);
  EXPECT_EQ(first_invalid_utf8("\x80"), 0u);  // lone continuation
  EXPECT_EQ(first_invalid_utf8("\xFF"), 0u);
  EXPECT_EQ(first_invalid_utf8("\xE2\x28\xA1"), 0u);  // bad continuation
}

TEST(Utf8, PrefixCutsOnlyBetweenCharacters) {
  EXPECT_EQ(utf8_prefix("abc", 5), "abc");
  EXPECT_EQ(utf8_prefix("abc", 2), "ab");
  const std::string s = "a\xC3\xA9\xE2\x82\xAC";  // "aé€": 1 + 2 + 3 bytes
  EXPECT_EQ(utf8_prefix(s, 2), "a");              // not half of é
  EXPECT_EQ(utf8_prefix(s, 3), "a\xC3\xA9");
  EXPECT_EQ(utf8_prefix(s, 5), "a\xC3\xA9");  // not two thirds of €
  EXPECT_EQ(utf8_prefix(s, 6), s);
  EXPECT_EQ(utf8_prefix(s, 0), "");
  for (size_t n = 0; n <= s.size(); ++n)
    EXPECT_FALSE(first_invalid_utf8(utf8_prefix(s, n)).has_value()) << n;
}

}  // namespace
}  // namespace extsvc::core
