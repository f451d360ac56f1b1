// coordination.k8s.io/v1 Lease (issue 25): the schema the API server prunes with and serves in
// /openapi, and ValidateLease (pkg/apis/coordination/validation). Optimistic concurrency,
// AlreadyExists and create-on-PUT are the store's, by ResourceInfo's flags (resources.cpp).
#pragma once

#include <vector>

#include "kube_errors.h"
#include "util.h"

namespace dpfsim {

const json& lease_schema();

// Appends the causes of an invalid spec (422); throws a 400 for a field that does not decode
// (a MicroTime that is not RFC 3339, a number that is not an integer), as the API server's
// decoder does before validation.
void validate_lease(const json& lease, std::vector<FieldCause>& causes);

}  // namespace dpfsim
