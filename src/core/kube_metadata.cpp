#include "core/kube_metadata.hpp"

#include "core/ascii.hpp"

namespace extsvc::core {
namespace {

bool is_name_part(std::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  if (!is_ascii_alnum(s.front()) || !is_ascii_alnum(s.back())) return false;
  for (char c : s)
    if (!is_ascii_alnum(c) && c != '-' && c != '_' && c != '.') return false;
  return true;
}

}  // namespace

bool is_dns1123_subdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  std::size_t start = 0;
  while (true) {
    const auto dot = s.find('.', start);
    const auto label = s.substr(start, dot == std::string_view::npos ? s.npos : dot - start);
    if (label.empty() || !is_lower_alnum(label.front()) || !is_lower_alnum(label.back()))
      return false;
    for (char c : label)
      if (!is_lower_alnum(c) && c != '-') return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

bool is_qualified_name(std::string_view s) {
  const auto slash = s.find('/');
  if (slash == std::string_view::npos) return is_name_part(s);
  return is_dns1123_subdomain(s.substr(0, slash)) && is_name_part(s.substr(slash + 1));
}

bool is_label_value(std::string_view s) {
  return s.empty() || is_name_part(s);
}

bool is_reserved_metadata_key(std::string_view key) {
  const auto slash = key.find('/');
  if (slash == std::string_view::npos) return false;
  const auto prefix = key.substr(0, slash);
  return prefix == "nico" || prefix == "svc.dpu.nvidia.com";
}

}  // namespace extsvc::core
