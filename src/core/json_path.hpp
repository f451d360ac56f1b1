#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace extsvc::core {

// JSONPath-style member access: `.name` for identifier-like keys, otherwise
// `["key"]` with JSON string escaping, so paths stay unambiguous for keys such
// as "app/x" or "a.b".
// Keys longer than kMaxPathKeyBytes are shortened to a prefix and marked
// `["prefix"...]`, so a path never quotes more than a short piece of a key.
inline constexpr std::size_t kMaxPathKeyBytes = 64;
std::string json_path_member(std::string_view parent, std::string_view key);
std::string json_path_index(std::string_view parent, std::size_t index);

}  // namespace extsvc::core
