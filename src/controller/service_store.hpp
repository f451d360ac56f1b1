// The watch caches of our DPUServices (management cluster) and of the DaemonSet FailedCreate
// events of the DPU cluster that say why a service's pods are missing. A DPUService is kept as
// its drift key and shape and a digest of DPF's status (ServiceFacts); the status itself only
// while it is context for PENDING messages (not Ready, or paused).
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "controller/indexed_store.hpp"
#include "core/dpf_status.hpp"

namespace extsvc::controller {

class ServiceStore : public IndexedStore<ServiceFacts> {
 public:
  using IndexedStore::IndexedStore;
  // DPF's status of a service while it explains something, else null.
  const core::DpfStatus* context(const std::string& service_id) const;
  // The uid of the object of that name the watch last saw go ("" if none since it was last seen
  // present): the end of a delete (issue 26, part 2).
  std::string gone_uid(const std::string& name) const;

 protected:
  std::string key_of(const nlohmann::json& obj) const override { return name_key_of(obj); }
  std::optional<ServiceFacts> extract(const std::string& key, const nlohmann::json& obj) override;
  void on_change(const std::string& key, const ServiceFacts* old, const ServiceFacts* now) override;

 private:
  // The change goes to the database; the status stays here only while it is context.
  void note_dpf(const std::string& service_id);
  // DPF's status as the last extract() read it: the facts keep only its digest, and the hook
  // that follows in the same apply() publishes the whole of it.
  core::DpfStatus extracted_dpf_;
  std::unordered_map<std::string, core::DpfStatus> context_;  // by service id
  std::unordered_map<std::string, std::string> gone_;         // name -> uid, bounded
};

// (DaemonSet name, message), by "<namespace>/<name>" of the event.
using FailedCreate = std::pair<std::string, std::string>;

class EventStore : public IndexedStore<FailedCreate> {
 public:
  // A DaemonSet named after a service's release wakes that service's context.
  EventStore(Dirty& dirty, std::string name, const ServiceStore& services)
      : IndexedStore(dirty, std::move(name)), services_(services) {}
  std::vector<FailedCreate> all() const;

 protected:
  std::optional<FailedCreate> extract(const std::string& key, const nlohmann::json& obj) override;
  void on_change(const std::string& key, const FailedCreate* old, const FailedCreate* now) override;

 private:
  const ServiceStore& services_;
};

}  // namespace extsvc::controller
