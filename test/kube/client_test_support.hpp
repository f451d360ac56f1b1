// Helpers shared by the client_*_test.cpp files, which run the Client against a real local
// HTTP server.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "kube/client.hpp"
#include "test_support.hpp"

namespace extsvc::kube::test {

using Clock = std::chrono::steady_clock;

inline std::string status_body(int code, const std::string& reason, const std::string& message,
                               nlohmann::json details = nullptr) {
  nlohmann::json j = {
      {"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", nlohmann::json::object()},
      {"status", "Failure"}, {"message", message}, {"reason", reason}};
  if (!details.is_null()) j["details"] = details;
  j["code"] = code;
  return j.dump();
}

inline ClusterConfig http_config(const TestServer& s) {
  ClusterConfig c;
  c.server = s.url();
  c.qps = 0;  // no throttling unless a test wants it
  c.connect_timeout_ms = 2000;
  c.timeout_ms = 5000;
  c.allow_insecure_http = true;  // the plain-HTTP test server receives test tokens
  return c;
}

inline double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

}  // namespace extsvc::kube::test
