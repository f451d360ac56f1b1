// A watch on the site's Lease object (issue 25): LIST+WATCH of the one Lease (a field selector on
// its name) on a Multi of its own, so that the lease process hears a takeover within the watch's
// latency and closes the write fence at once, instead of at its next renewal up to a retry period
// later. The renewals stay the source of truth (SiteLease::step); the watch only brings bad news
// (and a release) early. Runs on the caller's thread: wait on sockets(), then step().
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "controller/site_lease.hpp"
#include "kube/multi.hpp"
#include "kube/reflector.hpp"

namespace extsvc::controller {

class LeaseWatch : private kube::ReflectorHandler {
 public:
  LeaseWatch(kube::Client& api, SiteLease& lease, const std::string& ns);
  ~LeaseWatch() override;
  LeaseWatch(const LeaseWatch&) = delete;
  LeaseWatch& operator=(const LeaseWatch&) = delete;

  // What the caller waits on (with its latch) and the longest it may wait (-1: no timer).
  std::vector<kube::Multi::Socket> sockets() const { return multi_.sockets(); }
  long next_timer_ms() const;

  // Moves the transfers along and hands what arrived to the lease. The strongest news of the
  // events since the last call: kLost (stop writing now) over kFree (try now) over kNothing.
  SiteLease::Seen step();

  bool current() const { return reflector_->current(); }

 private:
  void on_list_begin() override {}
  void on_list_item(const nlohmann::json& object) override { take(object); }
  void on_list_end() override {}
  void on_event(kube::WatchEventType type, const nlohmann::json& object) override;
  void take(const nlohmann::json& object);

  SiteLease& lease_;
  kube::Multi multi_;
  std::unique_ptr<kube::Reflector> reflector_;
  SiteLease::Seen news_ = SiteLease::Seen::kNothing;
};

}  // namespace extsvc::controller
