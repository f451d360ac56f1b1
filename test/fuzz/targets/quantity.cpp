// Kubernetes quantity check, differentially against a regular expression of
// the apimachinery ParseQuantity grammar (non-negative, at most 64 bytes).
#include <regex>
#include <string>

#include "core/kube_quantity.hpp"
#include "fuzz_check.hpp"
#include "fuzz_targets.hpp"

namespace extsvc::fuzz {

int quantity(const std::uint8_t* data, std::size_t size) {
  if (size > 100) return 0;
  static const std::regex kGrammar(R"(\+?(?:[0-9]+|[0-9]+\.[0-9]*|\.[0-9]+))"
                                   R"((?:Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?)",
                                   std::regex::ECMAScript | std::regex::optimize);
  const std::string text(as_text(data, size));
  const bool got = core::is_nonnegative_quantity(text);
  const bool want = size >= 1 && size <= 64 && std::regex_match(text, kGrammar);
  FUZZ_CHECK(got == want);
  return 0;
}

}  // namespace extsvc::fuzz
