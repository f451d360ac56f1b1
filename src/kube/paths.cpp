#include <string>
#include <string_view>

#include "kube/client.hpp"

namespace extsvc::kube {

namespace {

constexpr const char* kSvcGroup = "/apis/svc.dpu.nvidia.com/v1alpha1";
constexpr const char* kProvisioningGroup = "/apis/provisioning.dpu.nvidia.com/v1alpha1";
constexpr const char* kAppsGroup = "/apis/apps/v1";
constexpr const char* kCoreGroup = "/api/v1";
constexpr const char* kArgoGroup = "/apis/argoproj.io/v1alpha1";

// <prefix>[/namespaces/<ns>]/<resource>[/<name>]
std::string resource_path(const char* prefix, const std::string& ns, const char* resource,
                          const std::string& name) {
  std::string p = prefix;
  if (!ns.empty()) {
    p += "/namespaces/";
    p += url_encode(ns);
  }
  p += '/';
  p += resource;
  if (!name.empty()) {
    p += '/';
    p += url_encode(name);
  }
  return p;
}

}  // namespace

std::string url_encode(std::string_view s) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() * 3);
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0x0F];
    }
  }
  return out;
}

std::string dpuservices_path(const std::string& ns, const std::string& name) {
  return resource_path(kSvcGroup, ns, "dpuservices", name);
}

std::string applications_path(const std::string& ns, const std::string& name) {
  return resource_path(kArgoGroup, ns, "applications", name);
}

std::string dpudevices_path(const std::string& ns, const std::string& name) {
  return resource_path(kProvisioningGroup, ns, "dpudevices", name);
}

std::string dpus_path(const std::string& ns, const std::string& name) {
  return resource_path(kProvisioningGroup, ns, "dpus", name);
}

std::string nodes_path(const std::string& name) {
  return resource_path(kCoreGroup, "", "nodes", name);
}

std::string pods_path(const std::string& ns) {
  return resource_path(kCoreGroup, ns, "pods", "");
}

std::string daemonsets_path(const std::string& ns, const std::string& name) {
  return resource_path(kAppsGroup, ns, "daemonsets", name);
}

std::string events_path(const std::string& ns) {
  return resource_path(kCoreGroup, ns, "events", "");
}

std::string controllerrevisions_path(const std::string& ns) {
  return resource_path(kAppsGroup, ns, "controllerrevisions", "");
}

}  // namespace extsvc::kube
