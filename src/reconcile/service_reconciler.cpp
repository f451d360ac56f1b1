#include "reconcile/service_reconciler.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/dpuservice_render.hpp"
#include "core/drift_key.hpp"
#include "core/json_access.hpp"
#include "core/merge_patch.hpp"
#include "core/site.hpp"
#include "kube/error.hpp"
#include "reconcile/errors.hpp"

namespace extsvc::reconcile {

namespace {

using kube::ErrorKind;

Outcome transition(std::string state, std::string reason, std::string message) {
  Outcome o;
  o.kind = Outcome::Kind::kTransition;
  o.new_state = std::move(state);
  o.reason = std::move(reason);
  o.message = std::move(message);
  return o;
}

Outcome event(std::string reason, std::string message) {
  Outcome o;
  o.kind = Outcome::Kind::kEvent;
  o.reason = std::move(reason);
  o.message = std::move(message);
  return o;
}

Outcome done() {
  return Outcome{};
}

Outcome poll(std::string message) {
  Outcome o;
  o.kind = Outcome::Kind::kPoll;
  o.message = std::move(message);
  return o;
}

// A failed call: transient ones retry with backoff, the rest fail the service.
Outcome from_error(const kube::Error& e, const std::string& what) {
  Outcome o;
  o.http_status = e.http_status ? std::optional<int>(e.http_status) : std::nullopt;
  o.retry_after_s = e.retry_after_s;
  // describe() is already redacted; it never carries request headers.
  o.message = what + ": " + kube::describe(e);
  if (const auto fields = strict_refused_fields(e); !fields.empty()) {
    o.kind = Outcome::Kind::kTransition;
    o.new_state = "FAILED";
    o.reason = "unknown_fields";
    o.message = what + ": " + core::unknown_fields_message(fields);
    return o;
  }
  if (retryable(e)) {
    o.kind = Outcome::Kind::kRetry;
    o.retry_reason = retry_reason(e);
  } else {
    o.kind = Outcome::Kind::kTransition;
    o.new_state = "FAILED";
    o.reason = kPermanentError;
  }
  return o;
}

// The fence said no: the lease could run out during the next call.
Outcome lost(const std::string& before) {
  Outcome o;
  o.kind = Outcome::Kind::kLost;
  o.retry_reason = "lease_fence";
  o.message = "lease fence: the lease could expire during the next Kubernetes call (" + before +
              "); nothing more was sent";
  return o;
}

bool fenced(const ServiceWork& w) {
  return !w.budget.may_write();
}

// A merge patch decided from a read carries that read's resourceVersion: the
// API server applies it only to the object that was read (409 otherwise).
nlohmann::json with_precondition(nlohmann::json patch, const nlohmann::json& live) {
  const auto md = live.find("metadata");
  if (md != live.end() && md->is_object() && md->contains("resourceVersion") &&
      (*md)["resourceVersion"].is_string())
    patch["metadata"]["resourceVersion"] = (*md)["resourceVersion"];
  return patch;
}

// DeleteOptions that delete only the object that was read (409 otherwise).
nlohmann::json uid_precondition(const nlohmann::json& live) {
  const auto md = live.find("metadata");
  if (md != live.end() && md->is_object() && md->contains("uid") && (*md)["uid"].is_string())
    return {{"preconditions", {{"uid", (*md)["uid"]}}}};
  return nlohmann::json::object();
}

Outcome ownership_conflict(const ServiceWork& w, const std::string& field) {
  // Name the field, never its value: the object is not ours and may hold
  // anything.
  return transition("FAILED", "ownership_conflict",
                    "DPUService " + w.dpf_service_name + " exists but " + field +
                        " is not ours; it is left untouched");
}

// The API server answered 2xx but without fields we sent: it prunes unknown
// fields (an API server that ignores fieldValidation). Permanent: the same
// request would be pruned again.
std::optional<Outcome> pruned(const nlohmann::json& sent, const nlohmann::json& echoed,
                              const std::string& what) {
  const auto dropped = core::dropped_fields(sent, echoed);
  if (dropped.empty()) return std::nullopt;
  std::string list;
  for (const auto& f : dropped) list += (list.empty() ? "" : ", ") + f;
  return transition("FAILED", "unknown_fields",
                    what + ": the API server answered without " + list +
                        ": its DPUService CRD does not define them (fields were dropped). "
                        "Upgrade DPF or update the service without them");
}

// A 2xx must carry the object: a proxy's page, a Status body or an empty
// answer is "not the expected JSON" (SPEC 2.5), retried, never trusted.
std::optional<Outcome> not_a_dpuservice(const kube::Response& r, const std::string& what) {
  const auto& b = r.body;
  if (core::json_text_at(b, {"kind"}) == "DPUService" &&
      !core::json_text_at(b, {"metadata", "name"}).empty())
    return std::nullopt;
  Outcome o;
  o.kind = Outcome::Kind::kRetry;
  o.retry_reason = "invalid_response";
  o.http_status = r.http_status;
  o.message = what + ": the API answered " + std::to_string(r.http_status) +
              " without a DPUService object; retrying";
  return o;
}

void observe(Outcome& o, const nlohmann::json& obj) {
  o.dpf = core::dpf_status(obj);
  const auto& md = obj.value("metadata", nlohmann::json::object());
  if (md.contains("generation") && md["generation"].is_number_integer())
    o.observed_generation = md["generation"].get<int64_t>();
  if (md.contains("resourceVersion") && md["resourceVersion"].is_string())
    o.observed_resource_version = md["resourceVersion"].get<std::string>();
}

// After a delete accepted from the cache, the watch wakes the row when the object changes or
// goes; this look is only the safety net for a lost event. (An object that went while the watcher
// restarted sends no event: a fresh cache's first publish wakes every DELETING service.)
constexpr double kWatchSafetyNetS = 60;

Outcome wait_for_watch(std::string message) {
  Outcome o = poll(std::move(message));
  o.retry_after_s = kWatchSafetyNetS;
  return o;
}

// The cached object carries this service's ownership label and this site's label (an object
// without the site label is adopted by the GET path, which patches the label in).
bool cached_ours(const CachedDpuService& c, const ServiceWork& w, const std::string& site) {
  return c.service_id == w.service_id && (site.empty() || (c.has_site && c.site == site));
}

bool being_deleted(const nlohmann::json& obj) {
  const auto it = obj.find("metadata");
  return it != obj.end() && it->is_object() && it->contains("deletionTimestamp") &&
         !(*it)["deletionTimestamp"].is_null();
}

}  // namespace

const char* to_string(Outcome::Kind kind) {
  switch (kind) {
    case Outcome::Kind::kTransition:
      return "transition";
    case Outcome::Kind::kEvent:
      return "event";
    case Outcome::Kind::kDone:
      return "done";
    case Outcome::Kind::kRetry:
      return "retry";
    case Outcome::Kind::kPoll:
      return "poll";
    case Outcome::Kind::kLost:
      return "lost";
  }
  return "done";
}

std::optional<Outcome> ServiceReconciler::check_owner(const ServiceWork& w,
                                                      const nlohmann::json& live,
                                                      bool* adopt) const {
  *adopt = false;
  // ownership and identity first (another service's object is reported by its owner label)
  if (auto field = core::identity_mismatch(live, w.service_id, w.attachable_version, ns_))
    return ownership_conflict(w, *field);
  if (site_.empty()) return std::nullopt;
  switch (core::site_membership(live, site_)) {
    case core::SiteMembership::kOurs:
      return std::nullopt;
    case core::SiteMembership::kUnlabelled:
      // made before the site label existed (0.2.0) and carrying this database's live service
      // id: adopted by adding the label to the metadata (the DaemonSet template stays the same)
      *adopt = true;
      return std::nullopt;
    case core::SiteMembership::kForeign:
      break;
  }
  return ownership_conflict(w, std::string(core::kSiteLabelPath));
}

void ServiceReconciler::add_site_label(nlohmann::json& patch) const {
  patch["metadata"]["labels"][std::string(core::kSiteLabel)] = site_;
}

Outcome ServiceReconciler::reconcile(const ServiceWork& w) {
  const kube::BudgetScope under(&api_, w.budget);
  calls_ = 0;
  stale_ = false;
  Outcome o;
  if (w.lifecycle_state == "CREATING" || w.lifecycle_state == "UPDATING")
    if (dpf_api_ != nullptr)
      if (auto missing = dpf_api_->missing_for_services(); !missing.empty())
        return transition("FAILED", "unknown_fields", core::DpfApiLevel::message(missing));
  if (w.lifecycle_state == "CREATING") {
    o = create(w);
  } else if (w.lifecycle_state == "UPDATING") {
    o = update(w, false);
  } else if (w.lifecycle_state == "READY") {
    o = update(w, true);
  } else if (w.lifecycle_state == "DELETING") {
    o = remove(w);
    if (o.new_state == "DELETED") deleting_.erase(w.dpf_service_name);
  } else {
    o = done();  // FAILED and DELETED wait for new intent
  }
  o.api_calls = calls_;
  o.stale_cache = stale_;
  return o;
}

Outcome ServiceReconciler::create(const ServiceWork& w) {
  if (fenced(w)) return lost("before creating the DPUService");
  ++calls_;
  auto created = api_.create(kube::dpuservices_path(ns_) + kStrict, w.desired);
  if (created.ok()) {
    log_warnings(created.value(), w.dpf_service_name);
    if (auto bad = not_a_dpuservice(created.value(), "creating the DPUService")) return *bad;
    if (auto failed = pruned(w.desired, created.value().body, "creating the DPUService"))
      return *failed;
    Outcome o =
        transition("READY", "dpuservice_created",
                   "DPUService created with revision " + std::to_string(w.desired_revision));
    o.applied_revision = w.desired_revision;
    observe(o, created.value().body);
    return o;
  }
  if (created.kind() == ErrorKind::kAlreadyExists) return adopt_existing(w);
  if (created.kind() == ErrorKind::kNotFound) {
    // The collection answers 404 only when the namespace does not exist: a
    // configuration error, not something a retry fixes.
    Outcome o = transition("FAILED", "namespace_missing",
                           "creating the DPUService: namespace \"" + ns_ +
                               "\" does not exist in the management cluster (" +
                               kube::describe(created.error()) +
                               "); set extsvc.namespace to DPF's namespace and retry the service");
    o.http_status = 404;
    return o;
  }
  return from_error(created.error(), "creating the DPUService");
}

// The name exists already: ours from an earlier attempt (a crash after the
// POST), or someone else's.
Outcome ServiceReconciler::adopt_existing(const ServiceWork& w) {
  if (fenced(w)) return lost("before reading the existing DPUService");
  ++calls_;
  auto got = api_.get(kube::dpuservices_path(ns_, w.dpf_service_name));
  if (!got.ok()) {
    if (got.kind() == ErrorKind::kNotFound) {
      Outcome o = poll("DPUService vanished between create and read; creating again");
      return o;
    }
    return from_error(got.error(), "reading the existing DPUService");
  }
  if (auto bad = not_a_dpuservice(got.value(), "reading the existing DPUService")) return *bad;
  const auto& live = got.value().body;
  bool adopt = false;
  if (auto conflict = check_owner(w, live, &adopt)) return *conflict;
  if (being_deleted(live))
    return poll("an earlier DPUService of this service is still being deleted");
  auto patch = core::dpuservice_mutable_patch(live, w.desired);
  if (adopt) add_site_label(patch);
  nlohmann::json current = live;
  if (!patch.empty()) {
    if (fenced(w)) return lost("before patching the adopted DPUService");
    ++calls_;
    auto patched = api_.merge_patch(kube::dpuservices_path(ns_, w.dpf_service_name) + kStrict,
                                    with_precondition(patch, live));
    if (!patched.ok()) return from_error(patched.error(), "patching the adopted DPUService");
    log_warnings(patched.value(), w.dpf_service_name);
    if (auto bad = not_a_dpuservice(patched.value(), "patching the adopted DPUService"))
      return *bad;
    current = patched.value().body;
    if (auto failed = pruned(w.desired, current, "patching the adopted DPUService")) return *failed;
  }
  Outcome o =
      transition("READY", "dpuservice_adopted",
                 "existing DPUService adopted at revision " + std::to_string(w.desired_revision));
  o.applied_revision = w.desired_revision;
  observe(o, current);
  return o;
}

std::optional<Outcome> ServiceReconciler::update_cached(const ServiceWork& w, bool drift_repair) {
  const CachedDpuService& c = *w.cached;
  if (!c.present || c.being_deleted || !cached_ours(c, w, site_)) return std::nullopt;
  if (drift_repair) {
    // in sync as far as the watch knows (a later change wakes the row again); a drift is patched
    // from a read, since what to remove is not in the cache
    if (c.drift_key != core::dpuservice_drift_key(w.desired)) return std::nullopt;
    Outcome o = done();
    o.observed_resource_version = c.resource_version;
    return o;
  }
  // The drift key holds the identity and the NICo-owned fields: equal to the applied revision's,
  // the live object needs exactly the patch from that revision to the desired one.
  if (w.applied.is_null() || c.drift_key != core::dpuservice_drift_key(w.applied))
    return std::nullopt;
  nlohmann::json patch = core::dpuservice_mutable_patch(w.applied, w.desired);
  if (patch.empty()) {
    Outcome o = transition(
        "READY", "revision_applied",
        "revision " + std::to_string(w.desired_revision) + " applied (no change needed)");
    o.applied_revision = w.desired_revision;
    o.observed_resource_version = c.resource_version;
    return o;
  }
  if (fenced(w)) return lost("before patching the DPUService");
  ++calls_;
  // the cached resourceVersion: the patch applies only to the version whose facts were checked
  patch["metadata"]["resourceVersion"] = c.resource_version;
  const std::string path = kube::dpuservices_path(ns_, w.dpf_service_name);
  auto patched = api_.merge_patch(path + kStrict, patch);
  if (!patched.ok()) {
    if (patched.kind() == ErrorKind::kConflict) {
      stale_ = true;  // the cache was behind: one GET and one retry
      return std::nullopt;
    }
    if (patched.kind() == ErrorKind::kNotFound)
      return transition("FAILED", "dpuservice_missing",
                        "DPUService " + w.dpf_service_name + " disappeared during the update");
    return from_error(patched.error(), "patching the DPUService");
  }
  return patched_outcome(w, false, false, patched.value());
}

Outcome ServiceReconciler::update(const ServiceWork& w, bool drift_repair) {
  if (w.cached)
    if (auto o = update_cached(w, drift_repair)) return *o;
  const std::string path = kube::dpuservices_path(ns_, w.dpf_service_name);
  if (fenced(w)) return lost("before reading the DPUService");
  ++calls_;
  auto got = api_.get(path);
  if (!got.ok()) {
    if (got.kind() == ErrorKind::kNotFound) {
      if (!drift_repair)
        return transition(
            "FAILED", "dpuservice_missing",
            "DPUService " + w.dpf_service_name + " is missing; the update was not applied");
      // READY but gone (deleted by hand): re-create it.
      if (fenced(w)) return lost("before re-creating the DPUService");
      ++calls_;
      auto created = api_.create(kube::dpuservices_path(ns_) + kStrict, w.desired);
      if (!created.ok()) return from_error(created.error(), "re-creating the missing DPUService");
      Outcome o = event("drift_recreated", "DPUService was missing and has been re-created");
      observe(o, created.value().body);
      return o;
    }
    return from_error(got.error(), "reading the DPUService");
  }
  if (auto bad = not_a_dpuservice(got.value(), "reading the DPUService")) return *bad;
  const auto& live = got.value().body;
  bool adopt = false;
  if (auto conflict = check_owner(w, live, &adopt)) return *conflict;
  if (being_deleted(live)) {
    if (!drift_repair)
      return transition("FAILED", "dpuservice_missing",
                        "DPUService " + w.dpf_service_name + " is being deleted by someone else");
    return poll("DPUService is being deleted by someone else; re-creating once it is gone");
  }
  auto patch = core::dpuservice_mutable_patch(live, w.desired);
  const bool label_only = adopt && patch.empty();
  if (adopt) add_site_label(patch);
  if (patch.empty()) {
    Outcome o = drift_repair ? done()
                             : transition("READY", "revision_applied",
                                          "revision " + std::to_string(w.desired_revision) +
                                              " applied (no change needed)");
    if (!drift_repair) o.applied_revision = w.desired_revision;
    observe(o, live);
    return o;
  }
  if (fenced(w)) return lost("before patching the DPUService");
  ++calls_;
  auto patched = api_.merge_patch(path + kStrict, with_precondition(patch, live));
  if (!patched.ok()) {
    if (patched.kind() == ErrorKind::kNotFound && !drift_repair)
      return transition("FAILED", "dpuservice_missing",
                        "DPUService " + w.dpf_service_name + " disappeared during the update");
    return from_error(patched.error(), "patching the DPUService");
  }
  return patched_outcome(w, drift_repair, label_only, patched.value());
}

Outcome ServiceReconciler::patched_outcome(const ServiceWork& w, bool drift_repair, bool label_only,
                                           const kube::Response& r) {
  // The PATCH response is the object after the write: no second GET.
  log_warnings(r, w.dpf_service_name);
  if (auto bad = not_a_dpuservice(r, "patching the DPUService")) return *bad;
  const auto& after = r.body;
  if (auto failed = pruned(w.desired, after, "patching the DPUService")) return *failed;
  Outcome o = label_only && drift_repair
                  ? event("site_label_adopted", "DPUService made before 0.3.0 adopted: label " +
                                                    std::string(core::kSiteLabel) + "=" + site_ +
                                                    " added to its metadata (no spec change)")
              : drift_repair
                  ? event("drift_patched", "DPUService spec had drifted; patched back")
                  : transition("READY", "revision_applied",
                               "revision " + std::to_string(w.desired_revision) + " applied");
  if (!drift_repair) o.applied_revision = w.desired_revision;
  observe(o, after);
  if (o.dpf->paused)
    o.message += "; the DPUService is paused (spec.paused), so DPF will not roll it out";
  return o;
}

Outcome ServiceReconciler::remove(const ServiceWork& w) {
  if (!w.placement_clear)
    return poll("waiting until every DPU is observed without the placement label");
  if (w.cached)
    if (auto o = remove_cached(w)) return *o;
  const std::string path = kube::dpuservices_path(ns_, w.dpf_service_name);
  if (fenced(w)) return lost("before reading the DPUService to delete it");
  ++calls_;
  auto got = api_.get(path);
  if (!got.ok()) {
    if (got.kind() == ErrorKind::kNotFound)
      return transition("DELETED", "dpuservice_deleted", "DPUService is gone");
    return from_error(got.error(), "reading the DPUService before deleting it");
  }
  if (auto bad = not_a_dpuservice(got.value(), "reading the DPUService before deleting it"))
    return *bad;
  nlohmann::json live = got.value().body;
  if (!core::owned_by(live, w.service_id))
    return ownership_conflict(w, "metadata.labels[\"nico/extension-service-id\"]");
  if (!site_.empty()) {
    const auto site = core::site_membership(live, site_);
    if (site == core::SiteMembership::kForeign)
      return ownership_conflict(w, std::string(core::kSiteLabelPath));
    if (site == core::SiteMembership::kUnlabelled && !being_deleted(live)) {
      // made before 0.3.0: adopted (labelled) first, so that only objects with this site's label
      // are ever deleted
      if (fenced(w)) return lost("before adopting the DPUService to delete it");
      ++calls_;
      nlohmann::json patch = nlohmann::json::object();
      add_site_label(patch);
      auto patched = api_.merge_patch(path, with_precondition(patch, live));
      if (!patched.ok()) {
        if (patched.kind() == ErrorKind::kNotFound)
          return transition("DELETED", "dpuservice_deleted", "DPUService is gone");
        return from_error(patched.error(), "adopting the DPUService before deleting it");
      }
      if (auto bad = not_a_dpuservice(patched.value(), "adopting the DPUService")) return *bad;
      live = patched.value().body;
    }
  }
  if (being_deleted(live)) {
    deleting_[w.dpf_service_name] = core::json_text_at(live, {"metadata", "uid"});
    const bool paused = core::dpf_status(live).paused;
    Outcome o = poll(paused ? "the DPUService is paused (spec.paused is true): DPF does not "
                              "finish its delete until someone unpauses it"
                            : "waiting for DPF to remove the DPUService's finalizers");
    observe(o, live);
    return o;
  }
  if (fenced(w)) return lost("before deleting the DPUService");
  ++calls_;
  // Only the object that was read and found ours: a DPUService re-created
  // meanwhile (another uid) is not deleted.
  auto deleted = api_.del(path, uid_precondition(live));
  if (!deleted.ok()) {
    if (deleted.kind() == ErrorKind::kNotFound)
      return transition("DELETED", "dpuservice_deleted", "DPUService is gone");
    return from_error(deleted.error(), "deleting the DPUService");
  }
  // Deleted at once or now terminating: either way confirm with a 404 later (or, on the
  // watcher, with the watch seeing this uid go).
  deleting_[w.dpf_service_name] = core::json_text_at(live, {"metadata", "uid"});
  if (core::dpf_status(live).paused)
    return poll(
        "delete requested, but the DPUService is paused (spec.paused is true): DPF does "
        "not finish its delete until someone unpauses it");
  return poll("delete requested; waiting for the API to answer 404");
}

std::optional<Outcome> ServiceReconciler::remove_cached(const ServiceWork& w) {
  const CachedDpuService& c = *w.cached;
  const std::string& name = w.dpf_service_name;
  if (!c.present) {
    // gone as the watch saw it, and it was the object this delete removed (not an older one
    // whose successor the watch has not shown yet)
    const auto it = deleting_.find(name);
    if (it == deleting_.end() || c.gone_uid.empty() || it->second != c.gone_uid)
      return std::nullopt;
    deleting_.erase(it);
    return transition("DELETED", "dpuservice_deleted", "DPUService is gone");
  }
  if (!cached_ours(c, w, site_)) return std::nullopt;  // the GET path names the conflict
  if (deleting_.size() > 100000) deleting_.clear();    // bounded; the GET path still confirms
  if (c.being_deleted) {
    deleting_[name] = c.uid;
    return wait_for_watch(
        c.paused ? "the DPUService is paused (spec.paused is true): DPF does not finish its "
                   "delete until someone unpauses it"
                 : "waiting for DPF to remove the DPUService's finalizers");
  }
  if (fenced(w)) return lost("before deleting the DPUService");
  ++calls_;
  // the cached uid: only the object whose facts were checked is deleted
  auto deleted = api_.del(kube::dpuservices_path(ns_, name),
                          nlohmann::json{{"preconditions", {{"uid", c.uid}}}});
  if (!deleted.ok()) {
    if (deleted.kind() == ErrorKind::kConflict) {
      stale_ = true;  // another object of that name by now: read it
      return std::nullopt;
    }
    if (deleted.kind() == ErrorKind::kNotFound)
      return transition("DELETED", "dpuservice_deleted", "DPUService is gone");
    return from_error(deleted.error(), "deleting the DPUService");
  }
  deleting_[name] = c.uid;
  if (c.paused)
    return wait_for_watch(
        "delete requested, but the DPUService is paused (spec.paused is true): DPF does "
        "not finish its delete until someone unpauses it");
  return wait_for_watch("delete requested; waiting for the watch to see it go");
}

}  // namespace extsvc::reconcile
