// One reconciliation of one DPF service: compare the management cluster with
// the claimed intent and make at most the writes needed (SPEC 3, issue 4).
#pragma once

#include <string>

#include "kube/client.hpp"
#include "reconcile/service_work.hpp"

namespace extsvc::reconcile {

class ServiceReconciler {
 public:
  ServiceReconciler(kube::Client& management, std::string ns)
      : api_(management), ns_(std::move(ns)) {}

  Outcome reconcile(const ServiceWork& work);

 private:
  Outcome create(const ServiceWork& w);
  Outcome update(const ServiceWork& w, bool drift_repair);
  Outcome remove(const ServiceWork& w);
  Outcome adopt_existing(const ServiceWork& w);

  kube::Client& api_;
  std::string ns_;
  int calls_ = 0;
};

}  // namespace extsvc::reconcile
