// Which nico/extsvc-* keys on a DPUDevice a placement pass may remove (issue 25). A key is
// removed only when this site wrote it (the database's registry of placement keys); a key the
// site never wrote is left alone and reported. Removals are of two kinds: explicit (an item of
// the DPU names the key and no longer wants it: a detach, a deleted site service) and derived
// (the key is present but nothing in the database mentions it for this DPU any more: a late
// label patch, or a database that lost its rows). Derived removals pass the orphan guard: the
// worker allows them only while the last census found few enough.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace extsvc::core {

struct PresentKeys {
  std::set<std::string> explicit_removals;  // registered, not wanted, named by an item
  std::set<std::string> derived_removals;   // registered, not wanted, named by no item
  std::set<std::string> foreign;            // not registered: never touched
};

// current_labels: spec.cluster.nodeLabels (any JSON); wanted: the keys the DPU must carry;
// explained: every key an item of the DPU names (wanted or not); registered: the site's registry
// (null: every nico/extsvc-* key counts as registered, as before the registry).
PresentKeys classify_present_keys(const nlohmann::json& current_labels,
                                  const std::set<std::string>& wanted,
                                  const std::set<std::string>& explained,
                                  const std::set<std::string>* registered);

// The merge patch of spec.cluster.nodeLabels that sets every wanted key to "enabled" (unless it
// already is) and removes exactly the present keys in remove; {} when nothing changes.
nlohmann::json placement_patch(const nlohmann::json& current_labels,
                               const std::set<std::string>& wanted,
                               const std::set<std::string>& remove);

}  // namespace extsvc::core
