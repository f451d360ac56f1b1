// One watch cache of ClusterCache: a reflector's handler that remembers what a (re-)list
// delivered, so that objects gone meanwhile are dropped at its end. Every kind of object is an
// IndexedStore (controller/indexed_store.hpp) keeping only the facts a pass reads.
#pragma once

#include <charconv>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "controller/cluster_cache.hpp"
#include "core/json_access.hpp"

namespace extsvc::controller {

// "<namespace>/<name>", or the name of a cluster-scoped object.
inline std::string cache_key_of(const nlohmann::json& obj) {
  const std::string ns = core::json_text_at(obj, {"metadata", "namespace"});
  const std::string name = core::json_text_at(obj, {"metadata", "name"});
  return ns.empty() ? name : ns + "/" + name;
}

// The key of a kind watched in one namespace and looked up by name.
inline std::string name_key_of(const nlohmann::json& obj) {
  return core::json_text_at(obj, {"metadata", "name"});
}

// resourceVersions are opaque, but etcd's are integers: an older one never replaces a newer
// one that a PATCH response already put into the cache.
inline bool older_version(const std::string& candidate, const std::string& current) {
  uint64_t a = 0, b = 0;
  auto ra = std::from_chars(candidate.data(), candidate.data() + candidate.size(), a);
  auto rb = std::from_chars(current.data(), current.data() + current.size(), b);
  if (ra.ec != std::errc() || rb.ec != std::errc()) return false;
  if (ra.ptr != candidate.data() + candidate.size() || rb.ptr != current.data() + current.size())
    return false;
  return a < b;
}

class ClusterCache::Store : public kube::ReflectorHandler {
 public:
  Store(Dirty& dirty, std::string name) : dirty_(dirty), name_(std::move(name)) {}
  const std::string& name() const { return name_; }
  virtual size_t size() const = 0;

  void on_list_begin() override { seen_.clear(); }
  void on_list_item(const nlohmann::json& obj) override {
    seen_.insert(key_of(obj));
    apply(obj);
  }
  void on_list_end() override {
    for (const auto& key : keys())
      if (!seen_.count(key)) remove(key);
    seen_.clear();
  }
  void on_event(kube::WatchEventType type, const nlohmann::json& obj) override {
    if (type == kube::WatchEventType::kDeleted)
      remove(key_of(obj));
    else
      apply(obj);
  }

 protected:
  // The cache's key of an object: "<namespace>/<name>", or the name alone for a kind watched in
  // one namespace and looked up by name.
  virtual std::string key_of(const nlohmann::json& obj) const { return cache_key_of(obj); }
  virtual void apply(const nlohmann::json& obj) = 0;
  virtual void remove(const std::string& key) = 0;
  virtual std::vector<std::string> keys() const = 0;

  Dirty& dirty_;

 private:
  std::string name_;
  std::set<std::string> seen_;
};

}  // namespace extsvc::controller
