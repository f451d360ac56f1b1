#include "controller/cluster_cache.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>

#include "controller/cache_store.hpp"
#include "controller/dpu_object_store.hpp"
#include "core/drift_key.hpp"
#include "core/identity.hpp"
#include "core/json_access.hpp"
#include "core/site.hpp"
#include "reconcile/dpu_observer.hpp"

namespace extsvc::controller {

namespace {

using nlohmann::json;

constexpr auto& at = core::json_at;

constexpr auto& str = core::json_text;

constexpr size_t kMaxEvents = 10000;

}  // namespace

std::chrono::system_clock::time_point to_wall(std::chrono::steady_clock::time_point t) {
  const auto now_steady = std::chrono::steady_clock::now();
  const auto now_wall = std::chrono::system_clock::now();
  return now_wall - std::chrono::duration_cast<std::chrono::system_clock::duration>(now_steady - t);
}

namespace {

class DeviceStore : public ClusterCache::Store {
 public:
  using Store::Store;
  size_t size() const override { return map_.size(); }
  const DeviceFacts* find(const std::string& name) const {
    auto it = map_.find(name);
    return it == map_.end() ? nullptr : &it->second;
  }
  void patched(const json& obj) { apply(obj); }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    out.reserve(map_.size());
    for (const auto& [name, f] : map_) out.push_back(name);
    return out;
  }

 protected:
  void apply(const json& obj) override {
    // namespaced, but one namespace: the key is the name
    const std::string name = str(at(obj, {"metadata", "name"}));
    DeviceFacts f;
    f.resource_version = str(at(obj, {"metadata", "resourceVersion"}));
    f.labels = core::nico_labels_of(at(obj, {"spec", "cluster", "nodeLabels"}));
    auto it = map_.find(name);
    if (it == map_.end()) {
      dirty_.devices.insert(name);
      map_.emplace(name, std::move(f));
      return;
    }
    if (older_version(f.resource_version, it->second.resource_version)) return;
    if (it->second.labels != f.labels) dirty_.devices.insert(name);
    it->second = std::move(f);
  }
  void remove(const std::string& key) override {
    const std::string name = key.substr(key.find('/') + 1);
    if (map_.erase(name) > 0) dirty_.devices.insert(name);
  }
  std::vector<std::string> keys() const override {
    std::vector<std::string> out;
    out.reserve(map_.size());
    for (const auto& [name, f] : map_) out.push_back(ns_ + "/" + name);
    return out;
  }

 public:
  std::string ns_;

 private:
  std::unordered_map<std::string, DeviceFacts> map_;
};

class NodeStore : public ClusterCache::Store {
 public:
  using Store::Store;
  size_t size() const override { return map_.size(); }
  const NodeFacts* find(const std::string& name) const {
    auto it = map_.find(name);
    return it == map_.end() ? nullptr : &it->second;
  }
  std::vector<std::string> names() const { return keys(); }

 protected:
  void apply(const json& obj) override {
    const std::string name = str(at(obj, {"metadata", "name"}));
    // NICo's labels and the Ready condition (a Node that stops reporting): other changes, such
    // as heartbeats, wake nothing
    NodeFacts f = core::node_facts(obj);
    auto it = map_.find(name);
    if (it == map_.end()) {
      dirty_.nodes.insert(name);
      map_.emplace(name, std::move(f));
    } else if (it->second != f) {
      dirty_.nodes.insert(name);
      it->second = std::move(f);
    }
  }
  void remove(const std::string& key) override {
    if (map_.erase(key) > 0) dirty_.nodes.insert(key);
  }
  std::vector<std::string> keys() const override {
    std::vector<std::string> out;
    out.reserve(map_.size());
    for (const auto& [name, f] : map_) out.push_back(name);
    return out;
  }

 private:
  std::unordered_map<std::string, NodeFacts> map_;
};

class PodStore : public ClusterCache::Store {
 public:
  using Store::Store;
  size_t size() const override { return map_.size(); }
  std::vector<const core::PodFacts*> on(const std::string& node) const {
    std::vector<const core::PodFacts*> out;
    auto it = by_node_.find(node);
    if (it == by_node_.end()) return out;
    for (const auto& key : it->second) out.push_back(&map_.at(key));
    return out;
  }

 protected:
  void apply(const json& obj) override {
    const std::string key = cache_key_of(obj);
    core::PodFacts f = core::pod_facts(obj);
    auto it = map_.find(key);
    if (it != map_.end()) {
      if (it->second == f) return;  // nothing we read changed (a status heartbeat)
      unindex(key, it->second.node);
      it->second = std::move(f);
    } else {
      it = map_.emplace(key, std::move(f)).first;
    }
    by_node_[it->second.node].insert(key);
    dirty_.nodes.insert(it->second.node);
  }
  void remove(const std::string& key) override {
    auto it = map_.find(key);
    if (it == map_.end()) return;
    unindex(key, it->second.node);
    map_.erase(it);
  }
  std::vector<std::string> keys() const override {
    std::vector<std::string> out;
    out.reserve(map_.size());
    for (const auto& [key, f] : map_) out.push_back(key);
    return out;
  }

 private:
  void unindex(const std::string& key, const std::string& node) {
    dirty_.nodes.insert(node);
    auto n = by_node_.find(node);
    if (n == by_node_.end()) return;
    n->second.erase(key);
    if (n->second.empty()) by_node_.erase(n);
  }
  std::unordered_map<std::string, core::PodFacts> map_;
  std::unordered_map<std::string, std::set<std::string>> by_node_;
};

class ServiceStore : public ClusterCache::Store {
 public:
  using Store::Store;
  size_t size() const override { return by_name_.size(); }
  const std::unordered_map<std::string, ServiceFacts>& all() const { return by_name_; }
  const core::DpfStatus* context(const std::string& id) const {
    auto it = context_.find(id);
    return it == context_.end() ? nullptr : &it->second;
  }

 protected:
  void apply(const json& obj) override {
    const std::string name = str(at(obj, {"metadata", "name"}));
    ServiceFacts f;
    f.uid = str(at(obj, {"metadata", "uid"}));
    f.service_id = str(at(obj, {"metadata", "labels", core::kOwnerIdLabel}));
    const json& site = at(obj, {"metadata", "labels", core::kSiteLabel});
    f.has_site = !site.is_null();
    f.site = site.is_string() ? site.get<std::string>() : std::string();
    f.being_deleted = !at(obj, {"metadata", "deletionTimestamp"}).is_null();
    const std::string key = core::dpuservice_drift_key(obj);
    std::copy_n(key.begin(), std::min(key.size(), f.drift_key.size()), f.drift_key.begin());
    const core::DpfStatus dpf = core::dpf_status(obj);
    f.dpf_digest = digest(dpf);
    auto it = by_name_.find(name);
    if (it == by_name_.end()) {
      dirty_.services.insert(f.service_id);
      note_dpf(f.service_id, dpf);
      by_name_.emplace(name, std::move(f));
      return;
    }
    ServiceFacts& old = it->second;
    if (old.drift_key != f.drift_key || old.uid != f.uid || old.being_deleted != f.being_deleted ||
        old.service_id != f.service_id) {
      dirty_.services.insert(f.service_id);
      dirty_.services.insert(old.service_id);
    }
    if (old.dpf_digest != f.dpf_digest || old.service_id != f.service_id) {
      note_dpf(f.service_id, dpf);
      dirty_.context.insert(f.service_id);
    }
    if (old.service_id != f.service_id) context_.erase(old.service_id);
    old = std::move(f);
  }
  void remove(const std::string& key) override {
    const std::string name = key.substr(key.find('/') + 1);
    auto it = by_name_.find(name);
    if (it == by_name_.end()) return;
    dirty_.services.insert(it->second.service_id);
    context_.erase(it->second.service_id);
    by_name_.erase(it);
  }
  std::vector<std::string> keys() const override {
    std::vector<std::string> out;
    out.reserve(by_name_.size());
    for (const auto& [name, f] : by_name_) out.push_back(ns_ + "/" + name);
    return out;
  }

 public:
  std::string ns_;

 private:
  static uint64_t digest(const core::DpfStatus& d) {
    const std::string text = std::string(d.ready ? (*d.ready ? "T" : "F") : "-") +
                             (d.paused ? "P" : "-") + d.reason + '\0' + d.message;
    return std::hash<std::string>{}(text);
  }
  // The change goes to the database; the status stays here only while it is context.
  void note_dpf(const std::string& id, const core::DpfStatus& dpf) {
    dirty_.dpf[id] = dpf;
    if (dpf.paused || dpf.ready == std::optional<bool>(false))
      context_[id] = dpf;
    else
      context_.erase(id);
  }
  std::unordered_map<std::string, ServiceFacts> by_name_;
  std::unordered_map<std::string, core::DpfStatus> context_;  // by service id
};

class EventStore : public ClusterCache::Store {
 public:
  using Store::Store;
  size_t size() const override { return map_.size(); }
  std::vector<std::pair<std::string, std::string>> all() const {
    std::vector<std::pair<std::string, std::string>> out;
    out.reserve(map_.size());
    for (const auto& [key, v] : map_) out.push_back(v);
    return out;
  }

 protected:
  void apply(const json& obj) override {
    const std::string key = cache_key_of(obj);
    if (map_.size() >= kMaxEvents && !map_.count(key)) return;  // context only: bounded
    const std::string ds = str(at(obj, {"involvedObject", "name"}));
    const std::string message = str(at(obj, {"message"})).substr(0, 300);
    auto& slot = map_[key];
    if (slot.first == ds && slot.second == message) return;
    slot = {ds, message};
    // DPF's chart contract makes the DaemonSet's name contain the release name (the DPUService's
    // name, "extsvc-" and its hash): the DPUs of that service have something new to say. Looked
    // up by name, not by scanning every service: a re-list may bring thousands of events.
    if (services_ == nullptr) return;
    const auto& by_name = services_->all();
    const size_t len = core::kNamePrefix.size() + core::kIdentityHashLength;
    for (size_t pos = ds.find(core::kNamePrefix); pos != std::string::npos;
         pos = ds.find(core::kNamePrefix, pos + 1)) {
      auto it = by_name.find(ds.substr(pos, len));
      if (it != by_name.end()) dirty_.context.insert(it->second.service_id);
    }
  }
  void remove(const std::string& key) override { map_.erase(key); }
  std::vector<std::string> keys() const override {
    std::vector<std::string> out;
    for (const auto& [key, v] : map_) out.push_back(key);
    return out;
  }

 private:
  std::unordered_map<std::string, std::pair<std::string, std::string>> map_;

 public:
  const ServiceStore* services_ = nullptr;
};

enum Index { kDevices = 0, kServices = 1, kNodes = 2, kPods = 3, kEvents = 4, kDpus = 5 };

}  // namespace

ClusterCache::ClusterCache(kube::Client& management, kube::Client* dpu,
                           const CacheSettings& settings)
    : multi_(std::make_unique<kube::Multi>()), dpu_(dpu) {
  auto devices = std::make_unique<DeviceStore>(dirty_, "dpudevices");
  devices->ns_ = settings.ns;
  auto services = std::make_unique<ServiceStore>(dirty_, "dpuservices");
  services->ns_ = settings.ns;
  stores_.push_back(std::move(devices));
  stores_.push_back(std::move(services));
  stores_.push_back(std::make_unique<NodeStore>(dirty_, "nodes"));
  stores_.push_back(std::make_unique<PodStore>(dirty_, "pods"));
  auto events = std::make_unique<EventStore>(dirty_, "events");
  events->services_ = static_cast<const ServiceStore*>(stores_[kServices].get());
  stores_.push_back(std::move(events));
  stores_.push_back(std::make_unique<DpuObjectStore>(dirty_, "dpus"));
  auto spec = [&](const char* name, const char* cluster, std::string path) {
    kube::ReflectorSpec s;
    s.name = name;
    s.cluster = cluster;
    s.path = std::move(path);
    s.watch_timeout_s = settings.watch_timeout_s;
    s.silence_limit_s = settings.silence_limit_s;
    return s;
  };
  const std::string owner(core::kOwnerIdLabel);
  auto s = spec("dpudevices", "management", kube::dpudevices_path(settings.ns));
  reflectors_.push_back(
      std::make_unique<kube::Reflector>(management, *multi_, s, *stores_[kDevices]));
  s = spec("dpuservices", "management", kube::dpuservices_path(settings.ns));
  s.label_selector = owner;
  reflectors_.push_back(
      std::make_unique<kube::Reflector>(management, *multi_, s, *stores_[kServices]));
  // DPF's DPU objects: the middle hop of the label path (every DPU of the namespace; a CRD
  // offers no field selector on spec.dpuDeviceName)
  s = spec("dpus", "management", kube::dpus_path(settings.ns));
  reflectors_.push_back(std::make_unique<kube::Reflector>(management, *multi_, s, *stores_[kDpus]));
  if (dpu != nullptr) {
    s = spec("nodes", "dpu", kube::nodes_path());
    reflectors_.push_back(std::make_unique<kube::Reflector>(*dpu, *multi_, s, *stores_[kNodes]));
    s = spec("pods", "dpu", kube::pods_path(settings.ns));
    s.label_selector = owner;
    reflectors_.push_back(std::make_unique<kube::Reflector>(*dpu, *multi_, s, *stores_[kPods]));
    s = spec("events", "dpu", kube::events_path(settings.ns));
    s.field_selector = "involvedObject.kind=DaemonSet,reason=FailedCreate";
    reflectors_.push_back(std::make_unique<kube::Reflector>(*dpu, *multi_, s, *stores_[kEvents]));
  }
}

ClusterCache::~ClusterCache() {
  reflectors_.clear();  // their transfers leave the multi before it goes
}

void ClusterCache::pump() {
  multi_->pump();
  for (auto& r : reflectors_) r->step();
  note_outages();
}

namespace {
bool is_management(const kube::Reflector& r);
bool not_served(const kube::Reflector& r);
bool is_dpu_evidence(const kube::Reflector& r);
}  // namespace

void ClusterCache::note_outages() {
  // An outage begins when an informer of the cluster fails (backs off) and ends when every one
  // of them streams again; a re-list, or a watch resumed at its timeout, is not one.
  constexpr auto kOutage = std::chrono::seconds(5);
  const auto now = Clock::now();
  auto track = [&](bool synced, bool failing, bool current, std::optional<Clock::time_point>& since,
                   const char* cluster, auto&& mark_all) {
    if (!synced) return;
    if (failing) {
      if (!since) since = now;
      return;
    }
    if (!since || !current) return;
    if (now - *since >= kOutage) {
      spdlog::info("watch: the {} cluster is observed again after {} s; every DPU is derived again",
                   cluster, std::chrono::duration_cast<std::chrono::seconds>(now - *since).count());
      mark_all();
    }
    since.reset();
  };
  auto failing = [&](auto&& pick) {
    for (const auto& r : reflectors_)
      if (pick(*r) && r->phase() == kube::Reflector::Phase::kBackoff) return true;
    return false;
  };
  track(management_synced(), failing(is_management), management_current(), management_outage_,
        "management", [&] {
          for (const auto& key : static_cast<const DeviceStore&>(*stores_[kDevices]).names())
            dirty_.devices.insert(key);
        });
  if (dpu_ != nullptr)
    track(dpu_synced(), failing(is_dpu_evidence), dpu_current(), dpu_outage_, "DPU", [&] {
      for (const auto& key : static_cast<const NodeStore&>(*stores_[kNodes]).names())
        dirty_.nodes.insert(key);
    });
}

long ClusterCache::next_timer_ms() const {
  long t = multi_->timeout_ms();
  for (const auto& r : reflectors_) {
    const long s = r->next_step_in();
    if (s >= 0 && (t < 0 || s < t)) t = s;
  }
  return t;
}

void ClusterCache::request_relist() {
  relist_tickets_.clear();
  for (auto& r : reflectors_) relist_tickets_.push_back(r->request_relist());
}

bool ClusterCache::relist_done() const {
  for (size_t i = 0; i < reflectors_.size() && i < relist_tickets_.size(); ++i) {
    const auto& r = reflectors_[i];
    if (r->spec().name == "events") continue;  // context only
    // a failing informer (an unreachable cluster) will not list soon: not waited for
    if (r->phase() == kube::Reflector::Phase::kBackoff) continue;
    const auto done = r->last_list_started();
    if (!done || *done < relist_tickets_[i]) return false;
  }
  return true;
}

Dirty ClusterCache::take_dirty() {
  Dirty out;
  if (!management_synced()) return out;
  std::swap(out, dirty_);
  out.devices.erase(std::string());
  out.nodes.erase(std::string());
  out.services.erase(std::string());
  out.dpf.erase(std::string());
  out.context.erase(std::string());
  return out;
}

void ClusterCache::restore_dirty(Dirty&& d) {
  dirty_.devices.merge(d.devices);
  dirty_.nodes.merge(d.nodes);
  dirty_.services.merge(d.services);
  for (auto& [id, st] : d.dpf) dirty_.dpf.try_emplace(id, std::move(st));
  dirty_.context.merge(d.context);
}

namespace {

template <class Pred>
std::optional<std::chrono::system_clock::time_point> current_of(
    const std::vector<std::unique_ptr<kube::Reflector>>& rs, Pred pred) {
  std::optional<std::chrono::steady_clock::time_point> oldest;
  bool any = false;
  for (const auto& r : rs) {
    if (!pred(*r)) continue;
    any = true;
    const auto at = r->current_at();
    if (!at) return std::nullopt;
    if (!oldest || *at < *oldest) oldest = at;
  }
  if (!any || !oldest) return std::nullopt;
  return to_wall(*oldest);
}

// Never listed, and the last LIST answered 404 for the resource (a DPF release without that CRD).
// Once DPF serves it, the next LIST succeeds and the informer counts again.
bool not_served(const kube::Reflector& r) {
  return !r.synced() && reconcile::resource_not_served(r.last_error());
}

bool is_management(const kube::Reflector& r) {
  // an informer of a resource the API does not serve holds nothing and waits for nothing
  return r.spec().cluster == "management" && !not_served(r);
}
bool is_dpu_evidence(const kube::Reflector& r) {
  return r.spec().cluster == "dpu" && r.spec().name != "events";  // events are context only
}

}  // namespace

bool ClusterCache::management_synced() const {
  for (const auto& r : reflectors_)
    if (is_management(*r) && !r->synced()) return false;
  return true;
}

bool ClusterCache::dpu_synced() const {
  if (dpu_ == nullptr) return false;
  for (const auto& r : reflectors_)
    if (is_dpu_evidence(*r) && !r->synced()) return false;
  return true;
}

bool ClusterCache::dpu_current() const {
  if (dpu_ == nullptr) return false;
  for (const auto& r : reflectors_)
    if (is_dpu_evidence(*r) && !r->current()) return false;
  return true;
}

bool ClusterCache::management_current() const {
  for (const auto& r : reflectors_)
    if (is_management(*r) && !r->current()) return false;
  return true;
}

std::optional<std::chrono::system_clock::time_point> ClusterCache::management_current_at() const {
  return current_of(reflectors_, is_management);
}

std::optional<std::chrono::system_clock::time_point> ClusterCache::dpu_current_at() const {
  return current_of(reflectors_, is_dpu_evidence);
}

std::string ClusterCache::management_error() const {
  for (const auto& r : reflectors_)
    if (is_management(*r) && !r->last_error().empty())
      return r->spec().name + ": " + r->last_error();
  return {};
}

std::string ClusterCache::dpu_error() const {
  for (const auto& r : reflectors_)
    if (is_dpu_evidence(*r) && !r->last_error().empty())
      return r->spec().name + ": " + r->last_error();
  return {};
}

bool ClusterCache::dpudevices_not_served() const {
  for (const auto& r : reflectors_)
    if (r->spec().name == "dpudevices") return not_served(*r);
  return false;
}

const DeviceFacts* ClusterCache::device(const std::string& name) const {
  return static_cast<const DeviceStore&>(*stores_[kDevices]).find(name);
}

const core::DpuObjectFacts* ClusterCache::dpu_object(const std::string& name) const {
  return static_cast<const DpuObjectStore&>(*stores_[kDpus]).find(name);
}

const NodeFacts* ClusterCache::node(const std::string& name) const {
  return static_cast<const NodeStore&>(*stores_[kNodes]).find(name);
}

std::vector<const core::PodFacts*> ClusterCache::pods_on(const std::string& node) const {
  return static_cast<const PodStore&>(*stores_[kPods]).on(node);
}

const core::DpfStatus* ClusterCache::dpf_context(const std::string& service_id) const {
  return static_cast<const ServiceStore&>(*stores_[kServices]).context(service_id);
}

const std::unordered_map<std::string, ServiceFacts>& ClusterCache::services_by_name() const {
  return static_cast<const ServiceStore&>(*stores_[kServices]).all();
}

std::vector<std::pair<std::string, std::string>> ClusterCache::failed_creates() const {
  return static_cast<const EventStore&>(*stores_[kEvents]).all();
}

void ClusterCache::device_patched(const std::string&, const nlohmann::json& response) {
  static_cast<DeviceStore&>(*stores_[kDevices]).patched(response);
  // our own write: the pass that made it is the one that looks at it
  dirty_.devices.erase(str(at(response, {"metadata", "name"})));
}

std::vector<ClusterCache::InformerInfo> ClusterCache::informers() const {
  std::vector<InformerInfo> out;
  for (const auto& r : reflectors_) {
    InformerInfo i;
    i.name = r->spec().name;
    i.cluster = r->spec().cluster;
    i.synced = r->synced();
    i.current = r->current();
    i.stats = r->stats();
    i.last_error = r->last_error();
    if (auto at = r->current_at())
      i.current_at_us =
          std::chrono::duration_cast<std::chrono::microseconds>(to_wall(*at).time_since_epoch())
              .count();
    for (const auto& s : stores_)
      if (s->name() == i.name) i.objects = s->size();
    out.push_back(std::move(i));
  }
  return out;
}

}  // namespace extsvc::controller
