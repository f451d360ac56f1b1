#include "core/http_date.hpp"

#include <gtest/gtest.h>

namespace extsvc::core {
namespace {

TEST(HttpDate, ParsesImfFixdate) {
  // RFC 7231's example
  EXPECT_EQ(parse_imf_fixdate("Sun, 06 Nov 1994 08:49:37 GMT"), 784111777);
  EXPECT_EQ(parse_imf_fixdate("Thu, 01 Jan 1970 00:00:00 GMT"), 0);
  EXPECT_EQ(parse_imf_fixdate(" \tSun, 06 Nov 1994 08:49:37 GMT \t"), 784111777);
  // a leap day, the end of a year, after 2038
  EXPECT_EQ(parse_imf_fixdate("Thu, 29 Feb 2024 12:00:00 GMT"), 1709208000);
  EXPECT_EQ(parse_imf_fixdate("Thu, 31 Dec 2026 23:59:59 GMT"), 1798761599);
  EXPECT_EQ(parse_imf_fixdate("Sun, 07 Feb 2106 06:28:16 GMT"), 4294967296LL);
}

TEST(HttpDate, RefusesWhatIsNotImfFixdate) {
  EXPECT_FALSE(parse_imf_fixdate(""));
  EXPECT_FALSE(parse_imf_fixdate("Sunday, 06-Nov-94 08:49:37 GMT"));  // RFC 850 (obsolete)
  EXPECT_FALSE(parse_imf_fixdate("Sun Nov  6 08:49:37 1994"));        // asctime (obsolete)
  EXPECT_FALSE(parse_imf_fixdate("Sun, 06 Nov 1994 08:49:37 UTC"));
  EXPECT_FALSE(parse_imf_fixdate("Sun, 06 Nov 1994 08:49:37 +0000"));
  EXPECT_FALSE(parse_imf_fixdate("Sun, 6 Nov 1994 08:49:37 GMT"));
  EXPECT_FALSE(parse_imf_fixdate("sun, 06 Nov 1994 08:49:37 GMT"));
  EXPECT_FALSE(parse_imf_fixdate("Mon, 06 Nov 1994 08:49:37 GMT"));  // wrong day name
  EXPECT_FALSE(parse_imf_fixdate("Sun, 06 Nox 1994 08:49:37 GMT"));
  EXPECT_FALSE(parse_imf_fixdate("Fri, 30 Feb 2024 08:49:37 GMT"));  // no such day
  EXPECT_FALSE(parse_imf_fixdate("Thu, 29 Feb 2024 24:00:00 GMT"));
  EXPECT_FALSE(parse_imf_fixdate("Thu, 29 Feb 2024 23:60:00 GMT"));
  EXPECT_FALSE(parse_imf_fixdate("Thu, 29 Feb 2024 23:59:60 GMT"));
  EXPECT_FALSE(parse_imf_fixdate("Sun, 06 Nov 1994 08:49:3x GMT"));
  EXPECT_FALSE(parse_imf_fixdate("Sun, 06 Nov 1994 08:49:37 GMT junk"));
}

TEST(HttpDate, FormatIsTheInverse) {
  EXPECT_EQ(format_imf_fixdate(784111777), "Sun, 06 Nov 1994 08:49:37 GMT");
  EXPECT_EQ(format_imf_fixdate(0), "Thu, 01 Jan 1970 00:00:00 GMT");
  for (int64_t t = 0; t < 5000000000LL; t += 86399 * 37 + 13) {
    const auto back = parse_imf_fixdate(format_imf_fixdate(t));
    ASSERT_TRUE(back.has_value()) << format_imf_fixdate(t);
    ASSERT_EQ(*back, t);
  }
}

TEST(HttpDate, SkewTakesTheMiddleOfTheDateSecond) {
  // the server wrote 08:49:37 (its clock between .0 and .999): received at 08:49:37.5 locally
  EXPECT_DOUBLE_EQ(clock_skew_seconds(784111777, 784111777.5), 0.0);
  // a server 30 s ahead, one 30 s behind
  EXPECT_DOUBLE_EQ(clock_skew_seconds(784111807, 784111777.5), 30.0);
  EXPECT_DOUBLE_EQ(clock_skew_seconds(784111747, 784111777.5), -30.0);
  // in sync, whatever the fraction of our second: within the resolution
  for (double frac : {0.0, 0.25, 0.999})
    EXPECT_LE(std::abs(clock_skew_seconds(784111777, 784111777 + frac)),
              kClockSkewResolutionSeconds);
}

}  // namespace
}  // namespace extsvc::core
