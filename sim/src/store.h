// In-memory object store for both simulated clusters with Kubernetes write semantics
// (resourceVersion, generation, finalizers, no-op detection, status subresource).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "event_log.h"
#include "kube_errors.h"
#include "label_selector.h"
#include "resources.h"
#include "util.h"

namespace dpfsim {

enum class PatchType { Merge, Json, Strategic, Apply, Unknown };
PatchType patch_type_from_content_type(const std::string& ct);

struct ListOptions {
  std::string ns;  // empty: all namespaces (or cluster-scoped)
  LabelSelector labels;
  FieldSelector fields;
  long limit = 0;
  std::string cont;
};

struct ListResult {
  std::vector<ObjPtr> items;
  std::string resource_version;
  std::string cont;
  long remaining = -1;
};

struct DeleteOptions {
  std::optional<std::string> precondition_rv;
  std::optional<std::string> precondition_uid;
  std::optional<long> grace_seconds;
};

// Result of a write: either an object (code 200/201) or a Status text (object removed).
struct WriteResult {
  int code = 200;
  ObjPtr obj;
  std::string text;
};

// Receives every change the store makes, under the store's mutex (the controllers' informer).
class StoreObserver {
 public:
  virtual ~StoreObserver() = default;
  // type: ADDED | MODIFIED | DELETED; prev is null for ADDED. key: "ns/name" or "name".
  virtual void on_event(const ResourceInfo& ri, const char* type, const std::string& key,
                        const ObjPtr& obj, const ObjPtr& prev) = 0;
  // Both clusters were emptied (POST /reset).
  virtual void on_clear() = 0;
};

class Store {
 public:
  explicit Store(Prng& prng);

  std::mutex& mutex() { return mu_; }
  // Watch window knobs (POST /watch-config).
  WatchConfig& watch_config() { return watch_cfg_; }
  // The watch event window of a resource.
  EventLog& log(const ResourceInfo& ri) { return *logs_.at(&ri); }
  // Every event with a resourceVersion up to this one is in its resource's log: the
  // resourceVersion a bookmark may carry.
  uint64_t published_rv() const { return published_rv_.load(std::memory_order_acquire); }
  // LIST continue tokens answered with 410 Expired so far.
  uint64_t continue_expired() const { return continue_expired_.load(); }
  // Set once before the servers start; called under the store mutex.
  void set_observer(StoreObserver* o) { observer_ = o; }
  // Admission of API writes (create, update, patch; not /status): throws the ApiError that
  // denies. Set once before the servers start; called under the store mutex. Controllers that
  // write through create_l/commit_l call their admission themselves.
  using Admission = std::function<void(const Store&, const ResourceInfo&, const json&)>;
  void set_admission(Admission a) { admission_ = std::move(a); }

  // ---- API operations (acquire the lock) ----
  ObjPtr get(const ResourceInfo& ri, const std::string& ns, const std::string& name);
  // A page with a continue token is served from the state at the token's resourceVersion,
  // rebuilt from the event window; a token older than the window or continue_ttl_ms answers 410.
  ListResult list(const ResourceInfo& ri, const ListOptions& opts);
  WriteResult create(const ResourceInfo& ri, const std::string& ns, json body);
  WriteResult update(const ResourceInfo& ri, const std::string& ns, const std::string& name,
                     json body, bool status_sub);
  WriteResult patch(const ResourceInfo& ri, const std::string& ns, const std::string& name,
                    PatchType type, const std::string& body, bool status_sub);
  WriteResult remove(const ResourceInfo& ri, const std::string& ns, const std::string& name,
                     const DeleteOptions& opts);
  std::vector<WriteResult> remove_collection(const ResourceInfo& ri, const ListOptions& opts,
                                             const DeleteOptions& dopts);

  // ---- Helpers for controllers; the caller holds mutex() ----
  ObjPtr find_l(const ResourceInfo& ri, const std::string& ns, const std::string& name) const;
  // By store key ("ns/name", or "name" for cluster-scoped resources).
  ObjPtr find_key_l(const ResourceInfo& ri, const std::string& key) const;
  std::vector<ObjPtr> list_l(const ResourceInfo& ri, const std::string& ns = "") const;
  size_t count_l(const ResourceInfo& ri) const;
  // Creates an object keeping its status (controllers, seeding). Throws ApiError on conflicts.
  ObjPtr create_l(const ResourceInfo& ri, json obj, bool from_api = false);
  // Writes next over the stored object of the same name; no-op writes keep the resourceVersion.
  // Removes the object when it is terminating and has no finalizers left (returns nullptr then).
  ObjPtr commit_l(const ResourceInfo& ri, json next);
  // Sets deletionTimestamp (and bumps generation) if not yet set. Returns the stored object.
  ObjPtr mark_deleting_l(const ResourceInfo& ri, const ObjPtr& obj, long grace_seconds);
  // Removes the object now.
  void erase_l(const ResourceInfo& ri, const std::string& ns, const std::string& name);
  void clear_l();
  uint64_t rv_l() const { return rv_; }
  json dump_l() const;

  // ---- Indexes (caller holds mutex()); null when empty ----
  // Keys of the objects of ri with an ownerReference to owner_uid.
  const std::set<std::string>* owned_by_l(const ResourceInfo& ri,
                                          const std::string& owner_uid) const;
  // Keys of the pods whose target node is node: spec.nodeName, or for a pod not yet bound the one
  // node its required node affinity names (matchFields metadata.name, as the DaemonSet controller
  // sets it; Kubernetes' GetTargetNodeName).
  const std::set<std::string>* pods_on_node_l(const std::string& node) const;
  // Keys of the objects of ri (nodes and pods are indexed) that carry the label key.
  const std::set<std::string>* with_label_key_l(const ResourceInfo& ri,
                                                const std::string& key) const;
  // The resource and key of the object with this uid, if any.
  bool find_uid_l(const std::string& uid, const ResourceInfo*& ri, std::string& key) const;

  static std::string key_of(const std::string& ns, const std::string& name) {
    return ns.empty() ? name : ns + "/" + name;
  }
  static std::string key_of(const ResourceInfo& ri, const json& obj);

 private:
  void record_l(const ResourceInfo& ri, const char* type, const std::string& key, const ObjPtr& obj,
                const ObjPtr& prev);
  void index_l(const ResourceInfo& ri, const std::string& key, const json* before,
               const json* after);
  WriteResult update_l(const ResourceInfo& ri, const ObjPtr& old, json incoming, bool status_sub,
                       bool is_put);
  WriteResult remove_l(const ResourceInfo& ri, const ObjPtr& old, const DeleteOptions& opts);
  ObjPtr put_l(const ResourceInfo& ri, json&& obj, const ObjPtr& old);

  using KeySets = std::unordered_map<std::string, std::set<std::string>>;

  Prng& prng_;
  mutable std::mutex mu_;
  std::map<const ResourceInfo*, std::map<std::string, ObjPtr>> data_;
  uint64_t rv_ = 1000;
  std::atomic<uint64_t> published_rv_{1000};
  std::atomic<uint64_t> continue_expired_{0};
  WatchConfig watch_cfg_;
  std::map<const ResourceInfo*, std::unique_ptr<EventLog>> logs_;
  StoreObserver* observer_ = nullptr;
  Admission admission_;
  std::unordered_map<std::string, std::pair<const ResourceInfo*, std::string>> by_uid_;
  std::map<const ResourceInfo*, KeySets> by_owner_;
  KeySets pods_by_node_;
  std::map<const ResourceInfo*, KeySets> by_label_key_;
};

}  // namespace dpfsim
