// One placement pass over one DPU (SPEC 2.7, 2.8): converge the DPUDevice's NICo-owned node
// labels with one merge patch (only on difference), then look at the DPU-cluster Node and the
// service's pods on it, and derive a deployment state per item. Pods are found by the service
// label that the rendered DPUService puts on them (nico/extension-service-id) and spec.nodeName,
// never by name: the chart names them. The evidence comes from a DpuObserver: API reads per pass
// (GET DPUDevice, GET Node, LIST the service pods on the Node) or the worker's watch caches (no
// read call).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "core/deployment_status.hpp"
#include "core/dpf_api_level.hpp"
#include "core/dpf_status.hpp"
#include "kube/client.hpp"
#include "reconcile/dpu_observer.hpp"
#include "reconcile/dpu_work.hpp"

namespace extsvc::reconcile {

class DpuReconciler {
 public:
  // The polling mode: reads through the API (dpu may be null: the DPU cluster is not
  // configured, nothing is observable).
  DpuReconciler(kube::Client& management, kube::Client* dpu, std::string ns)
      : mgmt_(management),
        ns_(ns),
        observer_(std::make_unique<ApiObserver>(management, dpu, std::move(ns))) {}
  // Any observer (the watch caches).
  DpuReconciler(kube::Client& management, std::string ns, std::unique_ptr<DpuObserver> observer)
      : mgmt_(management), ns_(std::move(ns)), observer_(std::move(observer)) {}

  DpuOutcome reconcile(const DpuWork& work);
  // Issue 23, part 5: the DPF API detected at start. A release without DPUDevice.spec.cluster gets
  // no label patch: a wanted item is ERROR with one message naming the field and the minimum
  // release; removals are still observed.
  void set_dpf_api(const core::DpfApiLevel* level) { dpf_api_ = level; }

  // DPF's status of every DPUService listed during this batch, by service id
  // (empty when no item needed it), for the worker to record.
  const std::map<std::string, core::DpfStatus>& dpf_statuses() const {
    return observer_->dpf_seen();
  }

 private:
  kube::Client& mgmt_;
  std::string ns_;
  std::unique_ptr<DpuObserver> observer_;
  const core::DpfApiLevel* dpf_api_ = nullptr;
  // One pass, step by step; each step returns true when it ends the pass (the outcome is then
  // in the Pass).
  struct Pass;
  struct ItemEvidence;
  DpuOutcome pass(const DpuWork& work);
  bool read_device(Pass& p);
  bool place_labels(Pass& p);
  bool read_dpu_object(Pass& p);
  bool observe_node(Pass& p);
  bool unobservable(Pass& p, const std::string& why);
  // Per item: the evidence, then the message of the state derived from it.
  ItemEvidence evidence_of(const Pass& p, const DpuItem& item);
  std::string state_message(Pass& p, const DpuItem& item, core::DeploymentState state,
                            const ItemEvidence& e);
  std::string pending_message(Pass& p, const DpuItem& item, const ItemEvidence& e);
  std::string terminating_message(const Pass& p, const ItemEvidence& e);
  // Issue 23, part 3: the sync failure of a DPUService's Argo CD Application(s), or why it could
  // not be read; one LIST per service per batch (`reads` counts it).
  const std::string& argo_sync_note(const DpuWork& work, const std::string& dpuservice_name,
                                    int& reads);
  std::map<std::string, std::string> argo_notes_;  // by DPUService name, this batch
};

}  // namespace extsvc::reconcile
