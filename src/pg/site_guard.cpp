// The orphan guard (issue 25): the resync deletes orphaned DPUServices of this site and lets the
// DPU passes strip placement keys nothing names any more, but never many at once by mistake.
// At most extsvc.orphan_cleanup_max of each per resync (default: 10, or 10 % of what this site
// owns, whichever is larger), and nothing while the database holds no live service but the
// cluster holds objects of this site (a half-restored database looks exactly like that). Past the
// limit nothing is done: the resync lists what it would do in extsvc.pending_orphans and waits
// for extsvc.confirm_orphan_cleanup(). Between resyncs the watcher spends what the last census
// left of the limit.
#include "pg_prelude.hpp"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "controller/site_census.hpp"
#include "core/site.hpp"
#include "guard.hpp"
#include "gucs.hpp"
#include "log_sink.hpp"
#include "site_access.hpp"
#include "site_state.hpp"
#include "timing_in_force.hpp"
#include "shared_memory.hpp"
#include "worker_internal.hpp"

namespace extsvc::pg {

namespace {

int64 budget_ns() {
  return call_budget_ms() * 1000000LL;
}

// "{a,b}" (a text[] without quoting: placement keys need none) -> elements.
std::set<std::string> text_array(const char* s) {
  std::set<std::string> out;
  if (s == nullptr) return out;
  std::string cur;
  for (const char* p = s; *p != '\0'; ++p) {
    if (*p == '{' || *p == '"') continue;
    if (*p == ',' || *p == '}') {
      if (!cur.empty()) out.insert(cur);
      cur.clear();
      continue;
    }
    cur += *p;
  }
  return out;
}

void set_foreign(const controller::ResyncResult& r) {
  SiteShared* site = site_shared();
  if (site == nullptr) return;
  SpinLockAcquire(&site->lock);
  site->foreign_other_site = static_cast<int64>(r.other_site);
  site->foreign_unlabelled = static_cast<int64>(r.unlabelled);
  site->census_done = true;
  SpinLockRelease(&site->lock);
}

// Issue 25: an orphaned DPUService of this site may come from a deposed primary's last window
// (a service this database never saw), and the DPUs may carry its placement key, which this
// database never wrote. Its key is this site's (the DPUService carries this site's label and
// shares the key's hash), so it is registered before the DELETE: the label passes then remove it
// as a key nothing names (sql/parts/74_site.sql, extsvc.register_orphan_placement_keys). False
// when the registration failed: nothing is deleted then (the key would be left behind). Outside
// a resync (a watch event) a resync is asked for, whose census lets the passes remove the key.
bool register_orphan_keys(MemoryContext cxt,
                          const std::vector<const reconcile::OrphanCandidate*>& candidates,
                          const bool* remove, bool census) {
  char* entries = nullptr;
  char* site_id = nullptr;
  int n = 0;
  PendingError err;
  cpp_call(err, [&] {
    site_id = copy_out(cxt, g_runtime->site_id());
    nlohmann::json list = nlohmann::json::array();
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (!remove[i]) continue;
      const auto& c = *candidates[i];
      // the candidates are this site's by their nico/site label (controller/resync.cpp)
      list.push_back({{"name", c.name},
                      {"service_id", c.service_id},
                      {"site", c.site == core::SiteMembership::kOurs ? g_runtime->site_id() : ""}});
    }
    n = static_cast<int>(list.size());
    entries = copy_out(cxt, list.dump());
  });
  flush_logs();
  if (err.sqlstate != 0) {
    ereport(WARNING, (errmsg_internal("nico_extsvc: %s", err.message)));
    return false;
  }
  if (n == 0) return true;
  int registered = 0;
  char* error = nullptr;
  if (!register_orphan_placement_keys(cxt, site_id, entries, &registered, &error)) {
    ereport(WARNING, (errmsg("nico_extsvc: resync: registering the placement keys of orphaned "
                             "DPUServices failed: %s",
                             error),
                      errdetail("No orphan is deleted until their keys are registered.")));
    return false;
  }
  if (registered > 0) {
    ereport(LOG, (errmsg("nico_extsvc: resync: %d placement key(s) of orphaned DPUServices of "
                         "this site registered: the label passes remove them from the DPUs",
                         registered)));
    SharedState* st = shared_state();
    if (!census && st != nullptr) pg_atomic_write_u32(&st->resync_requested, 1);
  }
  return true;
}

}  // namespace

int64 orphan_limit(int64 owned) {
  if (gucs.orphan_cleanup_max >= 0) return gucs.orphan_cleanup_max;
  return std::max<int64>(10, (owned + 9) / 10);
}

void cleanup_orphans(MemoryContext cxt, WorkerSlot* slot, controller::ResyncResult* result,
                     char** names, int nnames, bool census) {
  // nothing is decided for a site this server does not write for now (a watch event while
  // paused: the census after the Lease is acquired decides)
  if (!site_writes_allowed(budget_ns())) return;
  char** orphans = nullptr;
  int count = 0;
  char* error = nullptr;
  if (nnames > 0 && !orphaned_dpuservices(cxt, names, nnames, &orphans, &count, &error)) {
    ereport(WARNING,
            (errmsg("nico_extsvc: resync: checking orphaned DPUServices failed: %s", error)));
    return;
  }
  SiteShared* site = site_shared();
  int64 live = -1;
  if (census && !live_service_count(cxt, &live, &error)) {
    ereport(WARNING, (errmsg("nico_extsvc: resync: counting live services failed: %s", error)));
    return;
  }
  // the candidates the database confirmed, as listed (name, uid), and the census as JSON
  char* entries = nullptr;
  int ncandidates = 0, nforeign = 0;
  std::vector<const reconcile::OrphanCandidate*>* candidates = nullptr;  // freed below
  PendingError err;
  cpp_call(err, [&] {
    candidates = new std::vector<const reconcile::OrphanCandidate*>();
    nlohmann::json list = nlohmann::json::array();
    for (int i = 0; i < count; ++i)
      for (const auto& c : result->orphans)
        if (c.name == orphans[i]) {
          candidates->push_back(&c);
          list.push_back({{"name", c.name}, {"uid", c.uid}, {"detail", c.service_id}});
        }
    ncandidates = static_cast<int>(candidates->size());
    nforeign = static_cast<int>(result->other_site + result->unlabelled);
    if (census && !result->foreign_names.empty()) {
      std::string some;
      for (const auto& n : result->foreign_names) some += (some.empty() ? "" : ", ") + n;
      spdlog::info(
          "resync: {} DPUService(s) of another site and {} without the site label are left alone "
          "(e.g. {})",
          result->other_site, result->unlabelled, some);
    }
    entries = copy_out(cxt, list.dump());
  });
  flush_logs();
  if (err.sqlstate != 0) {
    ereport(WARNING, (errmsg_internal("nico_extsvc: %s", err.message)));
    PendingError free_err;
    cpp_call(free_err, [&] { delete candidates; });
    return;
  }
  (void)nforeign;
  // which of them to delete now
  bool* remove = static_cast<bool*>(palloc0(sizeof(bool) * (ncandidates + 1)));
  if (census) {
    set_foreign(*result);
    const int64 owned = static_cast<int64>(result->site_objects);
    const int64 limit = orphan_limit(owned);
    const bool empty_database = live == 0 && owned > 0;
    bool hold = ncandidates > 0 && (empty_database || ncandidates > limit);
    char** confirmed = nullptr;
    char** uids = nullptr;
    int nconfirmed = 0;
    if (!record_pending_orphans(cxt, "dpuservice", hold ? entries : "[]", &confirmed, &uids,
                                &nconfirmed, &error)) {
      ereport(WARNING,
              (errmsg("nico_extsvc: resync: recording pending orphans failed: %s", error)));
      hold = true;  // nothing is deleted without the record
      nconfirmed = 0;
    }
    PendingError e2;
    cpp_call(e2, [&] {
      for (int i = 0; i < ncandidates; ++i) {
        const auto* c = (*candidates)[i];
        bool ok = !hold;
        for (int j = 0; j < nconfirmed && !ok; ++j)
          ok = c->name == confirmed[j] && c->uid == (uids[j] != nullptr ? uids[j] : "");
        remove[i] = ok;
      }
    });
    pg_atomic_write_u64(&site->orphan_budget,
                        hold ? 0 : static_cast<uint64>(std::max<int64>(0, limit - ncandidates)));
    if (hold)
      ereport(WARNING,
              (errmsg("nico_extsvc: orphan guard: %d DPUService(s) of this site belong to no "
                      "live service; only those an admin confirmed are deleted (%s)",
                      ncandidates,
                      empty_database ? "the database holds no live service"
                                     : "more than extsvc.orphan_cleanup_max at once"),
               errdetail("Limit %lld (%lld objects of this site), %d confirmed. They are listed in "
                         "extsvc.pending_orphans.",
                         static_cast<long long>(limit), static_cast<long long>(owned), nconfirmed),
               errhint("If the database is complete and they are to go, an extsvc_admin runs "
                       "SELECT extsvc.confirm_orphan_cleanup(); if not, restore the database.")));
  } else {
    for (int i = 0; i < ncandidates; ++i) remove[i] = site_take_budget(&site->orphan_budget);
  }
  if (!register_orphan_keys(cxt, *candidates, remove, census)) {
    PendingError free_err;
    cpp_call(free_err, [&] { delete candidates; });
    return;
  }
  int deleted = 0;
  cpp_call(err, [&] {
    for (int i = 0; i < ncandidates; ++i) {
      const auto& c = *(*candidates)[i];
      if (!remove[i]) {
        spdlog::debug("resync: orphaned DPUService {} held back by the orphan guard", c.name);
        continue;
      }
      // the site Lease must outlive the call, as for every write
      if (!site_write_permit(g_slot, budget_ns())) {
        spdlog::info("resync: the site Lease does not cover another call; orphans wait");
        break;
      }
      if (auto e = reconcile::delete_orphan(g_runtime->management(), g_runtime->ns(), c)) {
        spdlog::warn("resync: deleting orphaned DPUService {} failed: {}", c.name,
                     kube::describe(*e));
      } else {
        ++deleted;
        spdlog::warn(
            "resync: deleted orphaned DPUService {} (uid {}): it carries this site's labels but "
            "belongs to no live service version",
            c.name, c.uid);
      }
    }
    delete candidates;
    candidates = nullptr;
  });
  flush_logs();
  if (err.sqlstate != 0) ereport(WARNING, (errmsg_internal("%s", err.message)));
  pg_atomic_fetch_add_u64(&slot->orphans_deleted, static_cast<uint64>(deleted));
}

// The label census (the resync's, before every DPU is derived again): sets how many DPUs the
// passes may strip of keys nothing names, lists the rest when past the limit, forgets purged keys
// no DPU carries, counts the keys this site never wrote.
void label_census(MemoryContext cxt) {
  SiteShared* site = site_shared();
  pg_atomic_write_u64(&site->label_budget, 0);  // until this census says otherwise
  char* error = nullptr;
  CensusRows rows{};
  int64 live = 0;
  if (!dpu_label_census(cxt, &rows, &error) || !live_service_count(cxt, &live, &error)) {
    ereport(WARNING, (errmsg("nico_extsvc: resync: label census failed: %s", error)));
    return;
  }
  const std::set<std::string>* registry = placement_registry(cxt);
  if (registry == nullptr) return;
  bool complete = false;
  int64 derived = 0, owned = 0, foreign = 0;
  char* entries = nullptr;
  char** present = nullptr;
  int npresent = 0;
  std::vector<std::string>* derived_devices = nullptr;  // freed below
  PendingError err;
  cpp_call(err, [&] {
    std::vector<controller::CensusRow> in;
    in.reserve(rows.count);
    for (int i = 0; i < rows.count; ++i)
      in.push_back({rows.devices[i], text_array(rows.wanted[i]), text_array(rows.explained[i])});
    const auto c = controller::label_census(*g_runtime, in, *registry);
    if (!c.complete) {
      spdlog::warn("resync: label census incomplete: {}; no key nothing names is removed", c.error);
      return;
    }
    complete = true;
    derived = static_cast<int64>(c.derived.size());
    owned = static_cast<int64>(c.dpus_with_site_keys);
    foreign = static_cast<int64>(c.foreign_keys);
    derived_devices = new std::vector<std::string>();
    nlohmann::json list = nlohmann::json::array();
    for (const auto& [device, keys] : c.derived) {
      std::string k;
      for (const auto& key : keys) k += (k.empty() ? "" : ",") + key;
      list.push_back({{"name", device}, {"detail", k}});
      derived_devices->push_back(device);
    }
    entries = copy_out(cxt, list.dump());
    present = alloc_out<char*>(cxt, c.present.size() + 1);
    for (const auto& k : c.present) present[npresent++] = copy_out(cxt, k);
    if (!c.foreign_examples.empty()) {
      std::string some;
      for (const auto& e : c.foreign_examples) some += (some.empty() ? "" : ", ") + e;
      spdlog::info("resync: {} placement key(s) this site never wrote are left alone (e.g. {})",
                   c.foreign_keys, some);
    }
  });
  flush_logs();
  if (err.sqlstate != 0 || !complete) {
    if (err.sqlstate != 0) ereport(WARNING, (errmsg_internal("%s", err.message)));
    PendingError free_err;
    cpp_call(free_err, [&] { delete derived_devices; });
    return;
  }
  SpinLockAcquire(&site->lock);
  site->foreign_keys = foreign;
  SpinLockRelease(&site->lock);
  const int64 limit = orphan_limit(owned);
  const bool empty_database = live == 0 && owned > 0;
  bool hold = derived > 0 && (empty_database || derived > limit);
  char** confirmed = nullptr;
  char** uids = nullptr;
  int nconfirmed = 0;
  if (!record_pending_orphans(cxt, "placement_labels", hold ? entries : "[]", &confirmed, &uids,
                              &nconfirmed, &error)) {
    ereport(WARNING,
            (errmsg("nico_extsvc: resync: recording pending label removals failed: %s", error)));
    nconfirmed = 0;
    hold = true;
  }
  int64 unconfirmed = derived;
  cpp_call(err, [&] {
    const std::set<std::string> ok(confirmed, confirmed + nconfirmed);
    for (const auto& d : *derived_devices)
      if (ok.contains(d)) --unconfirmed;
    delete derived_devices;
    derived_devices = nullptr;
  });
  // confirmed removals go; the rest only within the limit (and never from an empty database)
  const bool allowed = !hold || unconfirmed == 0 || (!empty_database && unconfirmed <= limit);
  pg_atomic_write_u64(&site->label_budget,
                      allowed ? static_cast<uint64>(std::max<int64>(limit, derived)) : 0);
  if (hold && !allowed)
    ereport(WARNING,
            (errmsg("nico_extsvc: orphan guard: %lld DPU(s) carry placement keys of this site "
                    "that nothing in the database names; none of them is removed (%s)",
                    static_cast<long long>(derived),
                    empty_database ? "the database holds no live service"
                                   : "more than extsvc.orphan_cleanup_max at once"),
             errdetail("Limit %lld (%lld DPUs carry keys of this site), %d confirmed. They are "
                       "listed in extsvc.pending_orphans.",
                       static_cast<long long>(limit), static_cast<long long>(owned), nconfirmed),
             errhint("If the database is complete and the labels are to go, an extsvc_admin runs "
                     "SELECT extsvc.confirm_orphan_cleanup().")));
  int forgotten = 0;
  if (!forget_placement_keys(cxt, present, npresent, &forgotten, &error))
    ereport(WARNING, (errmsg("nico_extsvc: resync: forgetting placement keys failed: %s", error)));
  else if (forgotten > 0)
    ereport(LOG, (errmsg("nico_extsvc: resync: %d placement key(s) of purged services are on no "
                         "DPU any more and left the registry",
                         forgotten)));
}

}  // namespace extsvc::pg
