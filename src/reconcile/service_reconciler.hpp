// One reconciliation of one DPF service: compare the management cluster with
// the claimed intent and make at most the writes needed (SPEC 3, issue 4).
#pragma once

#include <optional>
#include <string>

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

 private:
  Outcome create(const ServiceWork& w);
  Outcome update(const ServiceWork& w, bool drift_repair);
  Outcome remove(const ServiceWork& w);
  Outcome adopt_existing(const ServiceWork& w);
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
};

}  // namespace extsvc::reconcile
