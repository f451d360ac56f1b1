#include "controller/lease_watch.hpp"

#include <algorithm>

namespace extsvc::controller {

LeaseWatch::LeaseWatch(kube::Client& api, SiteLease& lease, const std::string& ns) : lease_(lease) {
  kube::ReflectorSpec spec;
  spec.name = "leases";
  spec.cluster = "management";
  spec.path = "/apis/coordination.k8s.io/v1/namespaces/" + kube::url_encode(ns) + "/leases";
  spec.field_selector = "metadata.name=" + lease.name();
  spec.page_limit = 1;
  kube::ReflectorHandler& handler = *this;
  reflector_ = std::make_unique<kube::Reflector>(api, multi_, spec, handler);
}

LeaseWatch::~LeaseWatch() = default;

long LeaseWatch::next_timer_ms() const {
  const long a = multi_.timeout_ms();
  const long b = reflector_->next_step_in();
  if (a < 0) return b;
  if (b < 0) return a;
  return std::min(a, b);
}

void LeaseWatch::on_event(kube::WatchEventType type, const nlohmann::json& object) {
  // a deleted Lease is re-created by the next round; nobody holds it meanwhile
  if (type == kube::WatchEventType::kDeleted) {
    nlohmann::json freed = object;
    if (freed.contains("spec") && freed["spec"].is_object()) freed["spec"]["holderIdentity"] = "";
    take(freed);
    return;
  }
  take(object);
}

void LeaseWatch::take(const nlohmann::json& object) {
  const auto seen = lease_.seen(object);
  if (seen == SiteLease::Seen::kLost || news_ == SiteLease::Seen::kNothing) news_ = seen;
}

SiteLease::Seen LeaseWatch::step() {
  news_ = SiteLease::Seen::kNothing;
  multi_.pump();
  reflector_->step();
  return news_;
}

}  // namespace extsvc::controller
