#include "reconcile/dpu_reconciler.hpp"

#include <utility>
#include <vector>

#include "core/deployment_status.hpp"
#include "core/merge_patch.hpp"
#include "kube/error.hpp"

namespace extsvc::reconcile {

namespace {

using nlohmann::json;

const json& at(const json& j, std::initializer_list<const char*> path) {
  static const json kNull;
  const json* cur = &j;
  for (const char* k : path) {
    if (!cur->is_object()) return kNull;
    auto it = cur->find(k);
    if (it == cur->end()) return kNull;
    cur = &*it;
  }
  return *cur;
}

bool has_label(const json& labels, const std::string& key, bool require_enabled) {
  if (!labels.is_object()) return false;
  auto it = labels.find(key);
  if (it == labels.end()) return false;
  return !require_enabled || (it->is_string() && it->get<std::string>() == "enabled");
}

bool owned_by_daemonset(const json& pod, const std::string& ds) {
  for (const auto& ref : at(pod, {"metadata", "ownerReferences"})) {
    if (ref.value("kind", "") == "DaemonSet" && ref.value("name", "") == ds) return true;
  }
  return false;
}

bool pod_ready(const json& pod) {
  if (!at(pod, {"metadata", "deletionTimestamp"}).is_null()) return false;
  for (const auto& c : at(pod, {"status", "conditions"}))
    if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
  return false;
}

bool pod_terminal(const json& pod) {
  const auto phase = at(pod, {"status", "phase"});
  return phase.is_string() && (phase == "Succeeded" || phase == "Failed");
}

std::vector<DpuItemResult> all(const DpuWork& w, const std::string& state, const std::string& msg) {
  std::vector<DpuItemResult> out;
  for (const auto& item : w.items) out.push_back({&item, state, msg});
  return out;
}

json nico_labels(const json& labels) {
  json out = json::object();
  if (labels.is_object())
    for (auto it = labels.begin(); it != labels.end(); ++it)
      if (it.key().rfind("nico/extsvc-", 0) == 0) out[it.key()] = *it;
  return out;
}

}  // namespace

const std::map<std::string, std::string>* DpuReconciler::current_revisions(std::string* error) {
  if (revisions_) return &*revisions_;
  if (!revisions_error_.empty()) {
    *error = revisions_error_;
    return nullptr;
  }
  ++calls_;
  auto listed = dpu_->list(kube::controllerrevisions_path(ns_), "");
  if (!listed.ok()) {
    revisions_error_ = "listing ControllerRevisions: " + kube::describe(listed.error());
    *error = revisions_error_;
    return nullptr;
  }
  // The current revision of a DaemonSet is its ControllerRevision with the
  // highest revision number.
  std::map<std::string, std::pair<int64_t, std::string>> best;
  for (const auto& cr : listed.value().body["items"]) {
    const auto hash = at(cr, {"metadata", "labels", "controller-revision-hash"});
    if (!hash.is_string()) continue;
    const int64_t rev = cr.value("revision", int64_t{0});
    for (const auto& ref : at(cr, {"metadata", "ownerReferences"})) {
      if (ref.value("kind", "") != "DaemonSet") continue;
      auto& b = best[ref.value("name", "")];
      if (rev >= b.first) b = {rev, hash.get<std::string>()};
    }
  }
  revisions_.emplace();
  for (auto& [ds, v] : best) (*revisions_)[ds] = v.second;
  return &*revisions_;
}

const std::map<std::string, DpuReconciler::Rollout>* DpuReconciler::rollouts(std::string* error) {
  if (rollouts_) return &*rollouts_;
  if (!rollouts_error_.empty()) {
    *error = rollouts_error_;
    return nullptr;
  }
  ++calls_;
  auto services = mgmt_.list(kube::dpuservices_path(ns_), "nico/extension-service-id");
  if (!services.ok()) {
    rollouts_error_ = "listing DPUServices: " + kube::describe(services.error());
    *error = rollouts_error_;
    return nullptr;
  }
  ++calls_;
  auto daemonsets = dpu_->list(kube::daemonsets_path(ns_), "");
  if (!daemonsets.ok()) {
    rollouts_error_ = "listing DaemonSets: " + kube::describe(daemonsets.error());
    *error = rollouts_error_;
    return nullptr;
  }
  std::map<std::string, Rollout> out;
  for (const auto& svc : services.value().body["items"]) {
    Rollout r;
    r.generation = at(svc, {"metadata", "generation"}).is_number_integer()
                       ? at(svc, {"metadata", "generation"}).get<int64_t>()
                       : 0;
    const auto& observed = at(svc, {"status", "observedGeneration"});
    r.dpf_observed = observed.is_number_integer() && observed.get<int64_t>() == r.generation;
    for (const auto& c : at(svc, {"status", "conditions"}))
      if (c.value("type", "") == "Ready")
        r.dpf_ready = r.dpf_observed && c.value("status", "") == "True";
    out[at(svc, {"metadata", "name"}).is_string() ? at(svc, {"metadata", "name"}).get<std::string>()
                                                  : std::string()] = r;
  }
  for (const auto& ds : daemonsets.value().body["items"]) {
    const auto& name = at(ds, {"metadata", "name"});
    if (!name.is_string()) continue;
    auto it = out.find(name.get<std::string>());
    if (it == out.end()) continue;
    const auto& gen = at(ds, {"metadata", "generation"});
    const auto& observed = at(ds, {"status", "observedGeneration"});
    it->second.daemonset_current = gen.is_number_integer() && observed.is_number_integer() &&
                                   gen.get<int64_t>() == observed.get<int64_t>();
  }
  rollouts_.emplace(std::move(out));
  return &*rollouts_;
}

DpuOutcome DpuReconciler::reconcile(const DpuWork& w) {
  calls_ = 0;
  DpuOutcome out;
  const std::string device_path = kube::dpudevices_path(ns_, w.device_name);

  // 1. Placement: one merge patch of the NICo-owned keys, only on difference.
  ++calls_;
  auto device = mgmt_.get(device_path);
  if (!device.ok()) {
    const auto& e = device.error();
    if (e.kind == kube::ErrorKind::kNotFound) {
      out.results = all(w, "ERROR", "DPUDevice " + w.device_name + " not found");
      out.message = out.results.empty() ? "" : out.results.front().message;
    } else {
      out.retry = true;
      out.message = "reading DPUDevice " + w.device_name + ": " + kube::describe(e);
      out.http_status = e.http_status ? std::optional<int>(e.http_status) : std::nullopt;
      out.retry_after_s = e.retry_after_s;
    }
    out.api_calls = calls_;
    return out;
  }
  json evidence = device.value().body;
  const json patch =
      core::node_labels_patch(at(evidence, {"spec", "cluster", "nodeLabels"}), w.wanted_keys);
  if (!patch.empty()) {
    ++calls_;
    auto patched = mgmt_.merge_patch(device_path, patch);
    if (!patched.ok()) {
      const auto& e = patched.error();
      if (kube::is_transient(e)) {
        out.retry = true;
        out.message = "patching DPUDevice " + w.device_name + ": " + kube::describe(e);
        out.http_status = e.http_status ? std::optional<int>(e.http_status) : std::nullopt;
        out.retry_after_s = e.retry_after_s;
      } else {
        out.results =
            all(w, "ERROR",
                "patching DPUDevice " + w.device_name + " was refused: " + kube::describe(e));
        out.message = out.results.empty() ? kube::describe(e) : out.results.front().message;
      }
      out.api_calls = calls_;
      return out;
    }
    evidence = patched.value().body;  // the PATCH response is the placement evidence
    out.patched = true;
  }
  const json& device_labels = at(evidence, {"spec", "cluster", "nodeLabels"});
  out.observation["dpudevice"] = nico_labels(device_labels);
  out.observation["patched"] = out.patched;

  // 2. Observation of the DPU cluster: the Node and the pods on it.
  auto unknown = [&](const std::string& why) {
    out.results = all(w, "UNKNOWN", why);
    out.observation["dpu_cluster"] = why;
    out.api_calls = calls_;
    return out;
  };
  if (dpu_ == nullptr) return unknown("DPU cluster not configured; nothing can be observed");
  ++calls_;
  auto node = dpu_->get(kube::nodes_path(w.node_name));
  if (!node.ok()) {
    if (node.kind() == kube::ErrorKind::kNotFound)
      return unknown("Node " + w.node_name + " not found in the DPU cluster (unmapped)");
    return unknown("DPU cluster unreachable: " + kube::describe(node.error()));
  }
  const json& node_labels = at(node.value().body, {"metadata", "labels"});
  out.observation["node"] = nico_labels(node_labels);
  ++calls_;
  auto pods = dpu_->list(kube::pods_path(ns_), "svc.dpu.nvidia.com/service",
                         "spec.nodeName=" + w.node_name);
  if (!pods.ok()) return unknown("DPU cluster unreachable: " + kube::describe(pods.error()));
  const json& pod_items = pods.value().body["items"];
  out.observation["pods"] = pod_items.size();

  // Revisions and rollout progress are needed only when something is wanted.
  const std::map<std::string, std::string>* revisions = nullptr;
  const std::map<std::string, Rollout>* progress = nullptr;
  std::string rev_error;
  for (const auto& item : w.items)
    if (item.wanted) {
      revisions = current_revisions(&rev_error);
      if (revisions != nullptr) progress = rollouts(&rev_error);
      break;
    }

  for (const auto& item : w.items) {
    core::DpuObservation o{};
    o.wanted = item.wanted;
    o.observed = true;
    o.device_has_label = has_label(device_labels, item.label_key, item.wanted);
    o.node_has_label = has_label(node_labels, item.label_key, item.wanted);
    std::string current;
    std::string rollout_wait;
    if (item.wanted) {
      if (revisions == nullptr || progress == nullptr) {
        out.results.push_back({&item, "UNKNOWN", rev_error});
        continue;
      }
      auto it = revisions->find(item.dpf_service_name);
      if (it != revisions->end()) current = it->second;
      // The DaemonSet's current revision means something only once DPF has
      // processed the DPUService's latest generation and the DaemonSet
      // controller its own; until then a Ready pod may be of an older spec.
      auto r = progress->find(item.dpf_service_name);
      if (r == progress->end()) {
        rollout_wait = "waiting for the DPUService to exist";
      } else if (!r->second.dpf_observed) {
        rollout_wait =
            "waiting for DPF to process generation " + std::to_string(r->second.generation);
      } else if (!r->second.daemonset_current) {
        rollout_wait = "waiting for the DaemonSet to roll out the new spec";
      } else if (!r->second.dpf_ready) {
        // DPF's Ready covers the whole rollout; before it, the DaemonSet may
        // not yet carry the new spec, so a Ready pod proves nothing new.
        rollout_wait = "waiting for DPF to report generation " +
                       std::to_string(r->second.generation) + " Ready";
      }
      if (r == progress->end() || !r->second.dpf_ready) out.keep_polling = true;
      if (!rollout_wait.empty()) current.clear();
    }
    for (const auto& pod : pod_items) {
      if (!owned_by_daemonset(pod, item.dpf_service_name)) continue;
      if (!pod_terminal(pod)) ++o.nonterminal_pods;
      const auto hash = at(pod, {"metadata", "labels", "controller-revision-hash"});
      if (!current.empty() && hash.is_string() && hash == current && pod_ready(pod))
        ++o.ready_pods_current_revision;
    }
    const auto state = core::derive_deployment_state(o);
    std::string msg;
    switch (state) {
      case core::DeploymentState::kRunning:
        msg = "pod of revision " + current + " Ready on " + w.node_name;
        break;
      case core::DeploymentState::kPending:
        msg = !o.device_has_label     ? "waiting for the DPUDevice label"
              : !o.node_has_label     ? "waiting for DPF to copy the label to the Node"
              : !rollout_wait.empty() ? rollout_wait
              : current.empty()       ? "waiting for the DaemonSet's first revision"
                                      : "waiting for a Ready pod of revision " + current;
        break;
      case core::DeploymentState::kTerminating:
        msg = (o.device_has_label || o.node_has_label)
                  ? "label still present"
                  : std::to_string(o.nonterminal_pods) + " pod(s) still on the Node";
        break;
      case core::DeploymentState::kTerminated:
        msg = "label absent on DPUDevice and Node; no pod on the Node";
        break;
      default:
        break;
    }
    out.results.push_back({&item, std::string(core::to_string(state)), msg});
  }
  out.api_calls = calls_;
  return out;
}

}  // namespace extsvc::reconcile
