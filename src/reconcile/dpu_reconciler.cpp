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

// What one pass has read and decided so far, shared by its steps.
struct DpuReconciler::Pass {
  Pass(const DpuWork& work, DpuObserver& observer)
      : w(work), obs(observer), calls_before(observer.calls()), remote(observer.reads_call_api()) {
    out.watched = !remote;
  }
  int calls() const { return obs.calls() - calls_before + writes + argo_reads; }
  // Ends the pass with what out holds.
  bool conclude() {
    out.api_calls = calls();
    return true;
  }
  // Ends the pass because the lease fence closed before the next call.
  bool stop(const std::string& before) {
    out = lost(std::move(out), before, calls());
    return true;
  }
  bool fenced_read() const { return remote && fenced(w); }

  const DpuWork& w;
  DpuObserver& obs;
  const int calls_before;
  const bool remote;  // reads are API calls (the fence is consulted before each)
  int writes = 0;
  int argo_reads = 0;
  DpuOutcome out;
  bool device_missing = false;
  bool device_resource_missing = false;  // the API serves no DPUDevice resource at all
  std::string missing_why;  // why a wanted item is ERROR while the DPUDevice is missing
  json device_labels;
  std::string device_version;  // the resourceVersion the label patch is decided from
  DpuObjectRead dpu;
  NodeRead node;
  PodsRead pods;
};

// One item's evidence on the DPU cluster.
struct DpuReconciler::ItemEvidence {
  core::DpuObservation o{};
  std::vector<core::PodVerdict> verdicts;
  // pods that cannot prove a revision because the chart broke DPF's contract (no label, or no
  // revision annotation): they still count as the service's pods on the Node
  std::vector<std::string> uncontracted;
};

DpuOutcome DpuReconciler::pass(const DpuWork& w) {
  // the pass's calls run under its budget, the observer's reads and the DPU cluster's patches too
  const kube::BudgetScope on_management(&mgmt_, w.budget);
  const kube::BudgetScope on_dpu(observer_->dpu_writer(), w.budget);
  observer_->set_budget(&w.budget);
  Pass p(w, *observer_);
  if (read_device(p) || place_labels(p) || read_dpu_object(p) || observe_node(p)) return p.out;
  for (const auto& item : w.items) {
    ItemEvidence e = evidence_of(p, item);
    auto state = core::derive_deployment_state(e.o);
    if (state == core::DeploymentState::kTerminated && !p.obs.current()) {
      // absence is concluded only from current evidence: a watch that lost its stream may not
      // have seen a label or a pod arrive. Look again soon (from the cache: no call).
      p.out.results.push_back(
          {&item, "UNKNOWN", "removal not confirmed: " + p.obs.not_current_why()});
      p.out.keep_polling = true;
      continue;
    }
    p.out.results.push_back(
        {&item, std::string(core::to_string(state)), state_message(p, item, state, e)});
  }
  const bool dpu_missing = p.dpu.state == DpuObjectRead::State::kMissing;
  if (!strays_and_node_keys(w, p.obs, p.device_missing ? nullptr : &p.device_labels,
                            dpu_missing ? nullptr : &p.dpu.facts, p.node.labels, p.pods.pods, p.out,
                            p.writes)) {
    p.stop("before removing a key of ours from the Node");
    return p.out;
  }
  p.conclude();
  return p.out;
}

// 1. The DPUDevice: read it; a read that fails ends the pass with a retry.
bool DpuReconciler::read_device(Pass& p) {
  if (p.fenced_read()) return p.stop("before reading the DPUDevice");
  DeviceRead device = p.obs.device(p.w.device_name);
  if (device.state == DeviceRead::State::kUnavailable) {
    if (device.error) {
      fail_retry(p.out, *device.error, "reading DPUDevice " + p.w.device_name);
    } else {
      p.out.retry = true;
      p.out.retry_reason = "not_synced";
      p.out.message = "DPUDevice " + p.w.device_name + ": " + device.why;
    }
    return p.conclude();
  }
  // a DPF release without the DPUDevice CRD: no label can be placed, whatever the object
  p.device_resource_missing = device.resource_missing;
  p.missing_why = device.resource_missing ? core::no_dpudevice_resource_message()
                                          : "DPUDevice " + p.w.device_name + " not found";
  // whether the whole DPU is gone is decided by the Node
  p.device_missing = device.state == DeviceRead::State::kMissing;
  if (!p.device_missing) {
    p.device_labels = std::move(device.node_labels);
    p.device_version = std::move(device.resource_version);
  }
  return false;
}

// 1. Placement: one merge patch of the NICo-owned keys, only on difference, applied only to the
// version of the DPUDevice it was decided from. A refused patch ends the pass.
bool DpuReconciler::place_labels(Pass& p) {
  const json patch = p.device_missing ? json() : placement_patch_of(p.w, p.device_labels, p.out);
  if (!patch.empty()) {
    if (fenced(p.w)) return p.stop("before patching the DPUDevice");
    json sent = patch;
    if (!p.device_version.empty()) sent["metadata"]["resourceVersion"] = p.device_version;
    ++p.writes;
    auto patched = mgmt_.merge_patch(kube::dpudevices_path(ns_, p.w.device_name) + kStrict, sent);
    if (!patched.ok()) {
      const auto& e = patched.error();
      if (retryable(e)) {
        fail_retry(p.out, e, "patching DPUDevice " + p.w.device_name);
      } else {
        // a DPF release whose DPUDevice CRD lacks spec.cluster cannot carry the labels at all:
        // say which field and which release, not only the API's text
        const auto fields = strict_refused_fields(e);
        p.out.results = all(
            p.w, "ERROR",
            "patching DPUDevice " + p.w.device_name + " was refused: " +
                (fields.empty() ? kube::describe(e) : core::unknown_device_fields_message(fields)));
        p.out.message = p.out.results.empty() ? kube::describe(e) : p.out.results.front().message;
      }
      return p.conclude();
    }
    log_warnings(patched.value(), "DPUDevice " + p.w.device_name);
    // the PATCH response is the placement evidence
    p.device_labels = core::json_at(patched.value().body, {"spec", "cluster", "nodeLabels"});
    p.obs.device_patched(p.w.device_name, patched.value().body);
    p.out.patched = true;
  }
  auto& seen = p.out.observation;
  seen["dpudevice"] = p.device_missing ? json("not found") : nico_labels(p.device_labels);
  if (!p.out.foreign_keys.empty()) seen["foreign_keys"] = p.out.foreign_keys;
  if (!p.out.held_keys.empty()) seen["held_keys"] = p.out.held_keys;
  seen["patched"] = p.out.patched;
  return false;
}

// 1b. DPF's DPU object: the label's middle hop (DPUSet controller -> DPU -> DPU controller ->
// Node), which can hold a key the DPUDevice no longer has.
bool DpuReconciler::read_dpu_object(Pass& p) {
  if (p.fenced_read()) return p.stop("before reading the DPU object");
  p.dpu = p.obs.dpu_object(p.w.node_name);
  if (p.dpu.state == DpuObjectRead::State::kUnavailable) {
    if (p.dpu.error) {
      fail_retry(p.out, *p.dpu.error, "reading DPU " + p.w.node_name);
    } else {
      p.out.retry = true;
      p.out.retry_reason = "not_synced";
      p.out.message = "DPU " + p.w.node_name + ": " + p.dpu.why;
    }
    return p.conclude();
  }
  if (p.dpu.state == DpuObjectRead::State::kMissing) {
    p.out.observation["dpu"] = "not found";
  } else {
    json labels = json::object();
    for (const auto& [k, v] : p.dpu.facts.labels) labels[k] = v;
    p.out.observation["dpu"] = {{"labels", labels}, {"phase", p.dpu.facts.phase}};
  }
  p.out.observed_at = p.obs.observed_at();
  return false;
}

// Every item UNKNOWN (a wanted one ERROR while its DPUDevice is missing): the DPU cluster could
// not be observed.
bool DpuReconciler::unobservable(Pass& p, const std::string& why) {
  p.out.results = all(p.w, "UNKNOWN", why);
  if (p.device_missing)
    for (auto& r : p.out.results)
      if (r.item->wanted) {
        r.state = "ERROR";
        r.message = p.missing_why;
      }
  p.out.observation["dpu_cluster"] = why;
  return p.conclude();
}

// 2. Observation of the DPU cluster: the Node and the service pods on it. Ends the pass when
// they cannot be observed, or when the DPU itself is gone.
bool DpuReconciler::observe_node(Pass& p) {
  const DpuWork& w = p.w;
  if (!p.obs.dpu_cluster())
    return unobservable(p, "DPU cluster not configured; nothing can be observed");
  if (p.fenced_read()) return p.stop("before reading the Node");
  p.node = p.obs.node(w.node_name);
  if (p.node.state != NodeRead::State::kFound) {
    if (p.node.state == NodeRead::State::kUnavailable) return unobservable(p, p.node.why);
    if (!p.device_missing || p.device_resource_missing)
      return unobservable(p, "Node " + w.node_name + " not found in the DPU cluster (unmapped)");
    if (!p.obs.current()) {
      p.out.keep_polling = true;
      return unobservable(p, "DPUDevice and Node not found, but " + p.obs.not_current_why());
    }
    // Both answered 404: the DPU itself is gone, nothing of ours can run there.
    const std::string why =
        "DPUDevice " + w.device_name + " and Node " + w.node_name + " are gone (both answered 404)";
    for (const auto& item : w.items) {
      core::DpuObservation o{};
      o.wanted = item.wanted;
      o.dpu_gone = true;
      p.out.results.push_back({&item,
                               std::string(core::to_string(core::derive_deployment_state(o))),
                               item.wanted ? why + "; the service cannot run here" : why});
    }
    p.out.observation["dpu_gone"] = true;
    return p.conclude();
  }
  p.out.observation["node"] = nico_labels(p.node.labels);
  if (core::unreachable(p.node.facts)) p.out.observation["node_ready"] = p.node.facts.ready;
  if (p.fenced_read()) return p.stop("before listing the pods");
  p.pods = p.obs.pods(w.node_name);
  if (!p.pods.ok) return unobservable(p, p.pods.why);
  p.out.observation["pods"] = p.pods.pods.size();
  return false;
}

// What the three objects of the label path and the pods on the Node say of one item. A service's
// pods: those labelled with its id (the fast path), and those of a chart that dropped the label,
// found through the DaemonSet Argo applied for its DPUService. The chart decides names,
// namespaces and labels; none of them is trusted alone.
DpuReconciler::ItemEvidence DpuReconciler::evidence_of(const Pass& p, const DpuItem& item) {
  ItemEvidence e;
  core::DpuObservation& o = e.o;
  o.wanted = item.wanted;
  o.observed = true;
  o.device_has_label = !p.device_missing && has_label(p.device_labels, item.label_key, item.wanted);
  o.node_has_label = has_label(p.node.labels, item.label_key, item.wanted);
  o.dpu_missing = p.dpu.state == DpuObjectRead::State::kMissing;
  if (!o.dpu_missing) {
    auto it = p.dpu.facts.labels.find(item.label_key);
    o.dpu_has_label = it != p.dpu.facts.labels.end() && (!item.wanted || it->second == "enabled");
  }
  o.node_unreachable = core::unreachable(p.node.facts);
  for (const auto& pod : p.pods.pods) {
    if (pod.service_id != item.service_id &&
        !(pod.service_id.empty() && pod.release == item.dpf_service_name))
      continue;
    e.verdicts.push_back(core::classify_pod(pod, item.applied_revision));
    ++o.pods_on_node;
    if (pod.service_id.empty() || pod.revision == 0) {
      e.uncontracted.push_back(pod.name);
      e.verdicts.back().proves_running = false;
    }
    if (e.verdicts.back().proves_running) ++o.ready_pods_applied_revision;
  }
  o.error = p.device_missing && item.wanted;
  return e;
}

// The status message of an item's state: what it rests on, or what it still waits for.
std::string DpuReconciler::state_message(Pass& p, const DpuItem& item, core::DeploymentState state,
                                         const ItemEvidence& e) {
  switch (state) {
    case core::DeploymentState::kRunning:
      return "Ready pod of revision " + std::to_string(item.applied_revision) + " on " +
             p.w.node_name;
    case core::DeploymentState::kPending:
      return pending_message(p, item, e);
    case core::DeploymentState::kTerminating:
      return terminating_message(p, e);
    case core::DeploymentState::kTerminated:
      return "label absent on the DPUDevice, the DPU object and the Node; no pod of the service "
             "on the Node";
    case core::DeploymentState::kUnknown:
      // only a Node that stopped reporting leads here
      return core::describe_node_readiness(p.w.node_name, p.node.facts) +
             ": what runs on it is not observed" +
             (item.wanted ? "" : "; removal not confirmed (pod deletions wait for the Node)");
    case core::DeploymentState::kError:
      return p.missing_why;
    default:
      return "";
  }
}

// PENDING: the first hop of the label path that has not happened yet, else why no pod of the
// applied revision is Ready.
std::string DpuReconciler::pending_message(Pass& p, const DpuItem& item, const ItemEvidence& e) {
  const core::DpuObservation& o = e.o;
  const std::string& node_name = p.w.node_name;
  if (!o.device_has_label) return "waiting for the DPUDevice label";
  // the DPUSet controller's hop (it stops for the whole DPUSet on a ClusterMetadataConflict, and
  // for a DPUDevice no DPUSet selects)
  if (!o.dpu_has_label && !o.dpu_missing)
    return "waiting for DPF to copy the label to the DPU object (" +
           core::describe_dpu(p.dpu.facts) + ")";
  if (!o.node_has_label) {
    // the DPU controller's hop: its phase says where it is (DPU Cluster Config waits for the Node
    // to be Ready)
    std::string msg =
        "waiting for DPF to copy the label to the Node: " +
        (o.dpu_missing ? "no DPU object " + node_name : core::describe_dpu(p.dpu.facts));
    if (p.node.facts.ready != "True")
      msg += "; " + core::describe_node_readiness(node_name, p.node.facts);
    return msg;
  }
  if (item.applied_revision == 0) return "waiting for DPF to accept the service's first revision";
  if (!e.uncontracted.empty() && o.ready_pods_applied_revision == 0)
    return std::string(core::kChartContractMessage) + " (pod " + e.uncontracted.front() +
           (e.uncontracted.size() > 1
                ? " and " + std::to_string(e.uncontracted.size() - 1) + " more"
                : std::string()) +
           " on " + node_name + ")";
  std::string msg = core::pending_pods_reason(e.verdicts, node_name);
  if (e.verdicts.empty())
    for (const auto& [ds, why] : p.obs.failed_creates())
      if (ds.find(item.dpf_service_name) != std::string::npos) {
        msg += "; DaemonSet " + ds + ": FailedCreate: " + why;
        break;
      }
  // DPF's own word explains a missing or old pod (chart pull or sync failures, paused): context,
  // never proof.
  if (const auto* dpf = p.obs.dpf_status(item.service_id);
      dpf != nullptr && (dpf->paused || dpf->ready == std::optional<bool>(false))) {
    msg += "; DPF: " + (dpf->reason.empty() ? std::string() : dpf->reason + ": ") + dpf->message;
    // DPF says only "Sync: OutOfSync"; why is on the Application (issue 23, part 3)
    if (core::dpf_reports_out_of_sync(*dpf))
      if (const std::string& note = argo_sync_note(p.w, item.dpf_service_name, p.argo_reads);
          !note.empty())
        msg += "; " + note;
  }
  return msg;
}

// TERMINATING: what of the service is still on the label path or the Node.
std::string DpuReconciler::terminating_message(const Pass& p, const ItemEvidence& e) {
  const core::DpuObservation& o = e.o;
  std::vector<std::string> left;
  if (o.device_has_label) left.push_back("label still on the DPUDevice");
  if (o.dpu_has_label) left.push_back("label still on " + core::describe_dpu(p.dpu.facts));
  if (o.node_has_label) left.push_back("label still on the Node");
  if (o.pods_on_node > 0)
    left.push_back(std::to_string(o.pods_on_node) + " pod(s) of the service still on the Node" +
                   (e.uncontracted.empty()
                        ? std::string()
                        : " (" + std::to_string(e.uncontracted.size()) +
                              " found through Argo's tracking, the chart drops the contract's "
                              "labels/annotations)"));
  if (p.node.facts.ready != "True")
    left.push_back(core::describe_node_readiness(p.w.node_name, p.node.facts));
  std::string msg;
  for (const auto& part : left) msg += (msg.empty() ? "" : "; ") + part;
  return msg;
}

}  // namespace extsvc::reconcile
