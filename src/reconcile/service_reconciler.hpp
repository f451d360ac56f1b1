// One reconciliation of one DPF service: compare the management cluster with
// the claimed intent and make at most the writes needed (SPEC 3, issue 4).
#pragma once

#include <optional>
#include <string>
#include <unordered_map>

#include "core/dpf_api_level.hpp"
#include "kube/client.hpp"
#include "reconcile/service_work.hpp"

namespace extsvc::reconcile {

class ServiceReconciler {
 public:
  // site_id (issue 25): the nico/site label this site's objects carry; an object of another site
  // is never patched or deleted, one without the label (made before 0.3.0) is adopted by adding
  // it. Empty: no site check (unit tests of the 0.2.0 behaviour).
  ServiceReconciler(kube::Client& management, std::string ns, std::string site_id = "")
      : api_(management), ns_(std::move(ns)), site_(std::move(site_id)) {}

  Outcome reconcile(const ServiceWork& work);
  // Issue 23, part 5: the DPF API detected at start (null or not known: not checked). A release
  // without DPUService.spec.security gets no create or update: the service goes FAILED
  // (unknown_fields) with one message naming the field and the minimum release.
  void set_dpf_api(const core::DpfApiLevel* level) { dpf_api_ = level; }

 private:
  Outcome create(const ServiceWork& w);
  Outcome update(const ServiceWork& w, bool drift_repair);
  Outcome remove(const ServiceWork& w);
  Outcome adopt_existing(const ServiceWork& w);
  // Issue 26, part 2 (service_cached.cpp): one request decided from the watch cache (w.cached);
  // nullopt when the cache cannot decide (absent and not seen going, not ours, another identity,
  // a 409 on a stale cache): the GET path runs.
  std::optional<Outcome> update_cached(const ServiceWork& w, bool drift_repair);
  std::optional<Outcome> recreate_cached(const ServiceWork& w);
  std::optional<Outcome> remove_cached(const ServiceWork& w);
  // The rest of an update after an accepted PATCH (its response is the object after the write).
  Outcome patched_outcome(const ServiceWork& w, bool drift_repair, bool label_only,
                          const kube::Response& r);
  // Whether a live object may be written for w: nullopt when it may (*adopt: it lacks the site
  // label, which the next patch adds), else the ownership conflict to report.
  std::optional<Outcome> check_owner(const ServiceWork& w, const nlohmann::json& live,
                                     bool* adopt) const;
  // The site label for an object made before 0.3.0, merged into patch.
  void add_site_label(nlohmann::json& patch) const;

  kube::Client& api_;
  std::string ns_;
  std::string site_;
  int calls_ = 0;
  bool stale_ = false;  // this pass met a 409 on a cached precondition
  // DPUService name -> uid this process deleted (or saw being deleted) while its service was
  // DELETING: the watch seeing that uid go is then the end of the delete, with no GET. Only
  // the watcher fills it; a restart forgets it, and the GET path confirms instead.
  std::unordered_map<std::string, std::string> deleting_;
  const core::DpfApiLevel* dpf_api_ = nullptr;
};

}  // namespace extsvc::reconcile
