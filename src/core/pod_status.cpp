#include "core/pod_status.hpp"

#include <charconv>

#include "core/identity.hpp"
#include "core/json_access.hpp"
#include "core/utf8.hpp"
#include "core/workload.hpp"

namespace extsvc::core {
namespace {

using nlohmann::json;

int parse_revision(const json& annotation) {
  if (!annotation.is_string()) return 0;
  const auto& s = annotation.get_ref<const std::string&>();
  int value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  return (ec == std::errc() && end == s.data() + s.size() && value > 0) ? value : 0;
}

// The first container (init containers first) that is waiting or terminated
// with a reason: what a person would look at in `kubectl describe pod`.
std::string container_problem(const json& pod) {
  for (const char* list : {"initContainerStatuses", "containerStatuses"}) {
    for (const auto& c : json_at(pod, {"status", list})) {
      const json& waiting = json_at(c, {"state", "waiting"});
      if (waiting.is_object() && !json_text(waiting.value("reason", json())).empty())
        return "container " + json_text(c.value("name", json())) + " waiting (" +
               json_text(waiting["reason"]) + ")";
      const json& terminated = json_at(c, {"state", "terminated"});
      if (terminated.is_object() && !json_text(terminated.value("reason", json())).empty())
        return "container " + json_text(c.value("name", json())) + " terminated (" +
               json_text(terminated["reason"]) + ")";
    }
  }
  return {};
}

// Kubernetes' daemon util GetTargetNodeName: the single value of a matchFields metadata.name In
// requirement of the pod's required node affinity; "" when there is none.
std::string affinity_target(const json& pod) {
  for (const auto& term :
       json_at(pod, {"spec", "affinity", "nodeAffinity",
                     "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"}))
    for (const auto& req : json_at(term, {"matchFields"}))
      if (json_text(json_at(req, {"key"})) == "metadata.name" &&
          json_text(json_at(req, {"operator"})) == "In" && json_at(req, {"values"}).is_array() &&
          json_at(req, {"values"}).size() == 1)
        return json_text(json_at(req, {"values"})[0]);
  return {};
}

std::string scheduling_problem(const json& pod) {
  for (const auto& c : json_at(pod, {"status", "conditions"}))
    if (json_text(json_at(c, {"type"})) == "PodScheduled" &&
        json_text(json_at(c, {"status"})) == "False") {
      std::string reason = json_text(json_at(c, {"reason"}));
      std::string message = json_text(json_at(c, {"message"}));
      if (reason.empty()) reason = "not scheduled";
      return message.empty() ? reason : reason + ": " + utf8_prefix(message, 240);
    }
  return {};
}

bool ready_condition(const json& pod) {
  for (const auto& c : json_at(pod, {"status", "conditions"}))
    if (json_text(json_at(c, {"type"})) == "Ready")
      return json_text(json_at(c, {"status"})) == "True";
  return false;
}

}  // namespace

PodFacts pod_facts(const json& pod) {
  PodFacts f;
  f.name = json_text(json_at(pod, {"metadata", "name"}));
  f.ns = json_text(json_at(pod, {"metadata", "namespace"}));
  f.node = json_text(json_at(pod, {"spec", "nodeName"}));
  f.bound = !f.node.empty();
  if (!f.bound) f.node = affinity_target(pod);
  f.service_id = json_text(json_at(pod, {"metadata", "labels", kOwnerIdLabel}));
  f.owner_uid = daemonset_owner_uid(pod);
  f.terminating = !json_at(pod, {"metadata", "deletionTimestamp"}).is_null();
  f.revision = parse_revision(json_at(pod, {"metadata", "annotations", kRevisionAnnotation}));
  f.phase = json_text(json_at(pod, {"status", "phase"}));
  f.ready = ready_condition(pod);
  f.problem = container_problem(pod);
  if (!f.bound) f.unschedulable = scheduling_problem(pod);
  return f;
}

PodVerdict classify_pod(const PodFacts& pod, int applied_revision) {
  PodVerdict v;
  v.terminating = pod.terminating;
  v.revision = pod.revision;
  const std::string pod_ref = "pod " + pod.name;
  if (v.terminating) {
    v.reason = pod_ref + " is terminating";
  } else if (v.revision == 0) {
    v.reason = pod_ref + " carries no revision annotation";
  } else if (v.revision != applied_revision) {
    v.reason = pod_ref + " is of revision " + std::to_string(v.revision) +
               " (applied: " + std::to_string(applied_revision) + ")";
  } else if (!pod.bound) {
    // a pending pod the scheduler has not placed: named with the scheduler's reason
    v.reason = pod_ref + " is not scheduled" +
               (pod.unschedulable.empty() ? std::string(" yet") : " (" + pod.unschedulable + ")");
  } else if (pod.phase != "Running") {
    v.reason = pod_ref + " is " + (pod.phase.empty() ? std::string("without a phase") : pod.phase) +
               (pod.problem.empty() ? std::string() : ": " + pod.problem);
  } else if (!pod.ready) {
    v.reason =
        pod_ref + " is not Ready" + (pod.problem.empty() ? std::string() : ": " + pod.problem);
  } else {
    v.proves_running = true;
  }
  return v;
}

PodVerdict classify_pod(const json& pod, int applied_revision) {
  return classify_pod(pod_facts(pod), applied_revision);
}

std::string pending_pods_reason(const std::vector<PodVerdict>& pods, const std::string& node) {
  if (pods.empty()) return "no pod of the service on Node " + node + " yet";
  // A pod of the applied revision says more than an old or terminating one.
  const PodVerdict* best = nullptr;
  auto rank = [&](const PodVerdict& p) {
    if (p.terminating) return 0;
    if (p.revision == 0) return 1;
    return p.reason.find(" (applied: ") != std::string::npos ? 2 : 3;
  };
  for (const auto& p : pods)
    if (best == nullptr || rank(p) > rank(*best)) best = &p;
  std::string out = best->reason;
  if (pods.size() > 1) out += " (" + std::to_string(pods.size()) + " pods on the Node)";
  return out;
}

}  // namespace extsvc::core
