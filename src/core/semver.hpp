#pragma once

#include <string_view>

namespace extsvc::core {

// One exact SemVer 2.0.0 version (full grammar: prerelease, build metadata,
// no leading zeros in numeric identifiers), optionally prefixed by "v" as
// Helm accepts. Ranges, wildcards and tags are not versions.
bool is_exact_semver(std::string_view version);

}  // namespace extsvc::core
