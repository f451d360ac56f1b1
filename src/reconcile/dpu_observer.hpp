// Where a placement pass gets its evidence: from the API (a GET of the DPUDevice, of DPF's DPU
// object and of the Node and a LIST of the service pods on it, per pass: the polling mode) or from
// the worker's watch caches (src/controller/cluster_cache.hpp: no read call at all). The pass
// itself (dpu_reconciler.cpp) is the same code for both, so both modes derive states by the same
// rules.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dpf_objects.hpp"
#include "core/dpf_status.hpp"
#include "core/pod_status.hpp"
#include "kube/client.hpp"

namespace extsvc::reconcile {

struct DeviceRead {
  enum class State { kFound, kMissing, kUnavailable } state = State::kUnavailable;
  nlohmann::json node_labels;        // spec.cluster.nodeLabels (object or null)
  std::string resource_version;      // for the patch's precondition
  std::optional<kube::Error> error;  // kUnavailable from the API
  std::string why;                   // kUnavailable from a cache
  // kMissing because the API serves no DPUDevice resource at all (404 for the resource, as DPF
  // v24.10), not because this object is absent.
  bool resource_missing = false;
};

// A 404 that says the resource is not served (the API server's "page not found"), not that an
// object is absent: a DPF release without that CRD.
inline bool resource_not_served(const std::string& error_text) {
  return error_text.find("the server could not find the requested resource") != std::string::npos;
}

struct NodeRead {
  enum class State { kFound, kMissing, kUnavailable } state = State::kUnavailable;
  nlohmann::json labels;  // metadata.labels (object or null)
  core::NodeFacts facts;  // its Ready condition
  std::string why;        // kUnavailable: what could not be observed
};

// DPF's DPU object (named like the Node): the middle hop of the label path.
struct DpuObjectRead {
  enum class State { kFound, kMissing, kUnavailable } state = State::kUnavailable;
  core::DpuObjectFacts facts;
  std::optional<kube::Error> error;  // kUnavailable from the API
  std::string why;                   // kUnavailable from a cache
};

struct PodsRead {
  bool ok = false;
  // The pods of our services on the Node: labelled with a service id, or (a chart that dropped
  // the label) controlled by a DaemonSet that Argo applied for one of our DPUServices
  // (PodFacts::release says which).
  std::vector<core::PodFacts> pods;
  std::string why;
};

class DpuObserver {
 public:
  virtual ~DpuObserver() = default;
  // True when a read is an API call: the lease fence is consulted before it, and it counts.
  virtual bool reads_call_api() const = 0;
  virtual DeviceRead device(const std::string& name) = 0;
  // The PATCH response (the newest DPUDevice): a cache takes it.
  virtual void device_patched(const std::string& name, const nlohmann::json& response) = 0;
  // DPF's DPU object of this DPU (its name is the Node's: DPF's GenerateNodeName).
  virtual DpuObjectRead dpu_object(const std::string& name) = 0;
  // False: no DPU cluster is configured, nothing of it can be observed.
  virtual bool dpu_cluster() const = 0;
  virtual NodeRead node(const std::string& name) = 0;
  virtual PodsRead pods(const std::string& node) = 0;
  // The DPUService whose Argo Application applied the pod's controlling DaemonSet, or "" (a
  // labelled pod's release is looked up only when no item explains it).
  virtual std::string release_of(const core::PodFacts& pod) = 0;
  // The DPU cluster's client for the pass's only write there: removing a key of ours from a
  // Node that neither the DPUDevice nor the DPU object carries (null: none configured).
  virtual kube::Client* dpu_writer() = 0;
  // DPF's view of a service (context for PENDING messages), or null.
  virtual const core::DpfStatus* dpf_status(const std::string& service_id) = 0;
  // (DaemonSet name, message) of FailedCreate events in the DPU cluster.
  virtual const std::vector<std::pair<std::string, std::string>>& failed_creates() = 0;
  // When the evidence was observed, as Unix seconds; nullopt = now (a read just made).
  virtual std::optional<double> observed_at() = 0;
  // The evidence is the clusters' state now (a read just made, or every watch stream open).
  // Absence (TERMINATED) is only concluded from current evidence: a cache that lost its stream
  // may not have seen the label or a pod arrive.
  virtual bool current() const { return true; }
  // Why it is not current (for the message).
  virtual std::string not_current_why() const { return {}; }
  // Read calls made so far (0 for a cache).
  virtual int calls() const = 0;
  // DPF statuses seen (for the worker to record), by service id.
  virtual const std::map<std::string, core::DpfStatus>& dpf_seen() const = 0;
  // The current pass's budget, whose fence the reads that call the API consult (a cache needs
  // none).
  virtual void set_budget(const kube::Budget*) {}
};

// The polling mode: every read is an API call. One per batch: DPF's statuses and FailedCreate
// events are listed at most once per batch, and only when a message needs them.
class ApiObserver : public DpuObserver {
 public:
  ApiObserver(kube::Client& management, kube::Client* dpu, std::string ns)
      : mgmt_(management), dpu_(dpu), ns_(std::move(ns)) {}
  bool reads_call_api() const override { return true; }
  DeviceRead device(const std::string& name) override;
  void device_patched(const std::string&, const nlohmann::json&) override {}
  DpuObjectRead dpu_object(const std::string& name) override;
  bool dpu_cluster() const override { return dpu_ != nullptr; }
  NodeRead node(const std::string& name) override;
  PodsRead pods(const std::string& node) override;
  std::string release_of(const core::PodFacts& pod) override;
  kube::Client* dpu_writer() override { return dpu_; }
  const core::DpfStatus* dpf_status(const std::string& service_id) override;
  const std::vector<std::pair<std::string, std::string>>& failed_creates() override;
  std::optional<double> observed_at() override { return std::nullopt; }
  int calls() const override { return calls_; }
  const std::map<std::string, core::DpfStatus>& dpf_seen() const override { return dpf_; }
  // Context-only LISTs are skipped when the budget's fence says no.
  void set_budget(const kube::Budget* budget) override { budget_ = budget; }

 private:
  kube::Client& mgmt_;
  kube::Client* dpu_;
  std::string ns_;
  std::map<std::string, core::DpfStatus> dpf_;
  bool dpf_listed_ = false;
  std::optional<std::vector<std::pair<std::string, std::string>>> failed_creates_;
  // DaemonSet uid -> the DPUService whose Application applied it, all namespaces
  std::optional<std::map<std::string, std::string>> daemonsets_;
  const std::map<std::string, std::string>& tracked_daemonsets();
  const kube::Budget* budget_ = nullptr;
  int calls_ = 0;
};

}  // namespace extsvc::reconcile
