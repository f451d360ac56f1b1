#include "controller/site_census.hpp"

#include <unordered_map>

#include "core/identity.hpp"
#include "core/json_access.hpp"
#include "core/placement_keys.hpp"

namespace extsvc::controller {

LabelCensus label_census(Runtime& rt, const std::vector<CensusRow>& rows,
                         const std::set<std::string>& registered) {
  LabelCensus out;
  // the NICo keys of each device, from the cache while it is the server's state
  std::unordered_map<std::string, nlohmann::json> labels;
  ClusterCache* cache = rt.cache();
  const bool from_cache =
      cache != nullptr && cache->management_synced() && cache->management_current();
  if (!from_cache) {
    auto listed = rt.management().list(kube::dpudevices_path(rt.ns()), "");
    if (!listed.ok()) {
      out.error = "listing DPUDevices failed: " + kube::describe(listed.error());
      return out;
    }
    for (const auto& d : listed.value().body["items"])
      labels[core::json_text_at(d, {"metadata", "name"})] =
          core::json_at(d, {"spec", "cluster", "nodeLabels"});
  }
  constexpr size_t kExamples = 10;
  for (const auto& row : rows) {
    nlohmann::json current = nlohmann::json::object();
    if (from_cache) {
      if (const DeviceFacts* f = cache->device(row.device))
        for (const auto& [k, v] : f->labels) current[k] = v;
    } else if (auto it = labels.find(row.device); it != labels.end() && it->second.is_object()) {
      current = it->second;
    }
    bool site_keys = false;
    for (const auto& [k, v] : current.items()) {
      if (v.is_null() || !std::string_view(k).starts_with(core::kPlacementLabelPrefix)) continue;
      out.present.insert(k);
      if (registered.contains(k)) site_keys = true;
    }
    if (site_keys) ++out.dpus_with_site_keys;
    const auto keys = core::classify_present_keys(current, row.wanted, row.explained, &registered);
    if (!keys.derived_removals.empty()) out.derived[row.device] = keys.derived_removals;
    out.foreign_keys += keys.foreign.size();
    for (const auto& k : keys.foreign)
      if (out.foreign_examples.size() < kExamples)
        out.foreign_examples.push_back(row.device + ": " + k);
  }
  out.complete = true;
  return out;
}

}  // namespace extsvc::controller
