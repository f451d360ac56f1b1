#pragma once

#include <cstddef>
#include <string>

namespace extsvc::core {

// RFC 4648 base32 with the alphabet lowercased and no padding: the output is
// valid inside Kubernetes names and label keys as it stands.
std::string base32_lower(const unsigned char* data, std::size_t len);

}  // namespace extsvc::core
