// Helpers of the Store shared by its locked half (store.cpp) and its API operations
// (store_api.cpp). Internal to the simulator's store.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dpfsim::store_detail {

using json = nlohmann::json;

int64_t wall_ms();

std::vector<std::string> finalizers_of(const json& obj);

bool is_terminating(const json& obj);

// Removes strategic-merge directives ($patch, $setElementOrder/..., $retainKeys, ...).
void strip_directives(json& j);

json parse_body(const std::string& body);

}  // namespace dpfsim::store_detail
