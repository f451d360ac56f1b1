// The precompiled header shared by every C++ target outside src/pg
// (cmake/extsvc_targets.cmake): the headers that dominate compile time.
// Sources still include what they use; this only makes it cheap.
#pragma once

#include <spdlog/spdlog.h>

#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>
#include <variant>
