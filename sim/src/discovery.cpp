#include "discovery.h"

#include <map>

#include "profile.h"
#include "util.h"

namespace dpfsim {

namespace {

ojson resource_list(ClusterId c, const std::string& group, const std::string& version) {
  ojson out;
  out["kind"] = "APIResourceList";
  out["apiVersion"] = "v1";
  out["groupVersion"] = group.empty() ? version : group + "/" + version;
  ojson arr = ojson::array();
  for (const auto& r : all_resources()) {
    if (r.cluster != c || r.group != group || r.version != version || !served(r)) continue;
    ojson e;
    e["name"] = r.plural;
    e["singularName"] = r.singular;
    e["namespaced"] = r.namespaced;
    e["kind"] = r.kind;
    e["verbs"] = ojson::array(
        {"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"});
    if (!r.short_names.empty()) e["shortNames"] = r.short_names;
    if (!r.categories.empty()) e["categories"] = r.categories;
    e["storageVersionHash"] =
        base64url_encode(sha256_hex(r.qualified_kind()).substr(0, 8)).substr(0, 11);
    arr.push_back(e);
    if (r.has_status) {
      ojson s;
      s["name"] = r.plural + "/status";
      s["singularName"] = "";
      s["namespaced"] = r.namespaced;
      s["kind"] = r.kind;
      s["verbs"] = ojson::array({"get", "patch", "update"});
      arr.push_back(s);
    }
  }
  out["resources"] = arr;
  return out;
}

std::map<std::string, std::vector<std::string>> groups_of(ClusterId c) {
  std::map<std::string, std::vector<std::string>> g;
  for (const auto& r : all_resources()) {
    if (r.cluster != c || r.group.empty()) continue;
    auto& v = g[r.group];
    bool seen = false;
    for (const auto& x : v)
      if (x == r.version) seen = true;
    if (!seen) v.push_back(r.version);
  }
  return g;
}

ojson group_doc(const std::string& name, const std::vector<std::string>& versions) {
  ojson g;
  g["name"] = name;
  ojson vs = ojson::array();
  for (const auto& v : versions)
    vs.push_back(ojson{{"groupVersion", name + "/" + v}, {"version", v}});
  g["versions"] = vs;
  g["preferredVersion"] =
      ojson{{"groupVersion", name + "/" + versions.front()}, {"version", versions.front()}};
  return g;
}

}  // namespace

std::optional<std::string> discovery_document(ClusterId c, const std::string& path,
                                              const std::string& addr) {
  if (path == "/version" || path == "/version/") {
    ojson v;
    v["major"] = "1";
    v["minor"] = "32";
    v["gitVersion"] = "v1.32.0-dpfsim";
    v["gitCommit"] = "0000000000000000000000000000000000000000";
    v["gitTreeState"] = "clean";
    v["buildDate"] = "2025-01-01T00:00:00Z";
    v["goVersion"] = "go1.23.4";
    v["compiler"] = "gc";
    v["platform"] = "linux/amd64";
    return v.dump();
  }
  if (path == "/api" || path == "/api/") {
    ojson v;
    v["kind"] = "APIVersions";
    v["versions"] = ojson::array({"v1"});
    v["serverAddressByClientCIDRs"] =
        ojson::array({ojson{{"clientCIDR", "0.0.0.0/0"}, {"serverAddress", addr}}});
    return v.dump();
  }
  if (path == "/api/v1" || path == "/api/v1/") return resource_list(c, "", "v1").dump();
  if (path == "/apis" || path == "/apis/") {
    ojson v;
    v["kind"] = "APIGroupList";
    v["apiVersion"] = "v1";
    ojson arr = ojson::array();
    for (const auto& [name, versions] : groups_of(c)) arr.push_back(group_doc(name, versions));
    v["groups"] = arr;
    return v.dump();
  }
  if (starts_with(path, "/apis/")) {
    auto parts = split(path.substr(6), '/');
    while (!parts.empty() && parts.back().empty()) parts.pop_back();
    auto groups = groups_of(c);
    if (parts.size() == 1) {
      auto it = groups.find(parts[0]);
      if (it == groups.end()) return std::nullopt;
      ojson g = group_doc(it->first, it->second);
      ojson out;
      out["kind"] = "APIGroup";
      out["apiVersion"] = "v1";
      for (auto& [k, v] : g.items()) out[k] = v;
      return out.dump();
    }
    if (parts.size() == 2) {
      auto it = groups.find(parts[0]);
      if (it == groups.end()) return std::nullopt;
      for (const auto& v : it->second)
        if (v == parts[1]) return resource_list(c, parts[0], parts[1]).dump();
    }
  }
  return std::nullopt;
}

}  // namespace dpfsim
