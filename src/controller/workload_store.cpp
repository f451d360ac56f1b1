#include "controller/workload_store.hpp"

#include "core/workload.hpp"

namespace extsvc::controller {

using nlohmann::json;

// --- PodStore -------------------------------------------------------------------

PodStore::PodStore(Dirty& dirty, std::string name) : IndexedStore(dirty, std::move(name)) {
  add_index(kByNode, [](const core::PodFacts& f) { return std::vector<std::string>{f.node}; });
  add_index(kByOwner, [](const core::PodFacts& f) {
    return f.owner_uid.empty() ? std::vector<std::string>{} : std::vector<std::string>{f.owner_uid};
  });
}

std::set<std::string> PodStore::nodes_of(const std::string& owner_uid) const {
  std::set<std::string> out;
  for (const core::PodFacts* f : by_index(kByOwner, owner_uid)) out.insert(f->node);
  return out;
}

bool PodStore::ours(const core::PodFacts& f) const {
  return !f.service_id.empty() ||
         (daemonsets_ != nullptr && !daemonsets_->release_of(f.owner_uid).empty());
}

std::optional<core::PodFacts> PodStore::extract(const std::string&, const json& obj) {
  core::PodFacts f = core::pod_facts(obj);
  // neither labelled nor a DaemonSet's: never one of our services' (a label removed later counts
  // as the pod going away)
  if (f.service_id.empty() && f.owner_uid.empty()) return std::nullopt;
  return f;
}

void PodStore::on_change(const std::string&, const core::PodFacts* old, const core::PodFacts* now) {
  // only our services' pods wake their DPU: DPF's own DaemonSets' pods change as well; a status
  // heartbeat compares equal and never gets here
  if (old != nullptr && ours(*old)) dirty_.nodes.insert(old->node);
  if (now != nullptr && ours(*now)) dirty_.nodes.insert(now->node);
}

// --- DaemonSetStore ----------------------------------------------------------------

DaemonSetStore::DaemonSetStore(Dirty& dirty, std::string name)
    : IndexedStore(dirty, std::move(name)) {
  add_index(kByUid, [](const TrackedDaemonSet& t) { return std::vector<std::string>{t.uid}; });
}

std::string DaemonSetStore::release_of(const std::string& uid) const {
  if (uid.empty()) return {};
  if (const TrackedDaemonSet* t = first_by_index(kByUid, uid)) return t->release;
  if (auto it = gone_.find(uid); it != gone_.end()) return it->second;
  return {};
}

void DaemonSetStore::wake(const std::string& uid) {
  if (pods_ == nullptr) return;
  for (const auto& node : pods_->nodes_of(uid)) dirty_.nodes.insert(node);
}

std::optional<TrackedDaemonSet> DaemonSetStore::extract(const std::string&, const json& obj) {
  TrackedDaemonSet t{core::json_text_at(obj, {"metadata", "uid"}), core::tracked_dpuservice(obj)};
  if (t.release.empty() || t.uid.empty()) return std::nullopt;  // not applied for one of ours
  return t;
}

void DaemonSetStore::on_change(const std::string&, const TrackedDaemonSet* old,
                               const TrackedDaemonSet* now) {
  if (old != nullptr) {
    // its pods are still ours until they are gone (the garbage collector deletes them after it)
    for (auto g = gone_.begin(); g != gone_.end();)
      g = (pods_ != nullptr && pods_->has_owner(g->first)) ? std::next(g) : gone_.erase(g);
    if (pods_ != nullptr && pods_->has_owner(old->uid)) gone_[old->uid] = old->release;
    wake(old->uid);
  }
  if (now != nullptr) {
    gone_.erase(now->uid);
    wake(now->uid);
  }
}

}  // namespace extsvc::controller
