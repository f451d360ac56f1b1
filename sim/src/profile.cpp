#include "profile.h"

#include "lease.h"

// GCC reports a false maybe-uninitialized inside nlohmann::json iterators for the nested
// initializer lists below.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <atomic>
#include <map>
#include <stdexcept>

namespace dpfsim {

namespace {

// ---- Schema pieces (structural subset of the CRDs; descriptions dropped) ----

json conditions_schema() {
  return json::parse(R"({"type":"array","items":{"type":"object",
    "required":["lastTransitionTime","message","reason","status","type"],
    "properties":{"lastTransitionTime":{"type":"string","format":"date-time"},
      "message":{"type":"string","maxLength":32768},
      "observedGeneration":{"type":"integer","format":"int64","minimum":0},
      "reason":{"type":"string","maxLength":1024,"minLength":1},
      "status":{"type":"string","enum":["True","False","Unknown"]},
      "type":{"type":"string","maxLength":316}}}})");
}

json node_selector_requirement() {
  return json::parse(R"({"type":"object","required":["key","operator"],
    "properties":{"key":{"type":"string"},"operator":{"type":"string"},
      "values":{"type":"array","items":{"type":"string"},"x-kubernetes-list-type":"atomic"}}})");
}

json node_selector_schema() {
  json term = {{"type", "object"},
               {"x-kubernetes-map-type", "atomic"},
               {"properties",
                {{"matchExpressions",
                  {{"type", "array"},
                   {"items", node_selector_requirement()},
                   {"x-kubernetes-list-type", "atomic"}}},
                 {"matchFields",
                  {{"type", "array"},
                   {"items", node_selector_requirement()},
                   {"x-kubernetes-list-type", "atomic"}}}}}};
  return {{"type", "object"},
          {"required", {"nodeSelectorTerms"}},
          {"x-kubernetes-map-type", "atomic"},
          {"properties",
           {{"nodeSelectorTerms",
             {{"type", "array"}, {"items", term}, {"x-kubernetes-list-type", "atomic"}}}}}};
}

json int_or_string() {
  return json::parse(
      R"({"anyOf":[{"type":"integer"},{"type":"string"}],"x-kubernetes-int-or-string":true})");
}

json update_strategy_schema() {
  return {
      {"type", "object"},
      {"properties",
       {{"rollingUpdate",
         {{"type", "object"},
          {"properties", {{"maxSurge", int_or_string()}, {"maxUnavailable", int_or_string()}}}}},
        {"type", {{"type", "string"}}}}}};
}

json string_map_schema() {
  return {{"type", "object"}, {"additionalProperties", {{"type", "string"}}}};
}

json helm_chart_schema() {
  return json::parse(R"({"type":"object","required":["source"],"properties":{
    "source":{"type":"object","required":["repoURL","version"],"properties":{
      "chart":{"type":"string"},"path":{"type":"string"},"releaseName":{"type":"string"},
      "repoURL":{"type":"string","pattern":"^(oci://|https://).+$"},
      "version":{"type":"string","minLength":1}}},
    "values":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}})");
}

json object_root(json spec, json status, bool name_cel) {
  json root = {{"type", "object"},
               {"properties",
                {{"apiVersion", {{"type", "string"}}},
                 {"kind", {{"type", "string"}}},
                 {"metadata", {{"type", "object"}}},
                 {"spec", std::move(spec)},
                 {"status", std::move(status)}}}};
  if (name_cel)
    root["x-kubernetes-validations"] =
        json::array({{{"message", "name length can't be bigger than 63 chars"},
                      {"rule", "self.metadata.name.size() <= 63"}}});
  return root;
}

// DPUService, v24.10: config/dpuservice/crd/bases/svc.dpu.nvidia.com_dpuservices.yaml @1f6a80c
// (branch release-v24.10).
json dpuservice_v2410() {
  json sds = {{"type", "object"},
              {"properties",
               {{"annotations", string_map_schema()},
                {"labels", string_map_schema()},
                {"nodeSelector", node_selector_schema()},
                {"updateStrategy", update_strategy_schema()}}}};
  json spec = {
      {"type", "object"},
      {"required", {"helmChart"}},
      {"properties",
       {{"deployInCluster", {{"type", "boolean"}}},
        {"helmChart", helm_chart_schema()},
        {"interfaces",
         {{"type", "array"}, {"items", {{"type", "string"}}}, {"minItems", 1}, {"maxItems", 50}}},
        {"paused", {{"type", "boolean"}}},
        {"serviceDaemonSet", sds},
        {"serviceID", {{"type", "string"}}}}}};
  json status = {{"type", "object"},
                 {"properties",
                  {{"conditions", conditions_schema()},
                   {"observedGeneration", {{"type", "integer"}, {"format", "int64"}}}}}};
  return object_root(spec, status, false);
}

// DPUService, newest: config/dpuservice/crd/bases/svc.dpu.nvidia.com_dpuservices.yaml @887803ca.
json dpuservice_newest() {
  json root = dpuservice_v2410();
  json& p = root["properties"]["spec"]["properties"];
  json port = json::parse(R"({"type":"object","required":["name","port","protocol"],"properties":{
    "name":{"type":"string","minLength":1,"pattern":"^[a-z0-9-]+$"},
    "nodePort":{"type":"integer"},"port":{"type":"integer"},
    "protocol":{"type":"string","enum":["TCP","UDP"]}}})");
  p["configPorts"] = {{"type", "object"},
                      {"required", {"ports", "serviceType"}},
                      {"properties",
                       {{"ports", {{"type", "array"}, {"items", port}}},
                        {"serviceType",
                         {{"type", "string"},
                          {"default", "NodePort"},
                          {"enum", {"NodePort", "ClusterIP", "None"}}}}}}};
  p["dpuClusterSelector"] = json::parse(R"({"type":"object","x-kubernetes-map-type":"atomic",
    "properties":{"matchExpressions":{"type":"array","x-kubernetes-list-type":"atomic","items":{
      "type":"object","required":["key","operator"],"properties":{"key":{"type":"string"},
      "operator":{"type":"string"},"values":{"type":"array","items":{"type":"string"},
      "x-kubernetes-list-type":"atomic"}}}},
      "matchLabels":{"type":"object","additionalProperties":{"type":"string"}}}})");
  // security.privileged: CRD @887803ca. security.spiffe (presence-gated, no sub-fields): release
  // notes v26.8.0 (@0f5822c0) and docs/public/advanced-configuration/spiffe-identity.md
  // (@04263add); no CRD version with it was found, so its schema is the documented shape.
  p["security"] = {{"type", "object"},
                   {"properties",
                    {{"privileged", {{"type", "boolean"}}},
                     {"spiffe", {{"type", "object"}, {"properties", json::object()}}}}}};
  json res = int_or_string();
  res["pattern"] =
      "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+("
      "\\.[0-9]*)?)|(\\.[0-9]+))))?$";
  p["serviceDaemonSet"]["properties"]["resources"] = {{"type", "object"},
                                                      {"additionalProperties", res}};
  json& st = root["properties"]["status"]["properties"];
  st["configPorts"] = {{"type", "object"},
                       {"additionalProperties", {{"type", "array"}, {"items", port}}}};
  st["serviceID"] = {{"type", "string"}};
  root["x-kubernetes-validations"] =
      json::array({{{"message", "name length can't be bigger than 63 chars"},
                    {"rule", "self.metadata.name.size() <= 63"}}});
  return root;
}

// DPUService between v25.1 and v26.8: the same CRD file @6acfda03 has serviceDaemonSet.resources
// and configPorts, but no spec.security, dpuClusterSelector or status.serviceID (the release it
// shipped in is not pinned; v26.8's notes are the first to name spec.security).
json dpuservice_v257() {
  json root = dpuservice_newest();
  root["properties"]["spec"]["properties"].erase("security");
  root["properties"]["spec"]["properties"].erase("dpuClusterSelector");
  root["properties"]["status"]["properties"].erase("serviceID");
  return root;
}

// DPUDevice spec/status fields:
// config/provisioning/crd/bases/provisioning.dpu.nvidia.com_dpudevices.yaml
// @7b3d9367; spec.cluster (ClusterSpec nodeLabels/nodeAnnotations) as in the same CRD @03c4432d.
json dpudevice_schema(bool with_cluster) {
  json spec = json::parse(R"({"type":"object","required":["serialNumber"],"properties":{
    "bmcIp":{"type":"string","format":"ipv4"},
    "bmcPort":{"type":"integer","format":"int32","minimum":1,"default":443},
    "numberOfPFs":{"type":"integer","minimum":1,"default":1},
    "opn":{"type":"string"},"pf0Name":{"type":"string"},"psid":{"type":"string"},
    "serialNumber":{"type":"string","minLength":1}}})");
  if (with_cluster)
    spec["properties"]["cluster"] = {
        {"type", "object"},
        {"properties",
         {{"nodeLabels", string_map_schema()}, {"nodeAnnotations", string_map_schema()}}}};
  json status = json::parse(R"({"type":"object","properties":{
    "bmcIp":{"type":"string"},"bmcPort":{"type":"integer"},
    "dpuMode":{"type":"string"},"dpuType":{"type":"string"},"opn":{"type":"string"},
    "observedGeneration":{"type":"integer","format":"int64"},
    "pciAddress":{"type":"string"},"pf0Mac":{"type":"string"},"pf0Name":{"type":"string"},
    "psid":{"type":"string"},"secureBoot":{"type":"object","properties":{"enabled":{"type":"boolean"}}},
    "serialNumber":{"type":"string"}}})");
  status["properties"]["conditions"] = conditions_schema();
  return object_root(spec, status, true);
}

std::map<std::string, Profile> build_profiles() {
  std::map<std::string, Profile> m;
  Profile old;
  old.name = "v24.10";
  old.dpuservice_schema = dpuservice_v2410();
  old.dpudevice_schema = dpudevice_schema(false);
  old.inject_service_label_always = false;
  old.persist_service_label_in_spec = false;
  old.status_service_id = false;
  old.name_length_cel = false;
  old.privileged_cel = false;
  old.config_ports_condition = false;
  old.serves_dpudevices = false;
  m[old.name] = old;
  // v25.7: DPUDevice auto-discovery (release notes v25.7.0), the DPUDevice CRD without
  // spec.cluster (@7b3d9367), the DPUService CRD without spec.security (@6acfda03).
  Profile mid;
  mid.name = "v25.7";
  mid.dpuservice_schema = dpuservice_v257();
  mid.dpudevice_schema = dpudevice_schema(false);
  mid.status_service_id = false;
  mid.privileged_cel = false;
  m[mid.name] = mid;
  Profile neu;
  neu.name = "v26.10";
  neu.dpuservice_schema = dpuservice_newest();
  neu.dpudevice_schema = dpudevice_schema(true);
  m[neu.name] = neu;
  return m;
}

const std::map<std::string, Profile>& profiles() {
  static const std::map<std::string, Profile> m = build_profiles();
  return m;
}

// Profiles are built once and never change; POST /profile swaps which one is active while the
// API and the controllers run (a DPF upgrade in place), so readers load the pointer atomically.
std::atomic<const Profile*> g_active{nullptr};

}  // namespace

std::vector<std::string> profile_names() {
  return {"v24.10", "v25.7", "v26.10"};
}

void set_profile(const std::string& name) {
  auto it = profiles().find(name);
  if (it == profiles().end())
    throw std::invalid_argument("unknown --dpf-version " + name +
                                " (known: v24.10, v25.7, v26.10)");
  g_active.store(&it->second);
}

const Profile& profile() {
  const Profile* p = g_active.load();
  if (p == nullptr) {
    set_profile("v26.10");
    p = g_active.load();
  }
  return *p;
}

bool served(const ResourceInfo& ri) {
  return ri.kind != "DPUDevice" || profile().serves_dpudevices;
}

const json* schema_for(const ResourceInfo& ri) {
  if (ri.kind == "DPUService") return &profile().dpuservice_schema;
  if (ri.kind == "DPUDevice") return &profile().dpudevice_schema;
  if (ri.kind == "Lease") return &lease_schema();
  return nullptr;
}

void prune_with_schema(const json& schema, json& obj, const std::string& path,
                       std::vector<std::string>* unknown) {
  if (schema.value("x-kubernetes-preserve-unknown-fields", false)) return;
  if (obj.is_object()) {
    const json* props = schema.contains("properties") ? &schema["properties"] : nullptr;
    const json* addl =
        schema.contains("additionalProperties") && schema["additionalProperties"].is_object()
            ? &schema["additionalProperties"]
            : nullptr;
    if (!props && !addl) return;  // e.g. metadata: {type: object}
    for (auto it = obj.begin(); it != obj.end();) {
      std::string child = path.empty() ? it.key() : path + "." + it.key();
      if (props && props->contains(it.key())) {
        if (path.empty() && it.key() == "metadata") {
          ++it;
          continue;
        }
        prune_with_schema((*props)[it.key()], it.value(), child, unknown);
        ++it;
      } else if (addl) {
        prune_with_schema(*addl, it.value(), child, unknown);
        ++it;
      } else {
        if (unknown) unknown->push_back(child);
        it = obj.erase(it);
      }
    }
  } else if (obj.is_array() && schema.contains("items")) {
    for (size_t i = 0; i < obj.size(); ++i)
      prune_with_schema(schema["items"], obj[i], path + "[" + std::to_string(i) + "]", unknown);
  }
}

// ---- OpenAPI ----

namespace {

json gvk_ext(const ResourceInfo& ri) {
  return json::array({{{"group", ri.group}, {"version", ri.version}, {"kind", ri.kind}}});
}

std::string def_name(const ResourceInfo& ri) {
  // Reverse-DNS like the apiserver does for CRDs: com.nvidia.dpu.svc.v1alpha1.DPUService
  if (ri.group.empty()) return "io.k8s.api.core.v1." + ri.kind;
  if (ri.group == "apps") return "io.k8s.api.apps.v1." + ri.kind;
  auto parts = split(ri.group, '.');
  std::string out;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) out += *it + ".";
  return out + ri.version + "." + ri.kind;
}

json schema_with_gvk(const ResourceInfo& ri) {
  const json* s = schema_for(ri);
  json out = s ? *s : json{{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}};
  out["x-kubernetes-group-version-kind"] = gvk_ext(ri);
  return out;
}

std::string gv_path(const ResourceInfo& ri) {
  return ri.group.empty() ? "api/" + ri.version : "apis/" + ri.group + "/" + ri.version;
}

json operation(const ResourceInfo& ri, const std::string& action, const std::string& ref,
               bool with_body, bool field_validation, bool v3) {
  json params = json::array();
  if (field_validation)
    params.push_back(
        v3 ? json{{"name", "fieldValidation"}, {"in", "query"}, {"schema", {{"type", "string"}}}}
           : json{{"name", "fieldValidation"}, {"in", "query"}, {"type", "string"}});
  params.push_back(v3 ? json{{"name", "dryRun"}, {"in", "query"}, {"schema", {{"type", "string"}}}}
                      : json{{"name", "dryRun"}, {"in", "query"}, {"type", "string"}});
  json op = {{"operationId", action + ri.kind},
             {"x-kubernetes-action", action},
             {"x-kubernetes-group-version-kind",
              {{"group", ri.group}, {"version", ri.version}, {"kind", ri.kind}}},
             {"parameters", params}};
  json sref = {{"$ref", ref}};
  if (v3) {
    if (with_body) {
      json content = json::object();
      std::vector<std::string> cts = {"application/json"};
      if (action == "patch") {
        cts = {"application/json-patch+json", "application/merge-patch+json"};
        if (!ri.custom) cts.push_back("application/strategic-merge-patch+json");
      }
      for (const auto& ct : cts)
        content[ct] = {{"schema", action == "patch" ? json{{"type", "object"}} : sref}};
      op["requestBody"] = {{"content", content}, {"required", true}};
    }
    op["responses"] = {
        {"200", {{"description", "OK"}, {"content", {{"application/json", {{"schema", sref}}}}}}}};
  } else {
    if (with_body)
      op["parameters"].push_back(
          {{"name", "body"}, {"in", "body"}, {"required", true}, {"schema", sref}});
    op["responses"] = {{"200", {{"description", "OK"}, {"schema", sref}}}};
  }
  return op;
}

json paths_for(const ResourceInfo& ri, bool v3) {
  std::string ref = v3 ? "#/components/schemas/" + def_name(ri) : "#/definitions/" + def_name(ri);
  std::string base =
      "/" + gv_path(ri) + (ri.namespaced ? "/namespaces/{namespace}/" : "/") + ri.plural;
  json coll = {{"get", operation(ri, "list", ref, false, false, v3)},
               {"post", operation(ri, "post", ref, true, true, v3)}};
  json item = {{"get", operation(ri, "get", ref, false, false, v3)},
               {"put", operation(ri, "put", ref, true, true, v3)},
               {"patch", operation(ri, "patch", ref, true, true, v3)},
               {"delete", operation(ri, "delete", ref, false, false, v3)}};
  json out = json::object();
  out[base] = coll;
  out[base + "/{name}"] = item;
  return out;
}

}  // namespace

std::string openapi_v2(ClusterId c) {
  json doc = {{"swagger", "2.0"},
              {"info", {{"title", "Kubernetes"}, {"version", "v1.31.0"}}},
              {"paths", json::object()},
              {"definitions", json::object()}};
  for (const auto& ri : all_resources()) {
    if (ri.cluster != c || !served(ri)) continue;
    doc["definitions"][def_name(ri)] = schema_with_gvk(ri);
    json paths = paths_for(ri, false);
    for (auto& [k, v] : paths.items()) doc["paths"][k] = v;
  }
  return doc.dump();
}

std::string openapi_v3_root(ClusterId c) {
  json paths = json::object();
  for (const auto& ri : all_resources()) {
    if (ri.cluster != c || !served(ri)) continue;
    std::string p = gv_path(ri);
    paths[p] = {{"serverRelativeURL",
                 "/openapi/v3/" + p + "?hash=" + sha256_hex(profile().name + p).substr(0, 16)}};
  }
  return json{{"paths", paths}}.dump();
}

std::string openapi_v3_group_version(ClusterId c, const std::string& path) {
  json doc = {{"openapi", "3.0.0"},
              {"info", {{"title", "Kubernetes"}, {"version", "v1.31.0"}}},
              {"paths", json::object()},
              {"components", {{"schemas", json::object()}}}};
  bool any = false;
  for (const auto& ri : all_resources()) {
    if (ri.cluster != c || !served(ri) || gv_path(ri) != path) continue;
    any = true;
    doc["components"]["schemas"][def_name(ri)] = schema_with_gvk(ri);
    json paths = paths_for(ri, true);
    for (auto& [k, v] : paths.items()) doc["paths"][k] = v;
  }
  return any ? doc.dump() : "";
}

}  // namespace dpfsim
