#include "core/drift_key.hpp"

#include <openssl/evp.h>

#include <array>
#include <memory>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "core/identity.hpp"
#include "core/site.hpp"

namespace extsvc::core {

namespace {

using nlohmann::json;

const json* lookup(const json& root, std::initializer_list<const char*> path) {
  const json* cur = &root;
  for (const char* k : path) {
    if (!cur->is_object()) return nullptr;
    const auto it = cur->find(k);
    if (it == cur->end() || it->is_null()) return nullptr;
    cur = &*it;
  }
  return cur;
}

// Object members that are null are absent for a merge patch; arrays are compared whole.
json without_nulls(const json& v) {
  if (!v.is_object()) return v;
  json out = json::object();
  for (const auto& [k, x] : v.items())
    if (!x.is_null()) out[k] = without_nulls(x);
  return out;
}

}  // namespace

std::string sha256_bytes(const std::string& text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), text.data(), text.size()) != 1 ||
      EVP_DigestFinal_ex(ctx.get(), digest, &len) != 1)
    throw std::runtime_error("SHA-256 computation failed");
  return std::string(reinterpret_cast<const char*>(digest), len);
}

json dpuservice_drift_projection(const json& obj) {
  json p = json::object();
  json& id = p["identity"];
  id = json::object();
  auto copy = [&](const char* name, std::initializer_list<const char*> path) {
    if (const json* v = lookup(obj, path)) id[name] = *v;
  };
  copy("owner", {"metadata", "labels", kOwnerIdLabel.data()});
  copy("version", {"metadata", "labels", kOwnerVersionLabel.data()});
  copy("site", {"metadata", "labels", kSiteLabel.data()});
  copy("name", {"metadata", "name"});
  copy("namespace", {"metadata", "namespace"});
  copy("deployInCluster", {"spec", "deployInCluster"});
  copy("releaseName", {"spec", "helmChart", "source", "releaseName"});
  copy("nodeSelector", {"spec", "serviceDaemonSet", "nodeSelector"});
  for (const char* field : {"serviceID", "interfaces", "configPorts", "dpuClusterSelector"})
    if (lookup(obj, {"spec", field}) != nullptr) id[std::string("has_") + field] = true;

  json& owned = p["owned"];
  owned = json::object();
  static const std::array<std::array<const char*, 4>, 10> kOwned = {{
      {"spec", "helmChart", "source", "repoURL"},
      {"spec", "helmChart", "source", "chart"},
      {"spec", "helmChart", "source", "version"},
      {"spec", "helmChart", "values", nullptr},
      {"spec", "security", "privileged", nullptr},
      {"spec", "security", "spiffe", nullptr},
      {"spec", "serviceDaemonSet", "labels", nullptr},
      {"spec", "serviceDaemonSet", "annotations", nullptr},
      {"spec", "serviceDaemonSet", "resources", nullptr},
      {"spec", "serviceDaemonSet", "updateStrategy", nullptr},
  }};
  for (const auto& path : kOwned) {
    const json* cur = &obj;
    std::string key;
    for (const char* k : path) {
      if (k == nullptr) break;
      if (!key.empty()) key += '.';
      key += k;
      if (cur == nullptr || !cur->is_object()) {
        cur = nullptr;
        continue;
      }
      auto it = cur->find(k);
      cur = (it == cur->end() || it->is_null()) ? nullptr : &*it;
    }
    if (cur == nullptr) continue;
    if (key == "spec.serviceDaemonSet.labels" && cur->is_object()) {
      // DPF's keys are DPF's: never compared. With only DPF's keys left the field counts as
      // absent (the patch would null none of ours).
      bool dpf_keys = false;
      json ours = json::object();
      for (const auto& [k, v] : cur->items()) {
        if (std::string_view(k).starts_with(kDpfOwnedKeyPrefix))
          dpf_keys = true;
        else
          ours[k] = v;
      }
      if (dpf_keys && ours.empty()) continue;
      if (dpf_keys) {
        owned[key] = without_nulls(ours);
        continue;
      }
    }
    owned[key] = without_nulls(*cur);
  }
  return p;
}

std::string drift_key_of_projection(const json& projection) {
  return sha256_bytes(projection.dump());
}

std::string dpuservice_drift_key(const json& obj) {
  return drift_key_of_projection(dpuservice_drift_projection(obj));
}

}  // namespace extsvc::core
