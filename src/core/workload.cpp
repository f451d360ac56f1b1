#include "core/workload.hpp"

#include "core/ascii.hpp"
#include "core/identity.hpp"
#include "core/json_access.hpp"

namespace extsvc::core {

namespace {

using nlohmann::json;

// "...-extsvc-<hash>" or "extsvc-<hash>" at the end of an application name.
std::string ours_at_end(const std::string& app) {
  const size_t len = kNamePrefix.size() + kIdentityHashLength;
  if (app.size() < len) return {};
  const size_t pos = app.size() - len;
  if (pos > 0 && app[pos - 1] != '-') return {};
  const std::string name = app.substr(pos);
  if (name.compare(0, kNamePrefix.size(), kNamePrefix) != 0) return {};
  for (size_t i = kNamePrefix.size(); i < name.size(); ++i)
    if (!is_lower_alnum(name[i])) return {};
  return name;
}

}  // namespace

std::string tracked_dpuservice(const json& object) {
  const json& id = json_at(object, {"metadata", "annotations", kArgoTrackingAnnotation});
  if (id.is_string()) {
    const std::string& text = id.get_ref<const std::string&>();
    const size_t colon = text.find(':');
    if (colon != std::string::npos) return ours_at_end(text.substr(0, colon));
  }
  // Argo CD's label tracking (the 2.x default) writes the application name here instead
  const json& instance = json_at(object, {"metadata", "labels", "app.kubernetes.io/instance"});
  if (instance.is_string()) return ours_at_end(instance.get<std::string>());
  return {};
}

std::string daemonset_owner_uid(const json& object) {
  for (const auto& ref : json_at(object, {"metadata", "ownerReferences"}))
    if (json_at(ref, {"controller"}) == json(true) && json_text_at(ref, {"kind"}) == "DaemonSet")
      return json_text_at(ref, {"uid"});
  return {};
}

}  // namespace extsvc::core
