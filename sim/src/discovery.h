// Legacy (application/json) discovery documents: /api, /apis, /apis/<g>, /apis/<g>/<v>, /api/v1,
// /version.
#pragma once

#include <optional>
#include <string>

#include "resources.h"

namespace dpfsim {

// Returns the JSON text for a discovery path of the cluster, or nullopt if the path is not a
// discovery path. server_address is "host:port" used in serverAddressByClientCIDRs.
std::optional<std::string> discovery_document(ClusterId c, const std::string& path,
                                              const std::string& server_address);

}  // namespace dpfsim
