#include "reconcile/dpu_reconciler.hpp"

#include <set>
#include <utility>
#include <vector>

#include "core/deployment_status.hpp"
#include "core/identity.hpp"
#include "core/json_access.hpp"
#include "core/merge_patch.hpp"
#include "core/placement_keys.hpp"
#include "core/pod_status.hpp"
#include "core/utf8.hpp"
#include "core/workload.hpp"
#include "kube/error.hpp"
#include "reconcile/errors.hpp"

namespace extsvc::reconcile {

namespace {

using nlohmann::json;

constexpr auto& at = core::json_at;

bool has_label(const json& labels, const std::string& key, bool require_enabled) {
  if (!labels.is_object()) return false;
  auto it = labels.find(key);
  if (it == labels.end()) return false;
  return !require_enabled || (it->is_string() && it->get<std::string>() == "enabled");
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
      if (it.key().rfind(core::kPlacementLabelPrefix, 0) == 0) out[it.key()] = *it;
  return out;
}

void fail_retry(DpuOutcome& out, const kube::Error& e, std::string what) {
  out.retry = true;
  out.retry_reason = retry_reason(e);
  out.message = std::move(what) + ": " + kube::describe(e);
  out.http_status = e.http_status ? std::optional<int>(e.http_status) : std::nullopt;
  out.retry_after_s = e.retry_after_s;
}

bool fenced(const DpuWork& w) {
  return !w.budget.may_write();
}

DpuOutcome lost(DpuOutcome out, const std::string& before, int calls) {
  out.retry = true;
  out.lost = true;
  out.retry_reason = "lease_fence";
  out.results.clear();
  out.message = "lease fence: the lease could expire during the next Kubernetes call (" + before +
                "); nothing more was sent";
  out.api_calls = calls;
  return out;
}

// The pass's label patch (issue 25): wanted keys set; of the present keys it does not want, only
// registered ones are removed, those named by no item only while the orphan guard allows.
json placement_patch_of(const DpuWork& w, const json& device_labels, DpuOutcome& out) {
  std::set<std::string> explained;
  for (const auto& item : w.items) explained.insert(item.label_key);
  auto present =
      core::classify_present_keys(device_labels, w.wanted_keys, explained, w.registered_keys);
  std::set<std::string> remove = std::move(present.explicit_removals);
  if (!present.derived_removals.empty()) {
    if (!w.derived_removal_ok || w.derived_removal_ok())
      remove.insert(present.derived_removals.begin(), present.derived_removals.end());
    else
      out.held_keys = std::move(present.derived_removals);
  }
  out.foreign_keys = std::move(present.foreign);
  return core::placement_patch(device_labels, w.wanted_keys, remove);
}

// Issue 23, part 2. A pod of our services that no item of this DPU explains is a stray
// workload; a key of ours on the Node that neither the DPUDevice nor the DPU object carries, once
// DPF's DPU walk is over (phase Ready: DPF removes only what it applied), is removed from the
// Node. False: the lease fence stopped the removal (nothing was sent).
bool strays_and_node_keys(const DpuWork& w, DpuObserver& obs, const json* device_labels,
                          const core::DpuObjectFacts* dpu, const json& node_labels,
                          const std::vector<core::PodFacts>& pods, DpuOutcome& out, int& writes) {
  auto carried = [&](const std::string& key) {
    return (device_labels != nullptr && device_labels->is_object() &&
            device_labels->contains(key)) ||
           (dpu != nullptr && dpu->labels.count(key) > 0);
  };
  // our keys the Node has on its own: only with both upper hops observed and DPF's walk over
  std::set<std::string> node_only;
  if (device_labels != nullptr && dpu != nullptr && dpu->phase == "Ready" && obs.current() &&
      node_labels.is_object())
    for (auto it = node_labels.begin(); it != node_labels.end(); ++it)
      if (it.key().rfind(core::kPlacementLabelPrefix, 0) == 0 && !w.wanted_keys.count(it.key()) &&
          !carried(it.key()) &&
          (w.registered_keys == nullptr || w.registered_keys->count(it.key()) > 0))
        node_only.insert(it.key());
  out.strays_observed = true;
  for (const auto& pod : pods) {
    bool explained = false;
    for (const auto& item : w.items)
      explained = explained || pod.service_id == item.service_id ||
                  (pod.service_id.empty() && pod.release == item.dpf_service_name);
    if (explained) continue;
    StrayPod s;
    s.service_id = pod.service_id;
    s.release = obs.release_of(pod);
    s.pod = pod.ns + "/" + pod.name;
    s.reason = !s.release.empty() && node_only.count("nico/" + s.release) > 0
                   ? "node_key_without_dpudevice"
                   : "no_attachment";
    out.strays.push_back(std::move(s));
  }
  if (!out.strays.empty()) {
    json strays = json::array();
    for (const auto& s : out.strays) strays.push_back({{"pod", s.pod}, {"reason", s.reason}});
    out.observation["stray_pods"] = strays;
  }
  kube::Client* dpu_client = obs.dpu_writer();
  if (node_only.empty() || dpu_client == nullptr) return true;
  if (fenced(w)) return false;
  json patch = {{"metadata", {{"labels", json::object()}}}};
  for (const auto& key : node_only) patch["metadata"]["labels"][key] = nullptr;
  ++writes;
  auto patched = dpu_client->merge_patch(kube::nodes_path(w.node_name), patch);
  if (patched.ok()) {
    out.node_keys_removed = std::move(node_only);
    out.observation["node_keys_removed"] = out.node_keys_removed;
  } else {
    // evidence is unchanged; the next pass tries again
    out.observation["node_key_removal_failed"] = kube::describe(patched.error());
  }
  return true;
}

}  // namespace

// --- the pass -----------------------------------------------------------------

DpuOutcome DpuReconciler::reconcile(const DpuWork& w) {
  const auto missing =
      dpf_api_ != nullptr ? dpf_api_->missing_for_placement() : std::vector<std::string>();
  if (missing.empty()) return pass(w);
  // The release cannot hold a placement label: wanted items get the one message and nothing is
  // sent for them; items being removed are observed as usual (a DPU of ours may still run one).
  const std::string why = core::DpfApiLevel::message(missing);
  DpuWork removals = w;
  removals.items.clear();
  removals.wanted_keys.clear();
  // with the wanted items left out, nothing may count as unwanted: no key is removed (an empty
  // registry), and the strays are not judged (below)
  static const std::set<std::string> kNoKeys;
  removals.registered_keys = &kNoKeys;
  std::vector<const DpuItem*> origin;
  for (const auto& item : w.items)
    if (!item.wanted) {
      removals.items.push_back(item);
      origin.push_back(&item);
    }
  DpuOutcome out;
  if (!removals.items.empty()) {
    out = pass(removals);
    for (auto& r : out.results) {
      r.item = origin.at(static_cast<size_t>(r.item - removals.items.data()));
      // no key is removed on this release: a removal still waiting says why it cannot end
      if (r.state == "TERMINATING")
        r.message +=
            (r.message.empty() ? "" : "; ") + std::string("the key is not removed: ") + why;
    }
  }
  if (out.retry) return out;
  out.strays_observed = false;
  out.strays.clear();
  out.observation.erase("stray_pods");
  for (const auto& item : w.items)
    if (item.wanted) out.results.push_back({&item, "ERROR", why});
  out.observation["dpf_api"] = why;
  return out;
}

const std::string& DpuReconciler::argo_sync_note(const DpuWork& w,
                                                 const std::string& dpuservice_name, int& reads) {
  // Context only, once per service per batch (never per DPU): a LIST of the DPUService's
  // Applications by DPF's labels (one per DPU cluster), skipped when the fence says no.
  auto it = argo_notes_.find(dpuservice_name);
  if (it != argo_notes_.end()) return it->second;
  static const std::string kNone;
  if (fenced(w)) return kNone;
  ++reads;
  std::string note;
  auto listed = mgmt_.list(kube::applications_path(ns_),
                           core::argo_application_selector(dpuservice_name, ns_));
  if (listed.ok()) {
    const json& items = listed.value().body["items"];
    note = core::argo_sync_note(items, [](std::string_view t) { return kube::redact(t); });
    if (items.empty() || !items.is_array())
      note = "no Argo CD Application of DPUService " + dpuservice_name + " in namespace " + ns_ +
             ": the sync message could not be read";
  } else if (listed.kind() == kube::ErrorKind::kNotFound &&
             resource_not_served(listed.error().message)) {
    note = core::argo_unreadable_note(
        404, "the API serves no applications.argoproj.io resource in namespace " + ns_, ns_);
  } else {
    note = core::argo_unreadable_note(listed.error().http_status,
                                      core::utf8_prefix(kube::describe(listed.error()), 300), ns_);
  }
  return argo_notes_.emplace(dpuservice_name, std::move(note)).first->second;
}

DpuOutcome DpuReconciler::pass(const DpuWork& w) {
  DpuObserver& obs = *observer_;
  // the pass's calls run under its budget, the observer's reads and the DPU cluster's patches too
  const kube::BudgetScope on_management(&mgmt_, w.budget);
  const kube::BudgetScope on_dpu(obs.dpu_writer(), w.budget);
  obs.set_budget(&w.budget);
  const int calls_before = obs.calls();
  int writes = 0;
  int argo_reads = 0;
  auto calls = [&] { return obs.calls() - calls_before + writes + argo_reads; };
  const bool remote = obs.reads_call_api();
  DpuOutcome out;
  out.watched = !remote;
  const std::string device_path = kube::dpudevices_path(ns_, w.device_name);

  // 1. Placement: one merge patch of the NICo-owned keys, only on difference.
  if (remote && fenced(w)) return lost(std::move(out), "before reading the DPUDevice", calls());
  DeviceRead device = obs.device(w.device_name);
  bool device_missing = false;
  json device_labels;
  if (device.state == DeviceRead::State::kUnavailable) {
    if (device.error) {
      fail_retry(out, *device.error, "reading DPUDevice " + w.device_name);
    } else {
      out.retry = true;
      out.retry_reason = "not_synced";
      out.message = "DPUDevice " + w.device_name + ": " + device.why;
    }
    out.api_calls = calls();
    return out;
  }
  // a DPF release without the DPUDevice CRD: no label can be placed, whatever the object
  const std::string missing_why = device.resource_missing
                                      ? core::no_dpudevice_resource_message()
                                      : "DPUDevice " + w.device_name + " not found";
  if (device.state == DeviceRead::State::kMissing) {
    device_missing = true;  // whether the whole DPU is gone is decided by the Node
  } else {
    device_labels = std::move(device.node_labels);
    const json patch = placement_patch_of(w, device_labels, out);
    if (!patch.empty()) {
      if (fenced(w)) return lost(std::move(out), "before patching the DPUDevice", calls());
      // decided from the read: applied only to that version of the DPUDevice
      json sent = patch;
      if (!device.resource_version.empty())
        sent["metadata"]["resourceVersion"] = device.resource_version;
      ++writes;
      auto patched = mgmt_.merge_patch(device_path + kStrict, sent);
      if (!patched.ok()) {
        const auto& e = patched.error();
        if (retryable(e)) {
          fail_retry(out, e, "patching DPUDevice " + w.device_name);
        } else {
          // a DPF release whose DPUDevice CRD lacks spec.cluster cannot carry
          // the labels at all: say which field and which release, not only
          // the API's text
          const auto fields = strict_refused_fields(e);
          out.results = all(w, "ERROR",
                            "patching DPUDevice " + w.device_name + " was refused: " +
                                (fields.empty() ? kube::describe(e)
                                                : core::unknown_device_fields_message(fields)));
          out.message = out.results.empty() ? kube::describe(e) : out.results.front().message;
        }
        out.api_calls = calls();
        return out;
      }
      log_warnings(patched.value(), "DPUDevice " + w.device_name);
      // the PATCH response is the placement evidence
      device_labels = at(patched.value().body, {"spec", "cluster", "nodeLabels"});
      obs.device_patched(w.device_name, patched.value().body);
      out.patched = true;
    }
  }
  out.observation["dpudevice"] = device_missing ? json("not found") : nico_labels(device_labels);
  if (!out.foreign_keys.empty()) out.observation["foreign_keys"] = out.foreign_keys;
  if (!out.held_keys.empty()) out.observation["held_keys"] = out.held_keys;
  out.observation["patched"] = out.patched;

  // 1b. DPF's DPU object: the label's middle hop (DPUSet controller -> DPU -> DPU controller ->
  // Node), which can hold a key the DPUDevice no longer has.
  if (remote && fenced(w)) return lost(std::move(out), "before reading the DPU object", calls());
  DpuObjectRead dpu_obj = obs.dpu_object(w.node_name);
  if (dpu_obj.state == DpuObjectRead::State::kUnavailable) {
    if (dpu_obj.error) {
      fail_retry(out, *dpu_obj.error, "reading DPU " + w.node_name);
    } else {
      out.retry = true;
      out.retry_reason = "not_synced";
      out.message = "DPU " + w.node_name + ": " + dpu_obj.why;
    }
    out.api_calls = calls();
    return out;
  }
  const bool dpu_missing = dpu_obj.state == DpuObjectRead::State::kMissing;
  const core::DpuObjectFacts& dpu = dpu_obj.facts;
  if (dpu_missing) {
    out.observation["dpu"] = "not found";
  } else {
    json labels = json::object();
    for (const auto& [k, v] : dpu.labels) labels[k] = v;
    out.observation["dpu"] = {{"labels", labels}, {"phase", dpu.phase}};
  }
  out.observed_at = obs.observed_at();

  // 2. Observation of the DPU cluster: the Node and the service pods on it.
  auto unknown = [&](const std::string& why) {
    out.results = all(w, "UNKNOWN", why);
    if (device_missing)
      for (auto& r : out.results)
        if (r.item->wanted) {
          r.state = "ERROR";
          r.message = missing_why;
        }
    out.observation["dpu_cluster"] = why;
    out.api_calls = calls();
    return out;
  };
  if (!obs.dpu_cluster()) return unknown("DPU cluster not configured; nothing can be observed");
  if (remote && fenced(w)) return lost(std::move(out), "before reading the Node", calls());
  NodeRead node = obs.node(w.node_name);
  if (node.state != NodeRead::State::kFound) {
    if (node.state == NodeRead::State::kUnavailable) return unknown(node.why);
    if (!device_missing || device.resource_missing)
      return unknown("Node " + w.node_name + " not found in the DPU cluster (unmapped)");
    // Both answered 404: the DPU itself is gone, nothing of ours can run there.
    const std::string why =
        "DPUDevice " + w.device_name + " and Node " + w.node_name + " are gone (both answered 404)";
    if (!obs.current()) {
      out.keep_polling = true;
      return unknown("DPUDevice and Node not found, but " + obs.not_current_why());
    }
    for (const auto& item : w.items) {
      core::DpuObservation o{};
      o.wanted = item.wanted;
      o.dpu_gone = true;
      out.results.push_back({&item, std::string(core::to_string(core::derive_deployment_state(o))),
                             item.wanted ? why + "; the service cannot run here" : why});
    }
    out.observation["dpu_gone"] = true;
    out.api_calls = calls();
    return out;
  }
  const json& node_labels = node.labels;
  out.observation["node"] = nico_labels(node_labels);
  if (core::unreachable(node.facts)) out.observation["node_ready"] = node.facts.ready;
  if (remote && fenced(w)) return lost(std::move(out), "before listing the pods", calls());
  PodsRead pods = obs.pods(w.node_name);
  if (!pods.ok) return unknown(pods.why);
  // A service's pods: those labelled with its id (the fast path), and those of a chart that
  // dropped the label, found through the DaemonSet Argo applied for its DPUService. The chart
  // decides names, namespaces and labels; none of them is trusted alone.
  auto pods_of = [&](const DpuItem& item) {
    std::vector<const core::PodFacts*> mine;
    for (const auto& pod : pods.pods)
      if (pod.service_id == item.service_id ||
          (pod.service_id.empty() && pod.release == item.dpf_service_name))
        mine.push_back(&pod);
    return mine;
  };
  out.observation["pods"] = pods.pods.size();

  for (const auto& item : w.items) {
    core::DpuObservation o{};
    o.wanted = item.wanted;
    o.observed = true;
    o.device_has_label = !device_missing && has_label(device_labels, item.label_key, item.wanted);
    o.node_has_label = has_label(node_labels, item.label_key, item.wanted);
    o.dpu_missing = dpu_missing;
    if (!dpu_missing) {
      auto it = dpu.labels.find(item.label_key);
      o.dpu_has_label = it != dpu.labels.end() && (!item.wanted || it->second == "enabled");
    }
    o.node_unreachable = core::unreachable(node.facts);
    std::vector<core::PodVerdict> verdicts;
    // pods that cannot prove a revision because the chart broke DPF's contract (no label, or no
    // revision annotation): they still count as the service's pods on the Node
    std::vector<std::string> uncontracted;
    for (const core::PodFacts* pod : pods_of(item)) {
      verdicts.push_back(core::classify_pod(*pod, item.applied_revision));
      ++o.pods_on_node;
      if (pod->service_id.empty() || pod->revision == 0) {
        uncontracted.push_back(pod->name);
        verdicts.back().proves_running = false;
      }
      if (verdicts.back().proves_running) ++o.ready_pods_applied_revision;
    }
    o.error = device_missing && item.wanted;
    auto state = core::derive_deployment_state(o);
    std::string msg;
    if (state == core::DeploymentState::kTerminated && !obs.current()) {
      // absence is concluded only from current evidence: a watch that lost its stream may not
      // have seen a label or a pod arrive. Look again soon (from the cache: no call).
      out.results.push_back({&item, "UNKNOWN", "removal not confirmed: " + obs.not_current_why()});
      out.keep_polling = true;
      continue;
    }
    switch (state) {
      case core::DeploymentState::kRunning:
        msg =
            "Ready pod of revision " + std::to_string(item.applied_revision) + " on " + w.node_name;
        break;
      case core::DeploymentState::kPending: {
        if (!o.device_has_label) {
          msg = "waiting for the DPUDevice label";
        } else if (!o.dpu_has_label && !o.dpu_missing) {
          // the DPUSet controller's hop (it stops for the whole DPUSet on a
          // ClusterMetadataConflict, and for a DPUDevice no DPUSet selects)
          msg = "waiting for DPF to copy the label to the DPU object (" + core::describe_dpu(dpu) +
                ")";
        } else if (!o.node_has_label) {
          // the DPU controller's hop: its phase says where it is (DPU Cluster Config waits for
          // the Node to be Ready)
          msg = "waiting for DPF to copy the label to the Node: " +
                (dpu_missing ? "no DPU object " + w.node_name : core::describe_dpu(dpu));
          if (node.facts.ready != "True")
            msg += "; " + core::describe_node_readiness(w.node_name, node.facts);
        } else if (item.applied_revision == 0) {
          msg = "waiting for DPF to accept the service's first revision";
        } else if (!uncontracted.empty() && o.ready_pods_applied_revision == 0) {
          msg =
              std::string(core::kChartContractMessage) + " (pod " + uncontracted.front() +
              (uncontracted.size() > 1 ? " and " + std::to_string(uncontracted.size() - 1) + " more"
                                       : std::string()) +
              " on " + w.node_name + ")";
        } else {
          msg = core::pending_pods_reason(verdicts, w.node_name);
          if (verdicts.empty())
            for (const auto& [ds, why] : obs.failed_creates())
              if (ds.find(item.dpf_service_name) != std::string::npos) {
                msg += "; DaemonSet " + ds + ": FailedCreate: " + why;
                break;
              }
          // DPF's own word explains a missing or old pod (chart pull or sync
          // failures, paused): context, never proof.
          if (const auto* dpf = obs.dpf_status(item.service_id);
              dpf != nullptr && (dpf->paused || dpf->ready == std::optional<bool>(false))) {
            msg += "; DPF: " + (dpf->reason.empty() ? std::string() : dpf->reason + ": ") +
                   dpf->message;
            // DPF says only "Sync: OutOfSync"; why is on the Application (issue 23, part 3)
            if (core::dpf_reports_out_of_sync(*dpf))
              if (const std::string& note = argo_sync_note(w, item.dpf_service_name, argo_reads);
                  !note.empty())
                msg += "; " + note;
          }
        }
        break;
      }
      case core::DeploymentState::kTerminating: {
        std::vector<std::string> left;
        if (o.device_has_label) left.push_back("label still on the DPUDevice");
        if (o.dpu_has_label) left.push_back("label still on " + core::describe_dpu(dpu));
        if (o.node_has_label) left.push_back("label still on the Node");
        if (o.pods_on_node > 0)
          left.push_back(std::to_string(o.pods_on_node) +
                         " pod(s) of the service still on the Node" +
                         (uncontracted.empty() ? std::string()
                                               : " (" + std::to_string(uncontracted.size()) +
                                                     " found through Argo's tracking, the chart "
                                                     "drops the contract's labels/annotations)"));
        if (node.facts.ready != "True")
          left.push_back(core::describe_node_readiness(w.node_name, node.facts));
        for (const auto& part : left) msg += (msg.empty() ? "" : "; ") + part;
        break;
      }
      case core::DeploymentState::kTerminated:
        msg =
            "label absent on the DPUDevice, the DPU object and the Node; no pod of the service on "
            "the Node";
        break;
      case core::DeploymentState::kUnknown:
        // only a Node that stopped reporting leads here
        msg = core::describe_node_readiness(w.node_name, node.facts) +
              ": what runs on it is not observed" +
              (item.wanted ? "" : "; removal not confirmed (pod deletions wait for the Node)");
        break;
      case core::DeploymentState::kError:
        msg = missing_why;
        break;
      default:
        break;
    }
    out.results.push_back({&item, std::string(core::to_string(state)), msg});
  }
  if (!strays_and_node_keys(w, obs, device_missing ? nullptr : &device_labels,
                            dpu_missing ? nullptr : &dpu, node_labels, pods.pods, out, writes))
    return lost(std::move(out), "before removing a key of ours from the Node", calls());
  out.api_calls = calls();
  return out;
}

}  // namespace extsvc::reconcile
