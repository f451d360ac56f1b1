// The claimed DPU's JSON columns (extsvc.claim_dpu_reconciliations) as C++.
#pragma once

#include <string_view>

#include "reconcile/dpu_work.hpp"

namespace extsvc::reconcile {

// Fills w.wanted_keys from a JSON array of strings and w.items from a JSON
// array of objects {kind: "attachment"|"site", instance_id: string (null for
// "site"), service_id, version, label_key, dpf_service_name: strings,
// applied_revision: integer or null, wanted: boolean}. Throws
// std::invalid_argument naming the first element that does not fit: such a
// row cannot be worked, and the caller says so instead of guessing.
void decode_dpu_items(std::string_view wanted_keys_json, std::string_view items_json, DpuWork& w);

}  // namespace extsvc::reconcile
