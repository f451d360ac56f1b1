// Strict JSON parser: never crashes; whatever it accepts, nlohmann accepts too
// with the same value, survives a dump/parse round trip, and a smaller depth
// limit never accepts more than the default one.
#include "core/strict_json.hpp"

#include <exception>
#include <optional>
#include <string>

#include "fuzz_check.hpp"
#include "fuzz_targets.hpp"

namespace extsvc::fuzz {

using Json = nlohmann::ordered_json;

namespace {

std::optional<Json> parse(std::string_view text, std::size_t depth) {
  try {
    return core::parse_strict_json(text, depth);
  } catch (const core::JsonSyntaxError& e) {
    FUZZ_CHECK(e.offset <= text.size());
    const std::string msg = e.what();
    // The message names the JSON path (keys escaped) but quotes no values.
    FUZZ_CHECK(!msg.empty() && msg.size() < 256 + 2 * e.path.size());
    FUZZ_CHECK(msg.find('\n') == std::string::npos);
    FUZZ_CHECK(!e.path.empty() && e.path[0] == '$');
    return std::nullopt;
  } catch (const std::exception& e) {
    fail(__FILE__, __LINE__, e.what());  // only JsonSyntaxError is documented
  }
}

}  // namespace

int strict_json(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = as_text(data, size);
  const auto value = parse(text, 64);
  if (size > 0) {
    // A small depth limit derived from the input: accepting there implies
    // accepting with the default limit, with the same value.
    const auto shallow = parse(text, data[0] % 8);
    if (shallow) FUZZ_CHECK(value && *shallow == *value);
  }
  if (!value) return 0;

  // nlohmann (lenient) agrees on the value of everything strict accepts.
  const Json lenient = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  FUZZ_CHECK(!lenient.is_discarded());
  FUZZ_CHECK(lenient == *value);

  // Valid UTF-8 was checked, so dumping with the strict error handler works,
  // and the dump parses back to the same value.
  std::string dumped;
  try {
    dumped = value->dump();
  } catch (const std::exception& e) {
    fail(__FILE__, __LINE__, e.what());
  }
  const auto again = parse(dumped, 64);
  FUZZ_CHECK(again.has_value());
  FUZZ_CHECK(*again == *value);
  return 0;
}

}  // namespace extsvc::fuzz
