#include "store.h"

#include <algorithm>

#include "node_selector.h"
#include "store_detail.h"
#include "validation.h"

namespace dpfsim {

namespace {

// Owner uids of an object's ownerReferences.
std::vector<std::string> owner_uids(const json* obj) {
  std::vector<std::string> out;
  if (!obj) return out;
  const json* refs = jptr(*obj, {"metadata", "ownerReferences"});
  if (refs && refs->is_array())
    for (const auto& r : *refs)
      if (r.is_object()) {
        std::string u = r.value("uid", "");
        if (!u.empty()) out.push_back(u);
      }
  return out;
}

std::vector<std::string> label_keys(const json* obj) {
  std::vector<std::string> out;
  if (!obj) return out;
  const json* l = jptr(*obj, {"metadata", "labels"});
  if (l && l->is_object())
    for (auto it = l->begin(); it != l->end(); ++it) out.push_back(it.key());
  return out;
}

// Moves key from the sets named by the old values to the sets named by the new ones.
void reindex(std::unordered_map<std::string, std::set<std::string>>& idx, const std::string& key,
             const std::vector<std::string>& before, const std::vector<std::string>& after) {
  if (before == after) return;
  for (const auto& b : before) {
    if (std::find(after.begin(), after.end(), b) != after.end()) continue;
    auto it = idx.find(b);
    if (it == idx.end()) continue;
    it->second.erase(key);
    if (it->second.empty()) idx.erase(it);
  }
  for (const auto& a : after)
    if (std::find(before.begin(), before.end(), a) == before.end()) idx[a].insert(key);
}

bool label_indexed(const ResourceInfo& ri) {
  return ri.cluster == ClusterId::Dpu && (ri.plural == "nodes" || ri.plural == "pods");
}

// True when everything outside metadata and status is equal (generation rule).
bool spec_equal(const json& a, const json& b) {
  auto count = [](const json& j) {
    size_t n = 0;
    for (auto it = j.begin(); it != j.end(); ++it)
      if (it.key() != "metadata" && it.key() != "status") ++n;
    return n;
  };
  if (!a.is_object() || !b.is_object()) return a == b;
  if (count(a) != count(b)) return false;
  for (auto it = a.begin(); it != a.end(); ++it) {
    if (it.key() == "metadata" || it.key() == "status") continue;
    auto jt = b.find(it.key());
    if (jt == b.end() || *jt != *it) return false;
  }
  return true;
}

void normalize_metadata(json& md) {
  for (const char* k : {"labels", "annotations", "finalizers", "ownerReferences"}) {
    auto it = md.find(k);
    if (it != md.end() &&
        (it->is_null() || (it->is_object() && it->empty()) || (it->is_array() && it->empty())))
      md.erase(it);
  }
}

}  // namespace

namespace store_detail {

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::vector<std::string> finalizers_of(const json& obj) {
  std::vector<std::string> out;
  const json* f = jptr(obj, {"metadata", "finalizers"});
  if (f && f->is_array())
    for (const auto& x : *f)
      if (x.is_string()) out.push_back(x.get<std::string>());
  return out;
}

bool is_terminating(const json& obj) {
  const json* d = jptr(obj, {"metadata", "deletionTimestamp"});
  return d && !d->is_null();
}

// Removes strategic-merge directives ($patch, $setElementOrder/..., $retainKeys, ...).
void strip_directives(json& j) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end();) {
      if (!it.key().empty() && it.key()[0] == '$') {
        it = j.erase(it);
      } else {
        strip_directives(*it);
        ++it;
      }
    }
  } else if (j.is_array()) {
    for (auto& x : j) strip_directives(x);
  }
}

json parse_body(const std::string& body) {
  try {
    return json::parse(body);
  } catch (const std::exception& e) {
    throw err_bad_request(std::string("error decoding request body: ") + e.what());
  }
}

}  // namespace store_detail

using namespace store_detail;

PatchType patch_type_from_content_type(const std::string& ct_in) {
  std::string ct = ct_in.substr(0, ct_in.find(';'));
  ct = trim(ct);
  if (ct == "application/merge-patch+json") return PatchType::Merge;
  if (ct == "application/json-patch+json") return PatchType::Json;
  if (ct == "application/strategic-merge-patch+json") return PatchType::Strategic;
  if (ct == "application/apply-patch+yaml" || ct == "application/apply-patch+cbor")
    return PatchType::Apply;
  return PatchType::Unknown;
}

// ---------------- locked helpers ----------------

Store::Store(Prng& prng) : prng_(prng) {
  for (const auto& r : all_resources()) {
    logs_[&r] = std::make_unique<EventLog>();
    logs_[&r]->reset(rv_);
  }
}

std::string Store::key_of(const ResourceInfo& ri, const json& obj) {
  return key_of(ri.namespaced ? jstr(obj, {"metadata", "namespace"}) : "",
                jstr(obj, {"metadata", "name"}));
}

ObjPtr Store::find_l(const ResourceInfo& ri, const std::string& ns, const std::string& name) const {
  return find_key_l(ri, key_of(ri.namespaced ? ns : "", name));
}

ObjPtr Store::find_key_l(const ResourceInfo& ri, const std::string& key) const {
  auto b = data_.find(&ri);
  if (b == data_.end()) return nullptr;
  auto it = b->second.find(key);
  return it == b->second.end() ? nullptr : it->second;
}

std::vector<ObjPtr> Store::list_l(const ResourceInfo& ri, const std::string& ns) const {
  std::vector<ObjPtr> out;
  auto b = data_.find(&ri);
  if (b == data_.end()) return out;
  if (ns.empty() || !ri.namespaced) {
    out.reserve(b->second.size());
    for (const auto& [k, v] : b->second) out.push_back(v);
  } else {
    std::string prefix = ns + "/";
    for (auto it = b->second.lower_bound(prefix);
         it != b->second.end() && starts_with(it->first, prefix); ++it)
      out.push_back(it->second);
  }
  return out;
}

size_t Store::count_l(const ResourceInfo& ri) const {
  auto b = data_.find(&ri);
  return b == data_.end() ? 0 : b->second.size();
}

const std::set<std::string>* Store::owned_by_l(const ResourceInfo& ri,
                                               const std::string& owner_uid) const {
  auto b = by_owner_.find(&ri);
  if (b == by_owner_.end()) return nullptr;
  auto it = b->second.find(owner_uid);
  return it == b->second.end() ? nullptr : &it->second;
}

const std::set<std::string>* Store::pods_on_node_l(const std::string& node) const {
  auto it = pods_by_node_.find(node);
  return it == pods_by_node_.end() ? nullptr : &it->second;
}

const std::set<std::string>* Store::with_label_key_l(const ResourceInfo& ri,
                                                     const std::string& key) const {
  auto b = by_label_key_.find(&ri);
  if (b == by_label_key_.end()) return nullptr;
  auto it = b->second.find(key);
  return it == b->second.end() ? nullptr : &it->second;
}

bool Store::find_uid_l(const std::string& uid, const ResourceInfo*& ri, std::string& key) const {
  auto it = by_uid_.find(uid);
  if (it == by_uid_.end()) return false;
  ri = it->second.first;
  key = it->second.second;
  return true;
}

void Store::index_l(const ResourceInfo& ri, const std::string& key, const json* before,
                    const json* after) {
  std::string uid_b = before ? jstr(*before, {"metadata", "uid"}) : "";
  std::string uid_a = after ? jstr(*after, {"metadata", "uid"}) : "";
  if (uid_b != uid_a) {
    if (!uid_b.empty()) by_uid_.erase(uid_b);
    if (!uid_a.empty()) by_uid_[uid_a] = {&ri, key};
  }
  const json* ob = before ? jptr(*before, {"metadata", "ownerReferences"}) : nullptr;
  const json* oa = after ? jptr(*after, {"metadata", "ownerReferences"}) : nullptr;
  if ((ob == nullptr) != (oa == nullptr) || (ob && *ob != *oa)) {
    KeySets& idx = by_owner_[&ri];
    reindex(idx, key, owner_uids(before), owner_uids(after));
  }
  if (ri.cluster == ClusterId::Dpu && ri.plural == "pods") {
    std::vector<std::string> nb, na;
    if (before) {
      std::string n = pod_target_node(*before);
      if (!n.empty()) nb.push_back(std::move(n));
    }
    if (after) {
      std::string n = pod_target_node(*after);
      if (!n.empty()) na.push_back(std::move(n));
    }
    reindex(pods_by_node_, key, nb, na);
  }
  if (label_indexed(ri)) {
    const json* lb = before ? jptr(*before, {"metadata", "labels"}) : nullptr;
    const json* la = after ? jptr(*after, {"metadata", "labels"}) : nullptr;
    if ((lb == nullptr) != (la == nullptr) || (lb && *lb != *la))
      reindex(by_label_key_[&ri], key, label_keys(before), label_keys(after));
  }
}

void Store::record_l(const ResourceInfo& ri, const char* type, const std::string& key,
                     const ObjPtr& obj, const ObjPtr& prev) {
  auto e = std::make_shared<LogEntry>();
  e->rv = rv_;
  e->type = type;
  e->obj = obj;
  e->prev = prev;
  e->at = SteadyClock::now();
  logs_.at(&ri)->push(std::move(e), watch_cfg_);
  published_rv_.store(rv_, std::memory_order_release);
  if (observer_) observer_->on_event(ri, type, key, obj, prev);
}

ObjPtr Store::put_l(const ResourceInfo& ri, json&& obj, const ObjPtr& old) {
  auto p = std::make_shared<const json>(std::move(obj));
  std::string key = key_of(ri, *p);
  data_[&ri][key] = p;
  index_l(ri, key, old.get(), p.get());
  return p;
}

ObjPtr Store::create_l(const ResourceInfo& ri, json obj, bool from_api) {
  if (!obj.is_object()) throw err_bad_request("object must be a JSON object");
  obj["apiVersion"] = ri.api_version();
  obj["kind"] = ri.kind;
  json& md = obj["metadata"];
  if (!md.is_object()) md = json::object();
  std::string ns = ri.namespaced ? jstr(md, {"namespace"}) : "";
  std::string name = jstr(md, {"name"});
  if (name.empty()) {
    std::string gen = jstr(md, {"generateName"});
    if (!gen.empty()) {
      for (int i = 0; i < 100; ++i) {
        name = gen + prng_.k8s_suffix(5);
        if (!find_l(ri, ns, name)) break;
      }
      md["name"] = name;
    }
  }
  if (!ri.namespaced) md.erase("namespace");
  if (from_api) {
    prune_for_request(ri, obj);
    validate_or_throw(ri, obj, nullptr);
    if (admission_) admission_(*this, ri, obj);
  }
  if (from_api && ri.namespaced) {
    // NamespaceLifecycle admission.
    const ResourceInfo* ns_ri = find_resource_by_plural(ri.cluster, "namespaces");
    if (ns_ri && !find_l(*ns_ri, "", ns)) throw err_not_found(*ns_ri, ns);
  }
  if (auto old = find_l(ri, ns, name)) throw err_already_exists(ri, name, is_terminating(*old));
  for (const char* k :
       {"deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "selfLink"})
    md.erase(k);
  normalize_metadata(md);
  md["uid"] = prng_.uuid();
  md["creationTimestamp"] = rfc3339_now();
  if (ri.has_generation)
    md["generation"] = 1;
  else
    md.erase("generation");
  if (from_api) {
    if (ri.custom || ri.plural == "daemonsets") obj.erase("status");
    if (ri.plural == "pods") obj["status"] = json{{"phase", "Pending"}, {"qosClass", "BestEffort"}};
    if (ri.plural == "namespaces") obj["status"] = json{{"phase", "Active"}};
  }
  ++rv_;
  md["resourceVersion"] = std::to_string(rv_);
  ObjPtr p = put_l(ri, std::move(obj), nullptr);
  record_l(ri, "ADDED", key_of(ri, *p), p, nullptr);
  return p;
}

ObjPtr Store::commit_l(const ResourceInfo& ri, json next) {
  json& md = next["metadata"];
  std::string ns = ri.namespaced ? jstr(md, {"namespace"}) : "";
  std::string name = jstr(md, {"name"});
  ObjPtr old = find_l(ri, ns, name);
  if (!old) throw err_not_found(ri, name);
  normalize_metadata(md);
  md["resourceVersion"] = (*old)["metadata"]["resourceVersion"];
  if (ri.has_generation) {
    long long gen = (*old)["metadata"].value("generation", 0LL);
    if (!spec_equal(*old, next)) gen += 1;
    if (gen > 0) md["generation"] = gen;
  }
  if (is_terminating(next) && finalizers_of(next).empty()) {
    // As kube-apiserver's registry: the update that empties the finalizers becomes a delete,
    // and the DELETED event carries the last stored state with the deletion's resourceVersion.
    ++rv_;
    json last = *old;
    last["metadata"]["resourceVersion"] = std::to_string(rv_);
    std::string key = key_of(ns, name);
    data_[&ri].erase(key);
    index_l(ri, key, old.get(), nullptr);
    record_l(ri, "DELETED", key, std::make_shared<const json>(std::move(last)), old);
    return nullptr;
  }
  if (next == *old) return old;
  ++rv_;
  md["resourceVersion"] = std::to_string(rv_);
  ObjPtr p = put_l(ri, std::move(next), old);
  record_l(ri, "MODIFIED", key_of(ns, name), p, old);
  return p;
}

ObjPtr Store::mark_deleting_l(const ResourceInfo& ri, const ObjPtr& obj, long grace_seconds) {
  if (is_terminating(*obj)) return obj;
  json next = *obj;
  json& md = next["metadata"];
  md["deletionTimestamp"] = rfc3339_now();
  md["deletionGracePeriodSeconds"] = grace_seconds;
  std::string ns = ri.namespaced ? jstr(md, {"namespace"}) : "";
  long long gen = md.value("generation", 0LL);
  if (ri.has_generation && gen > 0) md["generation"] = gen + 1;
  if (ri.plural == "pods" && next.contains("status")) {
    // The kubelet starts killing containers: the pod is no longer Ready.
    json& st = next["status"];
    if (st.contains("conditions") && st["conditions"].is_array())
      for (auto& c : st["conditions"])
        if (c.value("type", "") == "Ready" || c.value("type", "") == "ContainersReady") {
          if (c.value("status", "") != "False") c["lastTransitionTime"] = rfc3339_now();
          c["status"] = "False";
        }
    if (st.contains("containerStatuses") && st["containerStatuses"].is_array())
      for (auto& cs : st["containerStatuses"]) cs["ready"] = false;
  }
  ++rv_;
  md["resourceVersion"] = std::to_string(rv_);
  ObjPtr p = put_l(ri, std::move(next), obj);
  record_l(ri, "MODIFIED", key_of(ns, jstr(md, {"name"})), p, obj);
  return p;
}

void Store::erase_l(const ResourceInfo& ri, const std::string& ns, const std::string& name) {
  auto b = data_.find(&ri);
  if (b == data_.end()) return;
  auto it = b->second.find(key_of(ri.namespaced ? ns : "", name));
  if (it == b->second.end()) return;
  ObjPtr old = it->second;
  std::string key = it->first;
  json last = *old;
  ++rv_;
  last["metadata"]["resourceVersion"] = std::to_string(rv_);
  b->second.erase(it);
  index_l(ri, key, old.get(), nullptr);
  record_l(ri, "DELETED", key, std::make_shared<const json>(std::move(last)), old);
}

void Store::clear_l() {
  data_.clear();
  by_uid_.clear();
  by_owner_.clear();
  pods_by_node_.clear();
  by_label_key_.clear();
  ++rv_;
  for (auto& [ri, log] : logs_) log->reset(rv_);
  published_rv_.store(rv_, std::memory_order_release);
  if (observer_) observer_->on_clear();
}

json Store::dump_l() const {
  json out = json::object();
  for (const auto& [ri, bucket] : data_) {
    json& arr = out[cluster_name(ri->cluster)][ri->plural];
    if (arr.is_null()) arr = json::array();
    for (const auto& [k, v] : bucket) arr.push_back(*v);
  }
  for (const char* c : {"management", "dpu"})
    if (!out.contains(c)) out[c] = json::object();
  out["resourceVersion"] = std::to_string(rv_);
  return out;
}

}  // namespace dpfsim
