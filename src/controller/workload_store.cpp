#include "controller/workload_store.hpp"

#include "core/workload.hpp"

namespace extsvc::controller {

using nlohmann::json;

// --- PodStore -------------------------------------------------------------------

std::vector<const core::PodFacts*> PodStore::on(const std::string& node) const {
  std::vector<const core::PodFacts*> out;
  auto it = by_node_.find(node);
  if (it == by_node_.end()) return out;
  for (const auto& key : it->second) out.push_back(&map_.at(key));
  return out;
}

std::set<std::string> PodStore::nodes_of(const std::string& owner_uid) const {
  std::set<std::string> out;
  auto it = by_owner_.find(owner_uid);
  if (it == by_owner_.end()) return out;
  for (const auto& key : it->second) out.insert(map_.at(key).node);
  return out;
}

bool PodStore::ours(const core::PodFacts& f) const {
  return !f.service_id.empty() ||
         (daemonsets_ != nullptr && !daemonsets_->release_of(f.owner_uid).empty());
}

void PodStore::apply(const json& obj) {
  const std::string key = cache_key_of(obj);
  core::PodFacts f = core::pod_facts(obj);
  auto it = map_.find(key);
  if (f.service_id.empty() && f.owner_uid.empty()) {
    // neither labelled nor a DaemonSet's: never one of our services' (a label removed later
    // counts as the pod going away)
    if (it != map_.end()) remove(key);
    return;
  }
  if (it != map_.end()) {
    if (it->second == f) return;  // nothing we read changed (a status heartbeat)
    const bool was_ours = ours(it->second);
    unindex(key, it->second);
    if (was_ours) dirty_.nodes.insert(it->second.node);
    it->second = std::move(f);
  } else {
    it = map_.emplace(key, std::move(f)).first;
  }
  by_node_[it->second.node].insert(key);
  if (!it->second.owner_uid.empty()) by_owner_[it->second.owner_uid].insert(key);
  // only our services' pods wake their DPU: DPF's own DaemonSets' pods change as well
  if (ours(it->second)) dirty_.nodes.insert(it->second.node);
}

void PodStore::remove(const std::string& key) {
  auto it = map_.find(key);
  if (it == map_.end()) return;
  if (ours(it->second)) dirty_.nodes.insert(it->second.node);
  unindex(key, it->second);
  map_.erase(it);
}

std::vector<std::string> PodStore::keys() const {
  std::vector<std::string> out;
  out.reserve(map_.size());
  for (const auto& [key, f] : map_) out.push_back(key);
  return out;
}

void PodStore::unindex(const std::string& key, const core::PodFacts& f) {
  if (auto n = by_node_.find(f.node); n != by_node_.end()) {
    n->second.erase(key);
    if (n->second.empty()) by_node_.erase(n);
  }
  if (auto o = by_owner_.find(f.owner_uid); o != by_owner_.end()) {
    o->second.erase(key);
    if (o->second.empty()) by_owner_.erase(o);
  }
}

// --- DaemonSetStore ----------------------------------------------------------------

std::string DaemonSetStore::release_of(const std::string& uid) const {
  if (uid.empty()) return {};
  if (auto it = by_uid_.find(uid); it != by_uid_.end()) return it->second;
  if (auto it = gone_.find(uid); it != gone_.end()) return it->second;
  return {};
}

void DaemonSetStore::wake(const std::string& uid) {
  if (pods_ == nullptr) return;
  for (const auto& node : pods_->nodes_of(uid)) dirty_.nodes.insert(node);
}

void DaemonSetStore::apply(const json& obj) {
  const std::string key = cache_key_of(obj);
  const std::string release = core::tracked_dpuservice(obj);
  const std::string uid = core::json_text_at(obj, {"metadata", "uid"});
  auto it = by_key_.find(key);
  if (it != by_key_.end() && it->second.uid == uid && it->second.release == release) return;
  if (it != by_key_.end()) remove(key);
  if (release.empty() || uid.empty()) return;  // not applied for one of ours
  by_key_[key] = {uid, release};
  by_uid_[uid] = release;
  gone_.erase(uid);
  wake(uid);
}

void DaemonSetStore::remove(const std::string& key) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return;
  const Tracked t = it->second;
  by_key_.erase(it);
  by_uid_.erase(t.uid);
  // its pods are still ours until they are gone (the garbage collector deletes them after it)
  for (auto g = gone_.begin(); g != gone_.end();)
    g = (pods_ != nullptr && pods_->has_owner(g->first)) ? std::next(g) : gone_.erase(g);
  if (pods_ != nullptr && pods_->has_owner(t.uid)) gone_[t.uid] = t.release;
  wake(t.uid);
}

std::vector<std::string> DaemonSetStore::keys() const {
  std::vector<std::string> out;
  out.reserve(by_key_.size());
  for (const auto& [key, t] : by_key_) out.push_back(key);
  return out;
}

}  // namespace extsvc::controller
