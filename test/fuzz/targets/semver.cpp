// SemVer check, differentially against the regular expression published on
// semver.org (with Helm's optional "v" prefix and the 256-byte bound).
#include "core/semver.hpp"

#include <regex>
#include <string>

#include "fuzz_check.hpp"
#include "fuzz_targets.hpp"

namespace extsvc::fuzz {

int semver(const std::uint8_t* data, std::size_t size) {
  // Beyond the bound the answer is always "no"; keep std::regex inputs short.
  if (size > 300) return 0;
  static const std::regex kSemverOrg(
      R"(v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*))"
      R"((?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?)"
      R"((?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?)",
      std::regex::ECMAScript | std::regex::optimize);
  const std::string text(as_text(data, size));
  const bool got = core::is_exact_semver(text);
  const bool want = size >= 1 && size <= 256 && std::regex_match(text, kSemverOrg);
  FUZZ_CHECK(got == want);
  return 0;
}

}  // namespace extsvc::fuzz
