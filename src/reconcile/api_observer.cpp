// The polling mode's observer (dpu_observer.hpp): every read is an API call.
#include <utility>
#include <vector>

#include "core/dpf_status.hpp"
#include "core/identity.hpp"
#include "core/json_access.hpp"
#include "core/pod_status.hpp"
#include "core/utf8.hpp"
#include "core/workload.hpp"
#include "kube/error.hpp"
#include "reconcile/dpu_observer.hpp"

namespace extsvc::reconcile {

namespace {
using nlohmann::json;
}  // namespace

DeviceRead ApiObserver::device(const std::string& name) {
  DeviceRead r;
  ++calls_;
  auto got = mgmt_.get(kube::dpudevices_path(ns_, name));
  if (!got.ok()) {
    if (got.kind() == kube::ErrorKind::kNotFound) {
      r.state = DeviceRead::State::kMissing;
      r.resource_missing = resource_not_served(got.error().message);
    } else {
      r.state = DeviceRead::State::kUnavailable;
      r.error = got.error();
    }
    return r;
  }
  r.state = DeviceRead::State::kFound;
  const json& body = got.value().body;
  r.node_labels = core::json_at(body, {"spec", "cluster", "nodeLabels"});
  if (const json& rv = core::json_at(body, {"metadata", "resourceVersion"}); rv.is_string())
    r.resource_version = rv.get<std::string>();
  return r;
}

NodeRead ApiObserver::node(const std::string& name) {
  NodeRead r;
  ++calls_;
  auto node = dpu_->get(kube::nodes_path(name));
  if (!node.ok()) {
    if (node.kind() == kube::ErrorKind::kNotFound) {
      r.state = NodeRead::State::kMissing;
    } else {
      r.state = NodeRead::State::kUnavailable;
      r.why = "DPU cluster unreachable: " + kube::describe(node.error());
    }
    return r;
  }
  r.state = NodeRead::State::kFound;
  r.labels = core::json_at(node.value().body, {"metadata", "labels"});
  r.facts = core::node_facts(node.value().body);
  return r;
}

DpuObjectRead ApiObserver::dpu_object(const std::string& name) {
  DpuObjectRead r;
  ++calls_;
  auto got = mgmt_.get(kube::dpus_path(ns_, name));
  if (!got.ok()) {
    if (got.kind() == kube::ErrorKind::kNotFound) {
      r.state = DpuObjectRead::State::kMissing;
    } else {
      r.state = DpuObjectRead::State::kUnavailable;
      r.error = got.error();
    }
    return r;
  }
  r.state = DpuObjectRead::State::kFound;
  r.facts = core::dpu_object_facts(got.value().body);
  return r;
}

PodsRead ApiObserver::pods(const std::string& node) {
  PodsRead r;
  // Every pod on the Node, in every namespace and labelled or not (issue 23, part 2): a chart
  // may drop the injected label or render into another namespace; its pods still count.
  ++calls_;
  auto pods = dpu_->list(kube::pods_path(), "", "spec.nodeName=" + node);
  if (!pods.ok()) {
    r.why = "DPU cluster unreachable: " + kube::describe(pods.error());
    return r;
  }
  // A pod the scheduler has not bound has no spec.nodeName; its Node is named by its node
  // affinity only, which no field selector reads: the unbound pods, filtered here.
  ++calls_;
  auto unbound = dpu_->list(kube::pods_path(), "", "spec.nodeName=");
  if (!unbound.ok()) {
    r.why = "DPU cluster unreachable: " + kube::describe(unbound.error());
    return r;
  }
  std::vector<core::PodFacts> candidates;
  for (const auto& pod : pods.value().body["items"]) candidates.push_back(core::pod_facts(pod));
  for (const auto& pod : unbound.value().body["items"])
    if (core::PodFacts f = core::pod_facts(pod); f.node == node) candidates.push_back(std::move(f));
  r.ok = true;
  for (auto& f : candidates) {
    if (f.service_id.empty() && !f.owner_uid.empty()) {
      const auto& owners = tracked_daemonsets();
      if (auto it = owners.find(f.owner_uid); it != owners.end()) f.release = it->second;
    }
    if (!f.service_id.empty() || !f.release.empty()) r.pods.push_back(std::move(f));
  }
  return r;
}

std::string ApiObserver::release_of(const core::PodFacts& pod) {
  if (!pod.release.empty() || pod.owner_uid.empty()) return pod.release;
  const auto& owners = tracked_daemonsets();
  auto it = owners.find(pod.owner_uid);
  return it == owners.end() ? std::string() : it->second;
}

const std::map<std::string, std::string>& ApiObserver::tracked_daemonsets() {
  // listed once per batch, and only when an unlabelled pod needs it (the label is the fast path)
  if (!daemonsets_) {
    daemonsets_.emplace();
    ++calls_;
    auto listed = dpu_->list(kube::daemonsets_path(""), "");
    if (listed.ok())
      for (const auto& ds : listed.value().body["items"])
        if (std::string svc = core::tracked_dpuservice(ds); !svc.empty())
          (*daemonsets_)[core::json_text_at(ds, {"metadata", "uid"})] = std::move(svc);
  }
  return *daemonsets_;
}

const core::DpfStatus* ApiObserver::dpf_status(const std::string& service_id) {
  // context only: skipped (not listed) when the fence says no
  if (!dpf_listed_ && budget_ != nullptr && !budget_->may_write()) return nullptr;
  if (!dpf_listed_) {
    dpf_listed_ = true;
    ++calls_;
    auto listed = mgmt_.list(kube::dpuservices_path(ns_), std::string(core::kOwnerIdLabel));
    if (listed.ok())
      for (const auto& svc : listed.value().body["items"]) {
        const auto& id = core::json_at(svc, {"metadata", "labels", "nico/extension-service-id"});
        if (id.is_string()) dpf_[id.get<std::string>()] = core::dpf_status(svc);
      }
  }
  auto it = dpf_.find(service_id);
  return it == dpf_.end() ? nullptr : &it->second;
}

const std::vector<std::pair<std::string, std::string>>& ApiObserver::failed_creates() {
  static const std::vector<std::pair<std::string, std::string>> kNone;
  // context only: skipped (not listed) when the fence says no
  if (!failed_creates_ && budget_ != nullptr && !budget_->may_write()) return kNone;
  if (!failed_creates_) {
    failed_creates_.emplace();
    ++calls_;
    auto listed =
        dpu_->list(kube::events_path(ns_), "", "involvedObject.kind=DaemonSet,reason=FailedCreate");
    if (listed.ok())
      for (const auto& ev : listed.value().body["items"]) {
        const auto& name = core::json_at(ev, {"involvedObject", "name"});
        const auto& message = core::json_at(ev, {"message"});
        if (name.is_string() && message.is_string())
          failed_creates_->emplace_back(name.get<std::string>(),
                                        core::utf8_prefix(message.get<std::string>(), 300));
      }
  }
  return *failed_creates_;
}

}  // namespace extsvc::reconcile
