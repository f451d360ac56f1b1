#include "controller/cluster_cache.hpp"

#include <spdlog/spdlog.h>

#include "controller/cache_store.hpp"
#include "controller/device_node_store.hpp"
#include "controller/dpu_object_store.hpp"
#include "controller/service_store.hpp"
#include "controller/workload_store.hpp"
#include "core/identity.hpp"
#include "core/json_access.hpp"
#include "reconcile/dpu_observer.hpp"

namespace extsvc::controller {

namespace {

using nlohmann::json;

}  // namespace

std::chrono::system_clock::time_point to_wall(std::chrono::steady_clock::time_point t) {
  const auto now_steady = std::chrono::steady_clock::now();
  const auto now_wall = std::chrono::system_clock::now();
  return now_wall - std::chrono::duration_cast<std::chrono::system_clock::duration>(now_steady - t);
}

namespace {

enum Index {
  kDevices = 0,
  kServices = 1,
  kNodes = 2,
  kPods = 3,
  kEvents = 4,
  kDpus = 5,
  kDaemonSets = 6
};

}  // namespace

ClusterCache::ClusterCache(kube::Client& management, kube::Client* dpu,
                           const CacheSettings& settings)
    : multi_(std::make_unique<kube::Multi>()), dpu_(dpu) {
  stores_.push_back(std::make_unique<DeviceStore>(dirty_, "dpudevices"));
  stores_.push_back(std::make_unique<ServiceStore>(dirty_, "dpuservices"));
  stores_.push_back(std::make_unique<NodeStore>(dirty_, "nodes"));
  stores_.push_back(std::make_unique<PodStore>(dirty_, "pods"));
  stores_.push_back(std::make_unique<EventStore>(
      dirty_, "events", static_cast<const ServiceStore&>(*stores_[kServices])));
  stores_.push_back(std::make_unique<DpuObjectStore>(dirty_, "dpus"));
  auto daemonsets = std::make_unique<DaemonSetStore>(dirty_, "daemonsets");
  auto& pods = static_cast<PodStore&>(*stores_[kPods]);
  pods.set_daemonsets(daemonsets.get());
  daemonsets->set_pods(&pods);
  stores_.push_back(std::move(daemonsets));
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
    // every namespace and no label selector (issue 23, part 2): a chart may drop our label or
    // render elsewhere; the store keeps the labelled pods and the DaemonSets' pods
    s = spec("pods", "dpu", kube::pods_path());
    reflectors_.push_back(std::make_unique<kube::Reflector>(*dpu, *multi_, s, *stores_[kPods]));
    // the DaemonSets Argo applied for our DPUServices (tracking-id), in every namespace
    s = spec("daemonsets", "dpu", kube::daemonsets_path(""));
    reflectors_.push_back(
        std::make_unique<kube::Reflector>(*dpu, *multi_, s, *stores_[kDaemonSets]));
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
  // An outage begins when an informer of the cluster fails (backs off) and ends when none of
  // them does; a re-list, or a watch resumed at its timeout, is not one. Its length decides once
  // every informer streams again (the re-list done), so that what the list changed is known.
  constexpr auto kOutage = std::chrono::seconds(5);
  const auto now = Clock::now();
  auto track = [&](bool synced, bool failing, bool current, Outage& o, const char* cluster,
                   auto&& mark_all) {
    if (!synced) return;
    if (failing) {
      if (!o.since) o.since = now;
      o.until.reset();
      return;
    }
    if (!o.since) return;
    if (!o.until) o.until = now;
    if (!current) return;
    const auto lasted = *o.until - *o.since;
    if (lasted >= kOutage) {
      spdlog::info(
          "watch: the {} cluster is observed again after an outage of {} s; every DPU is derived "
          "again",
          cluster, std::chrono::duration_cast<std::chrono::seconds>(lasted).count());
      mark_all();
    }
    o = Outage{};
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
  if (!synced_taken_) out.every_deleting = synced_taken_ = true;
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
  dirty_.every_deleting = dirty_.every_deleting || d.every_deleting;
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
  return static_cast<const DeviceStore&>(*stores_[kDevices]).get(name);
}

const core::DpuObjectFacts* ClusterCache::dpu_object(const std::string& name) const {
  return static_cast<const DpuObjectStore&>(*stores_[kDpus]).get(name);
}

const NodeFacts* ClusterCache::node(const std::string& name) const {
  return static_cast<const NodeStore&>(*stores_[kNodes]).get(name);
}

std::vector<const core::PodFacts*> ClusterCache::pods_on(const std::string& node) const {
  return static_cast<const PodStore&>(*stores_[kPods]).on(node);
}

std::string ClusterCache::release_of(const std::string& owner_uid) const {
  return static_cast<const DaemonSetStore&>(*stores_[kDaemonSets]).release_of(owner_uid);
}

const core::DpfStatus* ClusterCache::dpf_context(const std::string& service_id) const {
  return static_cast<const ServiceStore&>(*stores_[kServices]).context(service_id);
}

reconcile::CachedDpuService ClusterCache::dpuservice(const std::string& name) const {
  const auto& store = static_cast<const ServiceStore&>(*stores_[kServices]);
  reconcile::CachedDpuService c;
  const ServiceFacts* f = store.get(name);
  if (f == nullptr) {
    c.gone_uid = store.gone_uid(name);
    return c;
  }
  c.present = true;
  c.uid = f->uid;
  c.resource_version = f->resource_version;
  c.service_id = f->service_id;
  c.site = f->site;
  c.has_site = f->has_site;
  c.being_deleted = f->being_deleted;
  c.drift_key.assign(f->drift_key.begin(), f->drift_key.end());
  c.drift_shape = f->drift_shape;
  if (const core::DpfStatus* dpf = store.context(f->service_id)) c.paused = dpf->paused;
  return c;
}

const std::unordered_map<std::string, ServiceFacts>& ClusterCache::services_by_name() const {
  return static_cast<const ServiceStore&>(*stores_[kServices]).items();
}

std::vector<std::pair<std::string, std::string>> ClusterCache::failed_creates() const {
  return static_cast<const EventStore&>(*stores_[kEvents]).all();
}

void ClusterCache::device_patched(const std::string&, const nlohmann::json& response) {
  static_cast<DeviceStore&>(*stores_[kDevices]).patched(response);
  // our own write: the pass that made it is the one that looks at it
  dirty_.devices.erase(core::json_text(core::json_at(response, {"metadata", "name"})));
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
