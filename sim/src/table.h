// meta.k8s.io/v1 Table rendering for kubectl get (Accept: ...;as=Table).
#pragma once

#include <string>
#include <vector>

#include "resources.h"
#include "store.h"

namespace dpfsim {

// include_object: "None" | "Metadata" (default) | "Object".
std::string render_table(const ResourceInfo& ri, const std::vector<ObjPtr>& items,
                         const std::string& rv, const std::string& cont,
                         const std::string& include_object);

}  // namespace dpfsim
