// One placement pass over one DPU (SPEC 2.7, 2.8): converge the DPUDevice's
// NICo-owned node labels with one merge patch, then observe the DPU-cluster
// Node and the service's pods on it, and derive a deployment state per item.
// Pods are found by the service label that the rendered DPUService puts on
// them (nico/extension-service-id) and spec.nodeName, never by name: the
// chart names them. A few API calls per DPU, not per service: GET (+ PATCH)
// DPUDevice, GET Node, LIST the service pods on the Node; our DPUServices are
// listed at most once per batch, only for DPF's context in PENDING messages.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dpf_status.hpp"
#include "kube/client.hpp"
#include "reconcile/dpu_work.hpp"

namespace extsvc::reconcile {

class DpuReconciler {
 public:
  // dpu may be null: the DPU cluster is not configured, nothing is observable.
  DpuReconciler(kube::Client& management, kube::Client* dpu, std::string ns)
      : mgmt_(management), dpu_(dpu), ns_(std::move(ns)) {}

  DpuOutcome reconcile(const DpuWork& work);

  // DPF's status of every DPUService listed during this batch, by service id
  // (empty when no item needed it), for the worker to record.
  const std::map<std::string, core::DpfStatus>& dpf_statuses() const { return dpf_; }

 private:
  // DPF's view of the service, or null when the LIST failed or the service
  // has no DPUService; the LIST runs once per batch.
  const core::DpfStatus* dpf_status(const std::string& service_id);

  // The DPU cluster's FailedCreate events of DaemonSets (name, message), for
  // a wanted service with no pod at all: admission denials and the like. The
  // chart names the DaemonSet, but DPF's chart contract makes every name
  // contain the release name. Listed at most once per batch.
  const std::vector<std::pair<std::string, std::string>>& failed_creates();

  kube::Client& mgmt_;
  kube::Client* dpu_;
  std::string ns_;
  std::map<std::string, core::DpfStatus> dpf_;
  bool dpf_listed_ = false;
  std::optional<std::vector<std::pair<std::string, std::string>>> failed_creates_;
  const std::function<bool()>* lease_ok_ = nullptr;  // the current pass's fence
  int calls_ = 0;
};

}  // namespace extsvc::reconcile
