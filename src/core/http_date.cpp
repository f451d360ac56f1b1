#include "core/http_date.hpp"

#include <array>
#include <cstdio>

namespace extsvc::core {

namespace {

constexpr std::array<const char*, 7> kDays = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
constexpr std::array<const char*, 12> kMonths = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                 "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

bool is_leap(int64_t y) {
  return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

int days_in_month(int64_t y, int m) {  // m: 1..12
  static constexpr std::array<int, 12> kLen = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && is_leap(y) ? 29 : kLen[static_cast<size_t>(m - 1)];
}

// Days since 1970-01-01 of a civil date (Howard Hinnant's days_from_civil).
int64_t days_from_civil(int64_t y, int m, int d) {
  y -= m <= 2 ? 1 : 0;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

std::optional<int> digits(std::string_view s) {
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

std::optional<int64_t> parse_imf_fixdate(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  // "Sun, 06 Nov 1994 08:49:37 GMT": exactly 29 characters
  if (text.size() != 29) return std::nullopt;
  if (text.substr(3, 2) != ", " || text[7] != ' ' || text[11] != ' ' || text[16] != ' ' ||
      text[19] != ':' || text[22] != ':' || text.substr(25) != " GMT")
    return std::nullopt;
  int wday = -1;
  for (size_t i = 0; i < kDays.size(); ++i)
    if (text.substr(0, 3) == kDays[i]) wday = static_cast<int>(i);
  int mon = 0;
  for (size_t i = 0; i < kMonths.size(); ++i)
    if (text.substr(8, 3) == kMonths[i]) mon = static_cast<int>(i) + 1;
  const auto day = digits(text.substr(5, 2));
  const auto year = digits(text.substr(12, 4));
  const auto hour = digits(text.substr(17, 2));
  const auto min = digits(text.substr(20, 2));
  const auto sec = digits(text.substr(23, 2));
  if (wday < 0 || mon == 0 || !day || !year || !hour || !min || !sec) return std::nullopt;
  if (*day < 1 || *day > days_in_month(*year, mon) || *hour > 23 || *min > 59 || *sec > 59)
    return std::nullopt;
  const int64_t days = days_from_civil(*year, mon, *day);
  // 1970-01-01 was a Thursday (4)
  const int64_t expected_wday = ((days % 7) + 7 + 4) % 7;
  if (expected_wday != wday) return std::nullopt;
  return days * 86400 + *hour * 3600 + *min * 60 + *sec;
}

std::string format_imf_fixdate(int64_t unix_seconds) {
  int64_t days = unix_seconds / 86400;
  int64_t rem = unix_seconds % 86400;
  if (rem < 0) {
    rem += 86400;
    --days;
  }
  // civil_from_days (Howard Hinnant)
  const int64_t z = days + 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const int64_t doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  const int d = static_cast<int>(doy - (153 * mp + 2) / 5 + 1);
  const int m = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
  const int64_t y = yoe + era * 400 + (m <= 2 ? 1 : 0);
  const auto wday = static_cast<size_t>(((days % 7) + 7 + 4) % 7);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s, %02d %s %04lld %02d:%02d:%02d GMT", kDays[wday], d,
                kMonths[static_cast<size_t>(m - 1)], static_cast<long long>(y),
                static_cast<int>(rem / 3600), static_cast<int>(rem % 3600 / 60),
                static_cast<int>(rem % 60));
  return buf;
}

double clock_skew_seconds(int64_t server_date, double received_at) {
  return static_cast<double>(server_date) + 0.5 - received_at;
}

}  // namespace extsvc::core
