#include "daemonset_parts.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "controller_manager.h"

namespace dpfsim {

SelectorInfo analyze_selector(const json& pod_spec) {
  SelectorInfo si;
  std::vector<std::string> map_keys;
  if (const json* sel = jptr(pod_spec, {"nodeSelector"}); sel && sel->is_object())
    for (auto it = sel->begin(); it != sel->end(); ++it) map_keys.push_back(it.key());
  si.ref_keys = map_keys;
  const json* req = jptr(
      pod_spec, {"affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"});
  if (!req || !req->is_object()) {
    if (map_keys.empty())
      si.all_nodes = true;
    else
      si.required.push_back(map_keys);
    return si;
  }
  const json* terms = jptr(*req, {"nodeSelectorTerms"});
  if (!terms || !terms->is_array()) return si;  // matches no node
  for (const auto& term : *terms) {
    std::vector<std::string> keys = map_keys;
    std::vector<std::string> names;
    bool any = false, name_bound = false;
    if (const json* me = jptr(term, {"matchExpressions"}); me && me->is_array())
      for (const auto& r : *me) {
        any = true;
        std::string k = jstr(r, {"key"}), op = jstr(r, {"operator"});
        si.ref_keys.push_back(k);
        if (op == "In" || op == "Exists" || op == "Gt" || op == "Lt") keys.push_back(k);
      }
    if (const json* mf = jptr(term, {"matchFields"}); mf && mf->is_array())
      for (const auto& r : *mf) {
        any = true;
        if (jstr(r, {"key"}) == "metadata.name" && jstr(r, {"operator"}) == "In") {
          name_bound = true;
          if (const json* v = jptr(r, {"values"}); v && v->is_array())
            for (const auto& x : *v)
              if (x.is_string()) names.push_back(x.get<std::string>());
        }
      }
    if (!any) continue;  // an empty term matches nothing
    if (!keys.empty())
      si.required.push_back(keys);
    else if (name_bound)
      si.names.insert(si.names.end(), names.begin(), names.end());
    else
      si.all_nodes = true;
  }
  return si;
}

long long int_or_percent(const json* v, long long total, long long def) {
  if (!v || v->is_null()) return def;
  if (v->is_number_integer()) return v->get<long long>();
  if (v->is_string()) {
    std::string s = v->get<std::string>();
    if (!s.empty() && s.back() == '%') {
      double pct = std::atof(s.substr(0, s.size() - 1).c_str());
      return static_cast<long long>(std::ceil(pct * static_cast<double>(total) / 100.0));
    }
    return std::atoll(s.c_str());
  }
  return def;
}

json daemonset_status(const Sums& sums, long long ready, long long generation,
                      const std::string& denied, const json* old_conditions) {
  json status{{"currentNumberScheduled", sums.current},
              {"desiredNumberScheduled", sums.desired},
              {"numberMisscheduled", sums.misscheduled},
              {"numberReady", ready},
              {"numberAvailable", ready},
              {"numberUnavailable", sums.desired - ready},
              {"updatedNumberScheduled", sums.updated},
              {"observedGeneration", generation}};
  if (!denied.empty())
    status["conditions"] = json::array({{{"type", "ReplicaFailure"},
                                         {"status", "True"},
                                         {"reason", "FailedCreate"},
                                         {"message", denied},
                                         {"lastTransitionTime", rfc3339_now()}}});
  if (const json* oc = old_conditions; oc && !denied.empty() && oc->is_array() && !oc->empty() &&
                                       (*oc)[0].value("message", "") == denied)
    status["conditions"] = *oc;  // keep lastTransitionTime stable
  return status;
}

std::vector<ObjPtr> sync_current_revision(Store& st, const ResourceInfo& crs, const json& tmpl,
                                          const std::string& ns, const std::string& name,
                                          const std::string& uid, const std::string& hash,
                                          const json& owner) {
  std::vector<ObjPtr> revs;
  long long max_rev = 0;
  if (const auto* keys = st.owned_by_l(crs, uid))
    for (const auto& k : *keys)
      if (ObjPtr cr = st.find_key_l(crs, k)) {
        revs.push_back(cr);
        max_rev = std::max(max_rev, cr->value("revision", 0LL));
      }
  const std::string cr_name = name + "-" + hash;
  ObjPtr cur_rev;
  for (const auto& r : revs)
    if (jstr(*r, {"metadata", "name"}) == cr_name) cur_rev = r;
  if (!cur_rev) {
    json labels = string_map(jptr(tmpl, {"metadata", "labels"}));
    labels[names::kRevisionHashLabel] = hash;
    json data_tmpl = tmpl;
    data_tmpl["$patch"] = "replace";
    revs.push_back(st.create_l(crs, json{{"apiVersion", "apps/v1"},
                                         {"kind", "ControllerRevision"},
                                         {"metadata",
                                          {{"name", cr_name},
                                           {"namespace", ns},
                                           {"labels", labels},
                                           {"ownerReferences", owner}}},
                                         {"data", {{"spec", {{"template", data_tmpl}}}}},
                                         {"revision", max_rev + 1}}));
  } else if (cur_rev->value("revision", 0LL) != max_rev) {
    json next = *cur_rev;  // rollback to an older template: it becomes the newest revision
    next["revision"] = max_rev + 1;
    st.commit_l(crs, std::move(next));
  }
  return revs;
}

void prune_revisions(Store& st, const ResourceInfo& crs, const std::vector<ObjPtr>& revs,
                     const std::string& current, long long limit) {
  std::vector<ObjPtr> old_revs;
  for (const auto& r : revs)
    if (jstr(*r, {"metadata", "name"}) != current) old_revs.push_back(r);
  if (static_cast<long long>(old_revs.size()) <= limit) return;
  std::sort(old_revs.begin(), old_revs.end(), [](const ObjPtr& a, const ObjPtr& b) {
    return a->value("revision", 0LL) < b->value("revision", 0LL);
  });
  for (size_t i = 0; i + limit < old_revs.size(); ++i)
    st.erase_l(crs, jstr(*old_revs[i], {"metadata", "namespace"}),
               jstr(*old_revs[i], {"metadata", "name"}));
}

void record_failed_create(Store& st, const ResourceInfo& events, const std::string& ns,
                          const std::string& name, const std::string& uid,
                          const std::string& message) {
  std::string ev_name = name + ".failedcreate";
  ObjPtr ev = st.find_l(events, ns, ev_name);
  std::string now = rfc3339_now();
  if (!ev) {
    st.create_l(events, json{{"apiVersion", "v1"},
                             {"kind", "Event"},
                             {"metadata", {{"name", ev_name}, {"namespace", ns}}},
                             {"involvedObject",
                              {{"apiVersion", "apps/v1"},
                               {"kind", "DaemonSet"},
                               {"name", name},
                               {"namespace", ns},
                               {"uid", uid}}},
                             {"reason", "FailedCreate"},
                             {"message", message},
                             {"type", "Warning"},
                             {"count", 1},
                             {"firstTimestamp", now},
                             {"lastTimestamp", now},
                             {"source", {{"component", "daemonset-controller"}}},
                             {"reportingComponent", "daemonset-controller"},
                             {"reportingInstance", ""},
                             {"eventTime", nullptr}});
  } else if (jstr(*ev, {"message"}) != message) {
    json next = *ev;
    next["message"] = message;
    next["count"] = next.value("count", 1) + 1;
    next["lastTimestamp"] = now;
    st.commit_l(events, std::move(next));
  }
}

}  // namespace dpfsim
