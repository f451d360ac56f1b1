#include "lease.h"

#include <regex>

namespace dpfsim {

namespace {

const json* field(const json& obj, const char* name) {
  const auto spec = obj.find("spec");
  if (spec == obj.end() || !spec->is_object()) return nullptr;
  const auto it = spec->find(name);
  return it == spec->end() || it->is_null() ? nullptr : &*it;
}

// metav1.MicroTime decodes RFC 3339 with an optional fraction.
bool micro_time(const std::string& s) {
  static const std::regex re(
      R"(^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$)");
  return std::regex_match(s, re);
}

}  // namespace

const json& lease_schema() {
  static const json schema = json::parse(R"({
    "type": "object",
    "properties": {
      "apiVersion": {"type": "string"},
      "kind": {"type": "string"},
      "metadata": {"type": "object"},
      "spec": {
        "type": "object",
        "properties": {
          "acquireTime": {"type": "string", "format": "date-time"},
          "holderIdentity": {"type": "string"},
          "leaseDurationSeconds": {"type": "integer", "format": "int32"},
          "leaseTransitions": {"type": "integer", "format": "int32"},
          "preferredHolder": {"type": "string"},
          "renewTime": {"type": "string", "format": "date-time"},
          "strategy": {"type": "string"}
        }
      }
    }
  })");
  return schema;
}

void validate_lease(const json& lease, std::vector<FieldCause>& causes) {
  for (const char* t : {"acquireTime", "renewTime"}) {
    const json* v = field(lease, t);
    if (v != nullptr && (!v->is_string() || !micro_time(v->get<std::string>())))
      throw err_bad_request("Lease in version \"v1\" cannot be handled as a Lease: parsing time " +
                            v->dump() + " as \"2006-01-02T15:04:05.000000Z07:00\": cannot parse");
  }
  for (const char* n : {"leaseDurationSeconds", "leaseTransitions"}) {
    const json* v = field(lease, n);
    if (v != nullptr && !v->is_number_integer())
      throw err_bad_request(
          "Lease in version \"v1\" cannot be handled as a Lease: json: cannot "
          "unmarshal " +
          std::string(v->type_name()) + " into Go struct field LeaseSpec.spec." + n +
          " of type int32");
  }
  if (const json* d = field(lease, "leaseDurationSeconds"); d && d->get<long long>() <= 0)
    causes.push_back(cause_invalid("spec.leaseDurationSeconds", *d, "must be greater than 0"));
  if (const json* t = field(lease, "leaseTransitions"); t && t->get<long long>() < 0)
    causes.push_back(
        cause_invalid("spec.leaseTransitions", *t, "must be greater than or equal to 0"));
  const json* strategy = field(lease, "strategy");
  if (strategy != nullptr && strategy->is_string() &&
      strategy->get<std::string>() != "OldestEmulationVersion" &&
      strategy->get<std::string>().find('/') == std::string::npos)
    causes.push_back({"FieldValueNotSupported", "spec.strategy",
                      "Unsupported value: " + strategy->dump() +
                          ": supported values: \"OldestEmulationVersion\""});
  const json* preferred = field(lease, "preferredHolder");
  if (preferred != nullptr && preferred->is_string() && !preferred->get<std::string>().empty() &&
      (strategy == nullptr || (strategy->is_string() && strategy->get<std::string>().empty())))
    causes.push_back(
        cause_forbidden("spec.preferredHolder", "may only be specified if `strategy` is defined"));
}

}  // namespace dpfsim
