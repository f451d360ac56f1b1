// One placement pass over one DPU (SPEC 2.7, 2.8): converge the DPUDevice's
// NICo-owned node labels with one merge patch, then observe the DPU-cluster
// Node and the pods on it, and derive a deployment state per attachment.
// A few API calls per DPU, not per service: GET (+ PATCH) DPUDevice, GET
// Node, LIST pods on the Node; ControllerRevisions are listed once per batch.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "kube/client.hpp"
#include "reconcile/dpu_work.hpp"

namespace extsvc::reconcile {

class DpuReconciler {
 public:
  // dpu may be null: the DPU cluster is not configured, nothing is observable.
  DpuReconciler(kube::Client& management, kube::Client* dpu, std::string ns)
      : mgmt_(management), dpu_(dpu), ns_(std::move(ns)) {}

  DpuOutcome reconcile(const DpuWork& work);

 private:
  // DaemonSet name -> current controller-revision-hash; loaded once per batch.
  const std::map<std::string, std::string>* current_revisions(std::string* error);

  struct Rollout {
    bool dpf_observed = false;       // DPUService status.observedGeneration == generation
    bool dpf_ready = false;          // ... and its Ready condition is True
    bool daemonset_current = false;  // DaemonSet exists, status.observedGeneration == generation
    int64_t generation = 0;
  };
  // DPUService/DaemonSet name -> rollout progress; loaded once per batch
  // (one LIST of our DPUServices, one LIST of DaemonSets).
  const std::map<std::string, Rollout>* rollouts(std::string* error);

  kube::Client& mgmt_;
  kube::Client* dpu_;
  std::string ns_;
  std::optional<std::map<std::string, std::string>> revisions_;
  std::optional<std::map<std::string, Rollout>> rollouts_;
  std::string rollouts_error_;
  std::string revisions_error_;
  int calls_ = 0;
};

}  // namespace extsvc::reconcile
