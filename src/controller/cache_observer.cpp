#include "controller/cache_observer.hpp"

#include <algorithm>

namespace extsvc::controller {

namespace {

nlohmann::json to_json(const NicoLabels& labels) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [k, v] : labels) out[k] = v;
  return out;
}

double unix_seconds(std::chrono::system_clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

}  // namespace

reconcile::DeviceRead CacheObserver::device(const std::string& name) {
  reconcile::DeviceRead r;
  if (cache_.dpudevices_not_served()) {
    r.state = reconcile::DeviceRead::State::kMissing;
    r.resource_missing = true;
    return r;
  }
  if (!cache_.management_synced()) {
    const std::string err = cache_.management_error();
    r.why = "the watch cache of the management cluster has not listed yet" +
            (err.empty() ? std::string() : " (" + err + ")");
    return r;
  }
  const DeviceFacts* f = cache_.device(name);
  if (f == nullptr) {
    r.state = reconcile::DeviceRead::State::kMissing;
    return r;
  }
  r.state = reconcile::DeviceRead::State::kFound;
  r.node_labels = to_json(f->labels);
  r.resource_version = f->resource_version;
  return r;
}

reconcile::NodeRead CacheObserver::node(const std::string& name) {
  reconcile::NodeRead r;
  if (!cache_.dpu_synced()) {
    const std::string err = cache_.dpu_error();
    r.why = "DPU cluster not observed yet" + (err.empty() ? std::string(" (listing)") : ": " + err);
    return r;
  }
  const NodeFacts* f = cache_.node(name);
  if (f == nullptr) {
    r.state = reconcile::NodeRead::State::kMissing;
    return r;
  }
  r.state = reconcile::NodeRead::State::kFound;
  r.labels = to_json(f->labels);
  r.facts = *f;
  return r;
}

reconcile::DpuObjectRead CacheObserver::dpu_object(const std::string& name) {
  reconcile::DpuObjectRead r;
  if (!cache_.management_synced()) {
    r.why = "the watch cache of the management cluster has not listed yet";
    return r;
  }
  const core::DpuObjectFacts* f = cache_.dpu_object(name);
  if (f == nullptr) {
    r.state = reconcile::DpuObjectRead::State::kMissing;
    return r;
  }
  r.state = reconcile::DpuObjectRead::State::kFound;
  r.facts = *f;
  return r;
}

reconcile::PodsRead CacheObserver::pods(const std::string& node) {
  reconcile::PodsRead r;
  if (!cache_.dpu_synced()) {
    r.why = "DPU cluster not observed yet";
    return r;
  }
  r.ok = true;
  for (const core::PodFacts* p : cache_.pods_on(node)) r.pods.push_back(*p);
  return r;
}

const core::DpfStatus* CacheObserver::dpf_status(const std::string& service_id) {
  return cache_.dpf_context(service_id);
}

const std::vector<std::pair<std::string, std::string>>& CacheObserver::failed_creates() {
  if (!failed_read_) {
    failed_read_ = true;
    failed_ = cache_.failed_creates();
  }
  return failed_;
}

std::optional<double> CacheObserver::observed_at() {
  auto m = cache_.management_current_at();
  if (!m) return std::nullopt;
  auto t = *m;
  if (cache_.dpu_configured() && cache_.dpu_synced())
    if (auto d = cache_.dpu_current_at()) t = std::min(t, *d);
  // evidence current right now needs no timestamp: the database's now() is the same moment
  if (std::chrono::system_clock::now() - t < std::chrono::seconds(1)) return std::nullopt;
  return unix_seconds(t);
}

bool CacheObserver::current() const {
  if (!cache_.management_current()) return false;
  return !cache_.dpu_configured() || cache_.dpu_current();
}

std::string CacheObserver::not_current_why() const {
  std::string why = cache_.dpu_error();
  if (why.empty()) why = cache_.management_error();
  return "the watch of the clusters is not current (" +
         (why.empty() ? std::string("reconnecting") : why) + ")";
}

}  // namespace extsvc::controller
