// Admission-time validation: object metadata for every resource, the DPUService schema and CEL
// rules.
#pragma once

#include <vector>

#include "kube_errors.h"
#include "resources.h"
#include "util.h"

namespace dpfsim {

bool is_dns1123_subdomain(const std::string& s);
bool is_dns1123_label(const std::string& s);

void validate_object_meta(const ResourceInfo& ri, const json& obj, bool create,
                          std::vector<FieldCause>& causes);
// old: the stored object on update (nullptr on create); used for CEL transition rules/ratcheting.
void validate_dpuservice(const json& obj, const json* old, std::vector<FieldCause>& causes);
// Structural-schema pruning: drops fields the DPUService CRD schema does not know (as the API
// server does).
// unknown (optional) receives the path of every pruned field ("spec.security").
void prune_unknown_fields(const ResourceInfo& ri, json& obj,
                          std::vector<std::string>* unknown = nullptr);
// fieldValidation of the request being served on this thread (set by the API server around a
// write; controllers never set it, so their writes are not pruned).
enum class FieldValidation { Ignore, Warn, Strict };
struct FieldValidationScope {
  FieldValidation mode = FieldValidation::Warn;
  std::vector<std::string> warnings;  // "unknown field \"spec.security\""
  FieldValidationScope* prev = nullptr;
  explicit FieldValidationScope(FieldValidation m);
  ~FieldValidationScope();
};
// Prunes as the API server does for a request body and applies the current fieldValidation:
// Strict throws 400 BadRequest naming every unknown field; Warn records warnings; Ignore is silent.
void prune_for_request(const ResourceInfo& ri, json& obj);

// Runs all checks for the resource; throws 422 Invalid with every cause.
void validate_or_throw(const ResourceInfo& ri, const json& obj, const json* old);

}  // namespace dpfsim
