// The HTTP Date header (RFC 7231, section 7.1.1.1) and the clock skew it shows (issue 28, part 3):
// every response of an API server carries the server's time in IMF-fixdate, e.g.
// "Sun, 06 Nov 1994 08:49:37 GMT". The header has a resolution of one second (the server
// truncates), so a skew measured from it is only known to within about a second. Pure logic.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace extsvc::core {

// Seconds since the Unix epoch of an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT": day name,
// two-digit day, month name, four-digit year, hh:mm:ss, "GMT"; surrounding spaces and tabs are
// ignored). nullopt for anything else: the obsolete RFC 850 and asctime forms, a day name that
// does not match the date, a field out of range (Feb 30, 24:00:00, second 60).
std::optional<int64_t> parse_imf_fixdate(std::string_view text);

// IMF-fixdate of a time in seconds since the Unix epoch (the inverse of parse_imf_fixdate).
std::string format_imf_fixdate(int64_t unix_seconds);

// The server's clock minus ours, in seconds, from a Date header (server_date, whole seconds) and
// the local time the response's headers arrived (received_at, seconds since the Unix epoch). The
// server truncated its time to the second when it wrote the header, so its clock read somewhere
// in [server_date, server_date + 1) at that moment: the midpoint is taken, which leaves half a
// second of uncertainty plus the one-way network delay (the header was written before it
// arrived: a delay makes the server look behind).
double clock_skew_seconds(int64_t server_date, double received_at);

// The uncertainty of clock_skew_seconds on a local network: half the Date header's second, plus
// a margin for the network delay and scheduling. A skew within it is "not measurable".
inline constexpr double kClockSkewResolutionSeconds = 1.0;

}  // namespace extsvc::core
