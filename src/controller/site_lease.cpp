#include "controller/site_lease.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/site.hpp"

namespace extsvc::controller {

namespace {

std::string leases_path(const std::string& ns, const std::string& name = "") {
  std::string p = "/apis/coordination.k8s.io/v1/namespaces/" + kube::url_encode(ns) + "/leases";
  if (!name.empty()) p += "/" + kube::url_encode(name);
  return p;
}

}  // namespace

SiteLease::SiteLease(kube::Client& api, std::string ns, std::string site_id,
                     core::HolderIdentity me, LeaseTiming timing)
    : api_(api),
      ns_(std::move(ns)),
      site_id_(std::move(site_id)),
      name_(core::lease_name(site_id_)),
      path_(leases_path(ns_, name_)),
      me_(std::move(me)),
      me_text_(me_.format()),
      timing_(timing) {}

void SiteLease::observe(const core::LeaseRecord& r, Clock::time_point now) {
  // client-go: the holder is alive while its record keeps changing; expiry counts from the
  // moment we saw the last change, by our clock (no trust in anyone's clock)
  if (!observed_ || !observed_->same_record(r)) {
    if (!observed_ || observed_->holder != r.holder)
      status_.since = std::chrono::system_clock::now();
    observed_at_ = now;
  }
  observed_ = r;
  status_.holder = r.holder;
  status_.transitions = r.transitions;
}

void SiteLease::lose(const std::string& why) {
  if (status_.held) spdlog::warn("site Lease {} lost: {}; writes stop", name_, why);
  status_.held = false;
  status_.valid_until = {};
  status_.renew_until = {};
  status_.writes_from = {};
  status_.why = why;
}

void SiteLease::failed(const kube::Error& e, const std::string& what, Clock::time_point now) {
  const std::string why = what + ": " + kube::describe(e);
  if (status_.held && now <= status_.renew_until) {
    // still ours until the renew deadline; the fence stops writes earlier if need be
    spdlog::debug("site Lease {}: {}", name_, why);
    return;
  }
  lose(status_.held ? "no renewal succeeded within extsvc.lease_renew_deadline (" + why + ")"
                    : why);
}

void SiteLease::won(const nlohmann::json& lease, Clock::time_point sent, bool acquired) {
  const bool was_held = status_.held;
  observe(core::LeaseRecord::from_json(lease), Clock::now());
  written_rv_ = observed_->resource_version;
  echoed_ = false;
  status_.held = true;
  status_.deposed = false;
  status_.why.clear();
  status_.valid_until = sent + timing_.duration;
  status_.renew_until = sent + timing_.renew_deadline;
  // a takeover's wait written into the Lease holds for whoever holds it next, also for this very
  // server after a crash restart that lost its memory of it
  if (lease.is_object()) {
    const auto ann = lease.value("metadata", nlohmann::json::object())
                         .value("annotations", nlohmann::json::object());
    const auto it = ann.find(std::string(core::kAnnWritesFrom));
    if (it != ann.end() && it->is_string()) {
      if (const auto until = core::parse_micro_time(it->get<std::string>())) {
        const auto wall = std::chrono::system_clock::now();
        if (*until > wall)
          status_.writes_from =
              std::max(status_.writes_from,
                       Clock::now() + std::chrono::duration_cast<Clock::duration>(*until - wall));
      }
    }
  }
  if (acquired || !was_held) {
    status_.since = std::chrono::system_clock::now();
    spdlog::info("site Lease {} {} as {} (transition {})", name_, acquired ? "acquired" : "resumed",
                 me_text_, status_.transitions);
  }
}

const LeaseStatus& SiteLease::step() {
  const auto sent = Clock::now();
  auto got = api_.get(path_);
  if (!got.ok()) {
    if (got.kind() != kube::ErrorKind::kNotFound) {
      failed(got.error(), "reading Lease " + name_, sent);
      return status_;
    }
    status_.action = core::LeaseAction::kAcquire;
    const auto lease = core::lease_for(std::nullopt, ns_, name_, site_id_, me_,
                                       static_cast<int>(timing_.duration.count() / 1000), true,
                                       std::chrono::system_clock::now());
    auto created = api_.create(leases_path(ns_), lease);
    if (created.ok()) {
      won(created.value().body, sent, true);
    } else if (created.kind() == kube::ErrorKind::kAlreadyExists) {
      lose("another candidate created Lease " + name_ + " first");
    } else if (created.kind() == kube::ErrorKind::kNotFound) {
      // the collection answers 404 only when the namespace does not exist
      lose("namespace \"" + ns_ +
           "\" does not exist in the management cluster, so the site Lease cannot be created; "
           "set extsvc.namespace to DPF's namespace (" +
           kube::describe(created.error()) + ")");
    } else {
      failed(created.error(), "creating Lease " + name_, sent);
    }
    return status_;
  }
  const auto record = core::LeaseRecord::from_json(got.value().body);
  observe(record, sent);
  const bool expired = sent >= observed_at_ + timing_.duration;
  status_.action = core::decide(record, me_, expired);
  switch (status_.action) {
    case core::LeaseAction::kWait:
      lose("held by " + record.holder + " (renewed " + record.renew_time + ")");
      return status_;
    case core::LeaseAction::kDeposed: {
      status_.deposed = true;
      const auto holder = core::HolderIdentity::parse(record.holder);
      lose("deposed: our system identifier " + std::to_string(me_.system_identifier) +
           " runs on timeline " +
           std::to_string(holder && holder->same_system(me_)
                              ? holder->timeline
                              : (record.highest ? record.highest->timeline : 0)) +
           " elsewhere, this server is on timeline " + std::to_string(me_.timeline) +
           (record.holder.empty() ? std::string() : " (holder " + record.holder + ")"));
      return status_;
    }
    default:
      break;
  }
  const bool acquired = status_.action != core::LeaseAction::kRenew;
  if (status_.action == core::LeaseAction::kPreempt)
    spdlog::warn("site Lease {}: taking it from {} (same system identifier, lower timeline)", name_,
                 record.holder);
  auto lease = core::lease_for(record, ns_, name_, site_id_, me_,
                               static_cast<int>(timing_.duration.count() / 1000), acquired,
                               std::chrono::system_clock::now());
  // the deposed holder's last possible call ends this long after our write (below)
  const auto deposed_window =
      std::min(timing_.renew_deadline, timing_.duration - timing_.call_budget) +
      timing_.call_budget;
  if (status_.action == core::LeaseAction::kPreempt)
    lease["metadata"]["annotations"][std::string(core::kAnnWritesFrom)] =
        core::micro_time(std::chrono::system_clock::now() + deposed_window);
  auto put = api_.put(path_, lease);
  if (put.ok()) {
    const bool preempted = status_.action == core::LeaseAction::kPreempt;
    won(put.value().body, sent, acquired);
    if (preempted) {
      // the deposed holder's last successful renewal was sent before our write succeeded (a
      // later one would have made ours a 409): it starts no call after that send time + its
      // renew deadline (nor after + duration - budget), and each call ends within the budget
      const auto now = Clock::now();
      status_.writes_from = std::max(status_.writes_from, now + deposed_window);
      spdlog::warn(
          "site Lease {}: the deposed holder may still write; our writes start in {} ms", name_,
          std::chrono::duration_cast<std::chrono::milliseconds>(status_.writes_from - now).count());
    }
  } else if (put.kind() == kube::ErrorKind::kConflict) {
    // someone wrote in between: we read again at the next round
    lose("another candidate wrote Lease " + name_ + " first (409 Conflict)");
  } else {
    failed(put.error(), "writing Lease " + name_, sent);
  }
  return status_;
}

bool SiteLease::release() {
  const bool was_held = status_.held;
  status_.held = false;
  status_.valid_until = {};
  status_.renew_until = {};
  auto got = api_.get(path_);
  if (!got.ok()) return got.kind() == kube::ErrorKind::kNotFound;
  const auto record = core::LeaseRecord::from_json(got.value().body);
  if (record.holder != me_text_) return true;  // not ours (any more): nothing to give up
  auto put = api_.put(path_, core::released_lease(record, std::chrono::system_clock::now()));
  if (!put.ok()) {
    spdlog::warn("site Lease {}: release failed: {}", name_, kube::describe(put.error()));
    return false;
  }
  observe(core::LeaseRecord::from_json(put.value().body), Clock::now());
  status_.why = "released";
  if (was_held) spdlog::info("site Lease {} released", name_);
  return true;
}

void SiteLease::drop(const std::string& why) {
  lose(why);
}

SiteLease::Seen SiteLease::seen(const nlohmann::json& lease) {
  const auto record = core::LeaseRecord::from_json(lease);
  if (status_.held) {
    // A watch delivers versions in order, so until our last write comes back on it every version
    // it delivers is older than that write and says nothing of now (e.g. the previous holder's
    // last renewal after our acquisition). resourceVersions are opaque: compared for equality only.
    if (!echoed_) {
      echoed_ = record.resource_version == written_rv_;
      return Seen::kNothing;
    }
    if (record.holder == me_text_) return Seen::kNothing;
  }
  const bool was_held = status_.held;
  observe(record, Clock::now());
  if (!was_held) return record.holder.empty() ? Seen::kFree : Seen::kNothing;
  if (core::decide(record, me_, false) == core::LeaseAction::kDeposed) {
    status_.deposed = true;
    lose("deposed: " + record.holder +
         " took the Lease (same system identifier, higher timeline); seen on the watch");
  } else {
    lose("taken by " + (record.holder.empty() ? std::string("nobody (released)") : record.holder) +
         "; seen on the watch");
  }
  return Seen::kLost;
}

}  // namespace extsvc::controller
