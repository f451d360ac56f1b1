// The pass of the service reconciler that decides from the watcher's cache (issue 26, part 2):
// one request per update, delete and drift repair, each carrying the cached resourceVersion or
// uid as its precondition; what the cache cannot decide is left to the read path.
#include <string>
#include <utility>

#include "core/drift_key.hpp"
#include "core/drift_shape.hpp"
#include "core/merge_patch.hpp"
#include "reconcile/service_outcomes.hpp"
#include "reconcile/service_reconciler.hpp"

namespace extsvc::reconcile {

namespace {

using namespace service_outcomes;  // NOLINT(google-build-using-namespace)

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

}  // namespace

std::optional<Outcome> ServiceReconciler::update_cached(const ServiceWork& w, bool drift_repair) {
  const CachedDpuService& c = *w.cached;
  if (!c.present) return drift_repair ? recreate_cached(w) : std::nullopt;
  if (c.being_deleted || !cached_ours(c, w, site_) || c.resource_version.empty())
    return std::nullopt;
  std::optional<nlohmann::json> patch;
  if (c.drift_key == core::dpuservice_drift_key(w.desired)) {
    // in sync as far as the watch knows (a later change wakes the row again)
    patch = nlohmann::json::object();
  } else if (!drift_repair && !w.applied.is_null() &&
             c.drift_key == core::dpuservice_drift_key(w.applied)) {
    // The drift key holds the identity and the NICo-owned fields: equal to the applied
    // revision's, the live object needs exactly the patch from that revision to the desired one.
    patch = core::dpuservice_mutable_patch(w.applied, w.desired);
  } else {
    // A drift (or an update of a drifted object): the shape gives the patch the read path would
    // compute; another identity (a conflict to name, a site label to adopt), or a shape that sees
    // no difference where the key does, is left to the read path.
    patch = core::dpuservice_patch_from_shape(c.drift_shape, w.desired);
    if (patch && patch->empty()) patch.reset();
  }
  if (!patch) return std::nullopt;
  if (patch->empty()) {
    Outcome o = drift_repair ? done()
                             : transition("READY", "revision_applied",
                                          "revision " + std::to_string(w.desired_revision) +
                                              " applied (no change needed)");
    if (!drift_repair) o.applied_revision = w.desired_revision;
    o.observed_resource_version = c.resource_version;
    return o;
  }
  if (fenced(w)) return lost("before patching the DPUService");
  ++calls_;
  // the cached resourceVersion: the patch applies only to the version whose facts were checked
  (*patch)["metadata"]["resourceVersion"] = c.resource_version;
  const std::string path = kube::dpuservices_path(ns_, w.dpf_service_name);
  auto patched = api_.merge_patch(path + kStrict, *patch);
  if (!patched.ok()) {
    if (patched.kind() == ErrorKind::kConflict) {
      stale_ = true;  // the cache was behind: one GET and one retry
      return std::nullopt;
    }
    if (patched.kind() == ErrorKind::kNotFound) {
      if (drift_repair) return std::nullopt;  // gone meanwhile: the read path re-creates it
      return transition("FAILED", "dpuservice_missing",
                        "DPUService " + w.dpf_service_name + " disappeared during the update");
    }
    return from_error(patched.error(), "patching the DPUService");
  }
  return patched_outcome(w, drift_repair, false, patched.value());
}

std::optional<Outcome> ServiceReconciler::recreate_cached(const ServiceWork& w) {
  // Only once the watch saw the object go: absent from a cache that never held it may be a watch
  // behind (the read path looks). A POST cannot overwrite anything: if the name exists again by
  // now (409 AlreadyExists) the read path decides.
  if (w.cached->gone_uid.empty()) return std::nullopt;
  if (fenced(w)) return lost("before re-creating the DPUService");
  ++calls_;
  auto created = api_.create(kube::dpuservices_path(ns_) + kStrict, w.desired);
  if (!created.ok()) {
    if (created.kind() == ErrorKind::kAlreadyExists) {
      stale_ = true;
      return std::nullopt;
    }
    return from_error(created.error(), "re-creating the missing DPUService");
  }
  log_warnings(created.value(), w.dpf_service_name);
  if (auto bad = not_a_dpuservice(created.value(), "re-creating the missing DPUService"))
    return *bad;
  Outcome o = event("drift_recreated", "DPUService was missing and has been re-created");
  observe(o, created.value().body);
  return o;
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
