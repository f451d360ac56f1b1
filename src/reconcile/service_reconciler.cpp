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
#include "reconcile/service_outcomes.hpp"

namespace extsvc::reconcile {

namespace {

using kube::ErrorKind;
using namespace service_outcomes;  // NOLINT(google-build-using-namespace)

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

}  // namespace extsvc::reconcile
