// In-memory object store for both simulated clusters with Kubernetes write semantics
// (resourceVersion, generation, finalizers, no-op detection, status subresource).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kube_errors.h"
#include "label_selector.h"
#include "resources.h"
#include "util.h"

namespace dpfsim {

using ObjPtr = std::shared_ptr<const json>;

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

struct WatchEvent {
  uint64_t rv;
  const ResourceInfo* ri;
  std::string type;  // ADDED | MODIFIED | DELETED
  ObjPtr obj;
};

class Store {
 public:
  explicit Store(Prng& prng) : prng_(prng) {}

  std::mutex& mutex() { return mu_; }
  uint64_t change_seq() const { return change_seq_.load(); }

  // ---- API operations (acquire the lock) ----
  ObjPtr get(const ResourceInfo& ri, const std::string& ns, const std::string& name);
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
  std::vector<ObjPtr> list_l(const ResourceInfo& ri, const std::string& ns = "") const;
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
  // Number of writes to a resource so far (controllers skip work when nothing they read changed).
  uint64_t resource_seq_l(const ResourceInfo& ri) const {
    auto it = res_seq_.find(&ri);
    return it == res_seq_.end() ? 0 : it->second;
  }
  // All events (any resource) with rv > after; false if the history no longer reaches back that
  // far.
  bool changes_since_l(uint64_t after, std::vector<WatchEvent>& out) const;
  json dump_l() const;

  // ---- Watch support ----
  // Collects events with rv > after for ri. Returns false if 'after' is older than the retained
  // history.
  bool events_since(const ResourceInfo& ri, uint64_t after, std::vector<WatchEvent>& out,
                    uint64_t& latest);
  // Waits (lock not held) until an event newer than 'after' exists or the timeout elapses.
  void wait_for_change(uint64_t after, std::chrono::milliseconds timeout);
  void notify_all() { cv_.notify_all(); }

 private:
  static std::string key_of(const std::string& ns, const std::string& name) {
    return ns.empty() ? name : ns + "/" + name;
  }
  void record_l(const ResourceInfo& ri, const char* type, const ObjPtr& obj);
  WriteResult update_l(const ResourceInfo& ri, const ObjPtr& old, json incoming, bool status_sub,
                       bool is_put);
  WriteResult remove_l(const ResourceInfo& ri, const ObjPtr& old, const DeleteOptions& opts);
  ObjPtr put_l(const ResourceInfo& ri, json&& obj);

  Prng& prng_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<const ResourceInfo*, std::map<std::string, ObjPtr>> data_;
  uint64_t rv_ = 1000;
  std::atomic<uint64_t> change_seq_{0};
  std::deque<WatchEvent> events_;
  uint64_t events_floor_ = 1000;  // events with rv <= floor were dropped
  std::map<const ResourceInfo*, uint64_t> res_seq_;
};

}  // namespace dpfsim
