// The parts of the DaemonSet controller (daemonset_controller.cpp) that need no controller state:
// which Nodes a pod template can select, what one Node adds to the DaemonSet's status counters,
// the status it writes, and its FailedCreate Event (pkg/controller/daemon's
// updateDaemonSetStatus and its event recorder).
#pragma once

#include <string>
#include <vector>

#include "resources.h"
#include "store.h"
#include "util.h"

namespace dpfsim {

// What one node contributes to its DaemonSet's status.
struct NodeContribution {
  bool desired = false, current = false, ready = false, updated = false, unavailable = false,
       surging = false, misscheduled = false;
  std::string old_ready_pod;  // key of its only pod when that is old and ready (rollout candidate)
  bool any() const {
    return desired || current || ready || updated || unavailable || surging || misscheduled ||
           !old_ready_pod.empty();
  }
};

struct Sums {
  long long desired = 0, current = 0, ready = 0, updated = 0, unavailable = 0, surging = 0,
            misscheduled = 0;
  void add(const NodeContribution& c, int sign) {
    desired += sign * c.desired;
    current += sign * c.current;
    ready += sign * c.ready;
    updated += sign * c.updated;
    unavailable += sign * c.unavailable;
    surging += sign * c.surging;
    misscheduled += sign * c.misscheduled;
  }
};

// Which nodes a pod template can land on, for routing node changes and for finding candidates
// without looking at every node.
struct SelectorInfo {
  std::vector<std::string> ref_keys;               // every label key the selector mentions
  std::vector<std::vector<std::string>> required;  // per usable term: label keys a node must have
  std::vector<std::string> names;                  // matchFields metadata.name values
  bool all_nodes = false;                          // some term admits nodes without a given key
  bool universal() const { return all_nodes || !names.empty(); }
};

SelectorInfo analyze_selector(const json& pod_spec);

// maxSurge / maxUnavailable: an integer, or a percentage of total rounded up (apps/v1, as
// intstr.GetScaledValueFromIntOrPercent with roundUp); def when absent.
long long int_or_percent(const json* v, long long total, long long def);

// apps/v1 DaemonSetStatus from the counters; `ready` after this pass's rollout deletions. A
// FailedCreate message adds the ReplicaFailure condition (kept as it was when its message is
// the same, so that its lastTransitionTime stays).
json daemonset_status(const Sums& sums, long long ready, long long generation,
                      const std::string& denied, const json* old_conditions);

// The DaemonSet's ControllerRevisions (owned by uid), with the one of this template hash
// (<name>-<hash>) created as the newest revision when missing, or made the newest again (a
// rollback to an older template).
std::vector<ObjPtr> sync_current_revision(Store& st, const ResourceInfo& crs, const json& tmpl,
                                          const std::string& ns, const std::string& name,
                                          const std::string& uid, const std::string& hash,
                                          const json& owner);

// Deletes the oldest revisions other than `current` beyond revisionHistoryLimit.
void prune_revisions(Store& st, const ResourceInfo& crs, const std::vector<ObjPtr>& revs,
                     const std::string& current, long long limit);

// FailedCreate: one Warning Event per DaemonSet, its count bumped when the message changes.
void record_failed_create(Store& st, const ResourceInfo& events, const std::string& ns,
                          const std::string& name, const std::string& uid,
                          const std::string& message);

}  // namespace dpfsim
