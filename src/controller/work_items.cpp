#include "controller/work_items.hpp"

#include <spdlog/spdlog.h>

#include <exception>
#include <new>
#include <optional>

#include "controller/cluster_cache.hpp"
#include "controller/wire.hpp"

namespace extsvc::controller {
namespace {

// A write the clients did not send because a fence closed while it waited for the rate limiter:
// the pass concluded from a call that never happened, so it claims nothing and is retried, as a
// pass the fence stopped before the call is.
constexpr const char* kUnsent =
    "lease fence: the lease could no longer cover a write that waited for the rate limiter; it "
    "was not sent";

reconcile::Outcome unsent_write(reconcile::Outcome o) {
  reconcile::Outcome lost;
  lost.kind = reconcile::Outcome::Kind::kLost;
  lost.retry_reason = "lease_fence";
  lost.message = kUnsent;
  lost.api_calls = o.api_calls;
  return lost;
}

reconcile::DpuOutcome unsent_write(reconcile::DpuOutcome o) {
  reconcile::DpuOutcome lost;
  lost.retry = true;
  lost.lost = true;
  lost.retry_reason = "lease_fence";
  lost.message = kUnsent;
  lost.api_calls = o.api_calls;
  return lost;
}

}  // namespace

ItemResult work_service(Runtime& rt, std::string_view work_json, const kube::Budget& budget,
                        DpfSeen* dpf_seen) {
  ItemResult r;
  ServiceItem item;
  try {
    item = decode_service_work(work_json);
  } catch (const WireError& e) {
    // the claimed row itself is unreadable: retrying cannot help
    r.warning = std::string("the claimed row could not be decoded: ") + e.what();
    r.outcome = encode_service_failure(r.warning).dump();
    return r;
  }
  reconcile::ServiceWork& w = item.work;
  try {
    render_desired(item, rt.site_id());
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    // data that no longer renders can never succeed; a delete needs no
    // rendered object and goes on
    if (w.lifecycle_state != "DELETING") {
      r.outcome = encode_service_failure(
                      std::string("the desired DPUService could not be rendered: ") + e.what())
                      .dump();
      return r;
    }
    w.desired = nullptr;
  }
  try {
    w.budget = budget;
    // the watcher decides an update or a delete from its cache while every stream is open
    // (issue 26, part 2); otherwise the pass reads the object first
    if (ClusterCache* cache = rt.cache(); cache != nullptr && cache->management_current())
      w.cached = cache->dpuservice(w.dpf_service_name);
    const uint64_t fenced_before = rt.fenced_writes();
    reconcile::Outcome o = rt.services().reconcile(w);
    if (rt.fenced_writes() != fenced_before) o = unsent_write(std::move(o));
    if (o.kind == reconcile::Outcome::Kind::kLost) {
      // recorded as a retry (with backoff, so a lease too short for the calls
      // does not spin); the CAS drops it if the row is someone else's
      r.fenced = true;
      spdlog::warn("{}: {}", w.dpf_service_name, o.message);
    }
    r.retry = o.kind == reconcile::Outcome::Kind::kRetry || r.fenced;
    r.retry_reason = o.retry_reason;
    if (o.dpf && dpf_seen != nullptr) dpf_seen->emplace_back(w.service_id, *o.dpf);
    r.outcome = encode_service_outcome(o).dump();
    r.summary = w.dpf_service_name + " " + w.lifecycle_state + ": " + reconcile::to_string(o.kind) +
                " " + o.new_state + " " + o.message + " (" + std::to_string(o.api_calls) +
                " API calls" + (o.stale_cache ? ", the cache was stale" : "") + ")";
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    // a bug, not a cluster condition: retry with backoff, keep the text
    r.retry = true;
    r.retry_reason = "internal";
    r.outcome = encode_retry(std::string("nico_extsvc internal error: ") + e.what()).dump();
  }
  return r;
}

ItemResult work_dpu(Runtime& rt, reconcile::DpuReconciler& rec, std::string_view work_json,
                    const kube::Budget& budget, double undecodable_backoff_s,
                    const DpuKeyPolicy& keys) {
  ItemResult r;
  r.retry = true;  // until a pass says otherwise
  r.retry_reason = "internal";
  reconcile::DpuWork w;
  try {
    w = decode_dpu_work(work_json);
  } catch (const WireError& e) {
    r.warning = std::string("the claimed DPU row could not be decoded: ") + e.what();
    r.outcome = encode_retry(r.warning, undecodable_backoff_s >= 0
                                            ? std::optional<double>(undecodable_backoff_s)
                                            : std::nullopt)
                    .dump();
    return r;
  }
  try {
    w.budget = budget;
    w.registered_keys = keys.registered;
    w.derived_removal_ok = keys.derived_removal_ok;
    const uint64_t fenced_before = rt.fenced_writes();
    reconcile::DpuOutcome o = rec.reconcile(w);
    if (rt.fenced_writes() != fenced_before) o = unsent_write(std::move(o));
    if (!o.held_keys.empty())
      spdlog::warn("DPU {}: the orphan guard holds back removing {} label key(s) no item names",
                   w.device_name, o.held_keys.size());
    if (o.lost) {
      r.fenced = true;
      spdlog::warn("DPU {}: {}", w.device_name, o.message);
    }
    r.retry = o.retry;
    r.retry_reason = o.retry_reason;
    r.outcome = encode_dpu_outcome(o).dump();
    r.summary = "DPU " + w.device_name + ": " + (o.retry ? "retry" : "observed") + " (" +
                std::to_string(o.api_calls) + " API calls" + (o.patched ? ", labels patched" : "") +
                ")";
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    r.outcome = encode_retry(std::string("nico_extsvc internal error: ") + e.what()).dump();
  }
  return r;
}

}  // namespace extsvc::controller
