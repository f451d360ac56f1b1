#include "controller/service_store.hpp"

#include <algorithm>
#include <functional>

#include "core/drift_key.hpp"
#include "core/drift_shape.hpp"
#include "core/identity.hpp"
#include "core/site.hpp"

namespace extsvc::controller {

using nlohmann::json;

namespace {

constexpr size_t kMaxEvents = 10000;
// Names whose object went: read once by the delete that waits for it; more than this many
// unread at once only costs those deletes one GET each.
constexpr size_t kMaxGone = 10000;

uint64_t digest(const core::DpfStatus& d) {
  const std::string text = std::string(d.ready ? (*d.ready ? "T" : "F") : "-") +
                           (d.paused ? "P" : "-") + d.reason + '\0' + d.message;
  return std::hash<std::string>{}(text);
}

}  // namespace

// --- ServiceStore -----------------------------------------------------------------

const core::DpfStatus* ServiceStore::context(const std::string& service_id) const {
  auto it = context_.find(service_id);
  return it == context_.end() ? nullptr : &it->second;
}

std::string ServiceStore::gone_uid(const std::string& name) const {
  auto it = gone_.find(name);
  return it == gone_.end() ? std::string() : it->second;
}

std::optional<ServiceFacts> ServiceStore::extract(const std::string&, const json& obj) {
  ServiceFacts f;
  f.uid = core::json_text(core::json_at(obj, {"metadata", "uid"}));
  f.resource_version = core::json_text(core::json_at(obj, {"metadata", "resourceVersion"}));
  f.service_id = core::json_text(core::json_at(obj, {"metadata", "labels", core::kOwnerIdLabel}));
  const json& site = core::json_at(obj, {"metadata", "labels", core::kSiteLabel});
  f.has_site = !site.is_null();
  f.site = site.is_string() ? site.get<std::string>() : std::string();
  f.being_deleted = !core::json_at(obj, {"metadata", "deletionTimestamp"}).is_null();
  const json projection = core::dpuservice_drift_projection(obj);
  const std::string key = core::drift_key_of_projection(projection);
  std::copy_n(key.begin(), std::min(key.size(), f.drift_key.size()), f.drift_key.begin());
  f.drift_shape = core::dpuservice_drift_shape(obj, projection);
  extracted_dpf_ = core::dpf_status(obj);
  f.dpf_digest = digest(extracted_dpf_);
  return f;
}

void ServiceStore::on_change(const std::string& name, const ServiceFacts* old,
                             const ServiceFacts* now) {
  // A service id label that is no UUID names no service of ours (someone else's object, or a
  // hand edit): it wakes nothing. Published, it failed the whole publication at the uuid[]
  // cast, every iteration, since a failed publication is retried.
  auto wake = [&](const std::string& id) {
    if (core::canonical_uuid(id)) dirty_.services.insert(id);
  };
  if (now == nullptr) {
    if (gone_.size() >= kMaxGone) gone_.clear();
    gone_[name] = old->uid;
    wake(old->service_id);
    context_.erase(old->service_id);
    return;
  }
  if (old == nullptr) {
    gone_.erase(name);
    wake(now->service_id);
    note_dpf(now->service_id);
    return;
  }
  // the site label alone is kept but wakes nothing (the census reads it)
  const bool moved = old->service_id != now->service_id;
  if (moved || old->drift_key != now->drift_key || old->uid != now->uid ||
      old->being_deleted != now->being_deleted) {
    wake(now->service_id);
    wake(old->service_id);
  }
  if (moved || old->dpf_digest != now->dpf_digest) {
    note_dpf(now->service_id);
    if (core::canonical_uuid(now->service_id)) dirty_.context.insert(now->service_id);
  }
  if (moved) context_.erase(old->service_id);
}

void ServiceStore::note_dpf(const std::string& service_id) {
  if (!core::canonical_uuid(service_id)) return;  // not ours: see on_change
  const core::DpfStatus& dpf = extracted_dpf_;
  dirty_.dpf[service_id] = dpf;
  if (dpf.paused || dpf.ready == std::optional<bool>(false))
    context_[service_id] = dpf;
  else
    context_.erase(service_id);
}

// --- EventStore -------------------------------------------------------------------

std::vector<FailedCreate> EventStore::all() const {
  std::vector<FailedCreate> out;
  out.reserve(size());
  for (const auto& [key, event] : items()) out.push_back(event);
  return out;
}

std::optional<FailedCreate> EventStore::extract(const std::string& key, const json& obj) {
  if (size() >= kMaxEvents && get(key) == nullptr) return std::nullopt;  // context only: bounded
  return FailedCreate{core::json_text(core::json_at(obj, {"involvedObject", "name"})),
                      core::json_text(core::json_at(obj, {"message"})).substr(0, 300)};
}

void EventStore::on_change(const std::string&, const FailedCreate*, const FailedCreate* now) {
  if (now == nullptr) return;
  // DPF's chart contract makes the DaemonSet's name contain the release name (the DPUService's
  // name, "extsvc-" and its hash): the DPUs of that service have something new to say. Looked
  // up by name, not by scanning every service: a re-list may bring thousands of events.
  const std::string& ds = now->first;
  const size_t len = core::kNamePrefix.size() + core::kIdentityHashLength;
  for (size_t pos = ds.find(core::kNamePrefix); pos != std::string::npos;
       pos = ds.find(core::kNamePrefix, pos + 1))
    if (const ServiceFacts* s = services_.get(ds.substr(pos, len)))
      dirty_.context.insert(s->service_id);
}

}  // namespace extsvc::controller
