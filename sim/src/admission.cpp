#include "admission.h"

#include "controllers/controller_manager.h"
#include "profile.h"

namespace dpfsim {

namespace {

constexpr const char* kDeniedMessage =
    "Privileged containers are not allowed for this DPUService unless security.privileged is set "
    "to true.";
constexpr const char* kDeniedInitMessage =
    "Privileged init containers are not allowed for this DPUService unless security.privileged "
    "is set to true.";
constexpr const char* kDeniedEphemeralMessage =
    "Privileged ephemeral containers are not allowed for this DPUService unless "
    "security.privileged is set to true.";

bool matched_resource(const ResourceInfo& ri) {
  if (ri.cluster != ClusterId::Dpu) return false;
  if (ri.group.empty()) return ri.plural == "pods";
  if (ri.group == "apps")
    return ri.plural == "daemonsets" || ri.plural == "deployments" || ri.plural == "replicasets" ||
           ri.plural == "statefulsets";
  if (ri.group == "batch") return ri.plural == "jobs" || ri.plural == "cronjobs";
  return false;
}

// variables.podSpec / templateLabels of the policy.
const json* pod_spec_of(const json& obj) {
  if (const json* jt = jptr(obj, {"spec", "jobTemplate", "spec", "template", "spec"})) return jt;
  if (const json* t = jptr(obj, {"spec", "template", "spec"})) return t;
  return jptr(obj, {"spec"});
}

std::string service_id_of(const json& obj) {
  std::string sid = jstr(obj, {"metadata", "labels", names::kServiceIdLabel});
  if (!sid.empty()) return sid;
  const json* tl = jptr(obj, {"spec", "jobTemplate", "spec", "template", "metadata", "labels"});
  if (tl == nullptr) tl = jptr(obj, {"spec", "template", "metadata", "labels"});
  return tl != nullptr ? jstr(*tl, {names::kServiceIdLabel}) : "";
}

bool any_privileged(const json* containers) {
  if (containers == nullptr || !containers->is_array()) return false;
  for (const auto& c : *containers)
    if (jbool(c, {"securityContext", "privileged"})) return true;
  return false;
}

// The allowlist ConfigMap as reconcilePrivilegedAllowlist builds it from every DPUService.
bool allowlisted(const Store& st, const std::string& sid) {
  const ResourceInfo* svc_ri = find_resource_by_plural(ClusterId::Management, "dpuservices");
  for (const ObjPtr& svc : st.list_l(*svc_ri)) {
    if (is_terminating(*svc) || dpuservice_service_id(*svc) != sid) continue;
    const json* p = jptr(*svc, {"spec", "security", "privileged"});
    // resolvePrivileged: unset falls back to privilegedDefaultForUnsetSecurity (true)
    if (p == nullptr || !p->is_boolean() || p->get<bool>()) return true;
  }
  return false;
}

}  // namespace

std::optional<ApiError> privileged_admission_l(const Store& st, bool enforce,
                                               const ResourceInfo& ri, const json& obj) {
  // The policy exists from the release that has spec.security (v26.8); Audit denies nothing.
  if (!profile().privileged_cel || !enforce || !matched_resource(ri)) return std::nullopt;
  const ResourceInfo* ns_ri = find_resource_by_plural(ClusterId::Dpu, "namespaces");
  ObjPtr ns = st.find_l(*ns_ri, "", jstr(obj, {"metadata", "namespace"}));
  if (!ns || !jptr(*ns, {"metadata", "labels", kDpuServiceNamespaceScopeLabel}))
    return std::nullopt;
  if (jptr(obj, {"metadata", "deletionTimestamp"})) return std::nullopt;
  const std::string sid = service_id_of(obj);
  if (sid.empty()) return std::nullopt;
  const json* spec = pod_spec_of(obj);
  if (spec == nullptr) return std::nullopt;
  const char* message = nullptr;
  if (any_privileged(jptr(*spec, {"containers"})))
    message = kDeniedMessage;
  else if (any_privileged(jptr(*spec, {"initContainers"})))
    message = kDeniedInitMessage;
  else if (any_privileged(jptr(*spec, {"ephemeralContainers"})))
    message = kDeniedEphemeralMessage;
  if (message == nullptr || allowlisted(st, sid)) return std::nullopt;
  const std::string name = jstr(obj, {"metadata", "name"});
  const std::string text = std::string("ValidatingAdmissionPolicy '") + kPrivilegedPolicyName +
                           "' with binding '" + kPrivilegedPolicyName +
                           "' denied request: " + message;
  ojson details;
  details["name"] = name;
  if (!ri.group.empty()) details["group"] = ri.group;
  details["kind"] = ri.plural;
  details["causes"] = ojson::array({ojson{{"message", text}}});
  return make_error(422, "Invalid",
                    ri.qualified_resource() + " \"" + name + "\" is forbidden: " + text, details);
}

}  // namespace dpfsim
