#include "validation.h"

#include <cctype>
#include <regex>

#include "lease.h"
#include "profile.h"

namespace dpfsim {

namespace {

const char* kSubdomainMsg =
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start "
    "and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const char* kPrefixMsg =
    "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
    "characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const char* kLabelMsg =
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end "
    "with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const char* kQualifiedNameMsg =
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric "
    "character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const char* kLabelValueMsg =
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start "
    "and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex "
    "used for validation "
    "is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

bool lower_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}
bool alnum(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0;
}

// ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]
bool is_qualified_part(const std::string& s) {
  if (s.empty()) return false;
  if (!alnum(s.front()) || !alnum(s.back())) return false;
  for (char c : s)
    if (!alnum(c) && c != '-' && c != '_' && c != '.') return false;
  return true;
}

std::string type_name(const json& v) {
  if (v.is_string()) return "string";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_object()) return "object";
  if (v.is_array()) return "array";
  return "null";
}

// Checks the JSON type of v; pushes a schema error if wrong. Returns true when the type is right.
bool check_type(const json& v, const std::string& want, const std::string& field,
                std::vector<FieldCause>& causes) {
  std::string got = type_name(v);
  bool ok = got == want || (want == "number" && got == "integer");
  if (!ok)
    causes.push_back({"FieldValueTypeInvalid", field,
                      "Invalid value: \"" + got + "\": " + field + " in body must be of type " +
                          want + ": \"" + got + "\""});
  return ok;
}

void validate_string_map(const json& m, const std::string& field, bool label_values,
                         std::vector<FieldCause>& causes) {
  if (m.is_null()) return;
  if (!m.is_object()) {
    check_type(m, "object", field, causes);
    return;
  }
  for (auto& [k, v] : m.items()) {
    // Key: [prefix/]name
    std::string name = k;
    auto slash = k.find('/');
    if (slash != std::string::npos) {
      std::string prefix = k.substr(0, slash);
      name = k.substr(slash + 1);
      if (prefix.empty() || prefix.size() > 253 || !is_dns1123_subdomain(prefix))
        causes.push_back(cause_invalid(field, k, kPrefixMsg));
    }
    if (name.empty()) {
      causes.push_back(cause_invalid(field, k, "name part must be non-empty"));
    } else if (name.size() > 63) {
      causes.push_back(cause_invalid(field, k, "name part must be no more than 63 characters"));
    } else if (!is_qualified_part(name)) {
      causes.push_back(cause_invalid(field, k, kQualifiedNameMsg));
    }
    if (!v.is_string()) {
      check_type(v, "string", field + "." + k, causes);
      continue;
    }
    if (label_values) {
      std::string val = v.get<std::string>();
      if (val.size() > 63)
        causes.push_back(cause_invalid(field, val, "must be no more than 63 characters"));
      else if (!val.empty() && !is_qualified_part(val))
        causes.push_back(cause_invalid(field, val, kLabelValueMsg));
    }
  }
}

bool has_key(const json& j, const char* k) {
  return j.is_object() && j.contains(k) && !j[k].is_null();
}

}  // namespace

bool is_dns1123_label(const std::string& s) {
  if (s.empty() || s.size() > 63) return false;
  if (!lower_alnum(s.front()) || !lower_alnum(s.back())) return false;
  for (char c : s)
    if (!lower_alnum(c) && c != '-') return false;
  return true;
}

bool is_dns1123_subdomain(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  for (const auto& part : split(s, '.'))
    if (part.empty() || !lower_alnum(part.front()) || !lower_alnum(part.back())) return false;
  for (char c : s)
    if (!lower_alnum(c) && c != '-' && c != '.') return false;
  return true;
}

void validate_object_meta(const ResourceInfo& ri, const json& obj, bool create,
                          std::vector<FieldCause>& causes) {
  const json& md = obj.contains("metadata") ? obj["metadata"] : json::object();
  std::string name = jstr(md, {"name"});
  if (create) {
    if (name.empty()) {
      causes.push_back({"FieldValueRequired", "metadata.name",
                        "Required value: name or generateName is required"});
    } else if (ri.plural == "namespaces") {
      if (!is_dns1123_label(name))
        causes.push_back(cause_invalid("metadata.name", name, kLabelMsg));
    } else if (name.size() > 253) {
      causes.push_back(cause_invalid("metadata.name", name, "must be no more than 253 characters"));
    } else if (!is_dns1123_subdomain(name)) {
      causes.push_back(cause_invalid("metadata.name", name, kSubdomainMsg));
    }
  }
  if (md.contains("labels")) validate_string_map(md["labels"], "metadata.labels", true, causes);
  if (md.contains("annotations"))
    validate_string_map(md["annotations"], "metadata.annotations", false, causes);
  if (md.contains("finalizers") && !md["finalizers"].is_null()) {
    if (check_type(md["finalizers"], "array", "metadata.finalizers", causes))
      for (size_t i = 0; i < md["finalizers"].size(); ++i)
        check_type(md["finalizers"][i], "string", "metadata.finalizers[" + std::to_string(i) + "]",
                   causes);
  }
  if (ri.custom &&
      (ri.kind == "DPUDevice" || (ri.kind == "DPUService" && profile().name_length_cel)) &&
      name.size() > 63)
    causes.push_back(
        cause_invalid("<nil>", json::object(), "name length can't be bigger than 63 chars"));
}

void validate_dpuservice(const json& obj, const json* old, std::vector<FieldCause>& causes) {
  const json* spec = jptr(obj, {"spec"});
  if (!spec || spec->is_null()) {
    causes.push_back(cause_required("spec"));
    return;
  }
  if (!check_type(*spec, "object", "spec", causes)) return;
  const json& s = *spec;

  // helmChart
  if (!has_key(s, "helmChart")) {
    causes.push_back(cause_required("spec.helmChart"));
  } else if (check_type(s["helmChart"], "object", "spec.helmChart", causes)) {
    const json& hc = s["helmChart"];
    if (!has_key(hc, "source")) {
      causes.push_back(cause_required("spec.helmChart.source"));
    } else if (check_type(hc["source"], "object", "spec.helmChart.source", causes)) {
      const json& src = hc["source"];
      const std::string base = "spec.helmChart.source.";
      if (!has_key(src, "repoURL")) {
        causes.push_back(cause_required(base + "repoURL"));
      } else if (check_type(src["repoURL"], "string", base + "repoURL", causes)) {
        std::string url = src["repoURL"].get<std::string>();
        bool ok = (starts_with(url, "oci://") && url.size() > 6) ||
                  (starts_with(url, "https://") && url.size() > 8);
        if (!ok)
          causes.push_back(
              cause_invalid(base + "repoURL", url,
                            base + "repoURL in body should match '^(oci://|https://).+$'"));
      }
      if (!has_key(src, "version")) {
        causes.push_back(cause_required(base + "version"));
      } else if (check_type(src["version"], "string", base + "version", causes)) {
        if (src["version"].get<std::string>().empty())
          causes.push_back(cause_invalid(base + "version", "",
                                         base + "version in body should be at least 1 chars long"));
      }
      for (const char* k : {"path", "chart", "releaseName"})
        if (has_key(src, k)) check_type(src[k], "string", base + k, causes);
    }
    if (has_key(hc, "values")) check_type(hc["values"], "object", "spec.helmChart.values", causes);
  }

  if (has_key(s, "serviceID")) check_type(s["serviceID"], "string", "spec.serviceID", causes);
  if (has_key(s, "deployInCluster"))
    check_type(s["deployInCluster"], "boolean", "spec.deployInCluster", causes);
  if (has_key(s, "paused")) check_type(s["paused"], "boolean", "spec.paused", causes);

  if (has_key(s, "serviceDaemonSet") &&
      check_type(s["serviceDaemonSet"], "object", "spec.serviceDaemonSet", causes)) {
    const json& sds = s["serviceDaemonSet"];
    const std::string base = "spec.serviceDaemonSet.";
    if (has_key(sds, "nodeSelector") &&
        check_type(sds["nodeSelector"], "object", base + "nodeSelector", causes)) {
      const json& nsel = sds["nodeSelector"];
      if (!has_key(nsel, "nodeSelectorTerms")) {
        causes.push_back(cause_required(base + "nodeSelector.nodeSelectorTerms"));
      } else if (check_type(nsel["nodeSelectorTerms"], "array",
                            base + "nodeSelector.nodeSelectorTerms", causes)) {
        const json& terms = nsel["nodeSelectorTerms"];
        for (size_t i = 0; i < terms.size(); ++i) {
          std::string tf = base + "nodeSelector.nodeSelectorTerms[" + std::to_string(i) + "]";
          if (!check_type(terms[i], "object", tf, causes)) continue;
          for (const char* kind : {"matchExpressions", "matchFields"}) {
            if (!has_key(terms[i], kind)) continue;
            if (!check_type(terms[i][kind], "array", tf + "." + kind, causes)) continue;
            const json& exprs = terms[i][kind];
            for (size_t j = 0; j < exprs.size(); ++j) {
              std::string ef = tf + "." + kind + "[" + std::to_string(j) + "]";
              if (!check_type(exprs[j], "object", ef, causes)) continue;
              if (!has_key(exprs[j], "key"))
                causes.push_back(cause_required(ef + ".key"));
              else
                check_type(exprs[j]["key"], "string", ef + ".key", causes);
              if (!has_key(exprs[j], "operator"))
                causes.push_back(cause_required(ef + ".operator"));
              else
                check_type(exprs[j]["operator"], "string", ef + ".operator", causes);
              if (has_key(exprs[j], "values") &&
                  check_type(exprs[j]["values"], "array", ef + ".values", causes))
                for (size_t k = 0; k < exprs[j]["values"].size(); ++k)
                  check_type(exprs[j]["values"][k], "string",
                             ef + ".values[" + std::to_string(k) + "]", causes);
            }
          }
        }
      }
    }
    // The CRD types these as map[string]string only: values must be strings, keys are free.
    for (const char* m : {"labels", "annotations"})
      if (has_key(sds, m) && check_type(sds[m], "object", base + m, causes))
        for (auto& [k, v] : sds[m].items()) check_type(v, "string", base + m + "." + k, causes);
    if (has_key(sds, "updateStrategy") &&
        check_type(sds["updateStrategy"], "object", base + "updateStrategy", causes)) {
      const json& us = sds["updateStrategy"];
      if (has_key(us, "type"))
        check_type(us["type"], "string", base + "updateStrategy.type", causes);
      if (has_key(us, "rollingUpdate") &&
          check_type(us["rollingUpdate"], "object", base + "updateStrategy.rollingUpdate", causes))
        for (const char* k : {"maxSurge", "maxUnavailable"}) {
          const json* v = jptr(us["rollingUpdate"], {k});
          if (v && !v->is_null() && !v->is_string() && !v->is_number_integer())
            causes.push_back({"FieldValueTypeInvalid", base + "updateStrategy.rollingUpdate." + k,
                              "Invalid value: \"" + type_name(*v) + "\": " + base +
                                  "updateStrategy.rollingUpdate." + k +
                                  " in body must be of type integer,string: \"" + type_name(*v) +
                                  "\""});
        }
    }
    if (has_key(sds, "resources") &&
        check_type(sds["resources"], "object", base + "resources", causes)) {
      static const std::regex qty(
          R"(^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$)");
      for (auto& [k, v] : sds["resources"].items()) {
        std::string f = base + "resources." + k;
        if (v.is_number_integer()) continue;
        if (!v.is_string()) {
          causes.push_back({"FieldValueTypeInvalid", f,
                            "Invalid value: \"" + type_name(v) + "\": " + f +
                                " in body must be of type integer,string: \"" + type_name(v) +
                                "\""});
        } else if (!std::regex_match(v.get<std::string>(), qty)) {
          causes.push_back(
              cause_invalid(f, v.get<std::string>(),
                            f + " in body should match "
                                "'^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|["
                                "numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$'"));
        }
      }
    }
  }

  if (has_key(s, "interfaces") && check_type(s["interfaces"], "array", "spec.interfaces", causes)) {
    size_t n = s["interfaces"].size();
    if (n < 1) causes.push_back(cause_too_few("spec.interfaces", n, 1));
    if (n > 50) causes.push_back(cause_too_many("spec.interfaces", n, 50));
    for (size_t i = 0; i < n; ++i)
      check_type(s["interfaces"][i], "string", "spec.interfaces[" + std::to_string(i) + "]",
                 causes);
  }

  if (has_key(s, "configPorts") &&
      check_type(s["configPorts"], "object", "spec.configPorts", causes)) {
    const json& cp = s["configPorts"];
    std::string st = jstr(cp, {"serviceType"}, "NodePort");
    if (st != "NodePort" && st != "ClusterIP" && st != "None")
      causes.push_back(
          cause_unsupported("spec.configPorts.serviceType", st, {"NodePort", "ClusterIP", "None"}));
    if (old) {
      const json* ocp = jptr(*old, {"spec", "configPorts"});
      if (ocp && ocp->is_object() && jstr(*ocp, {"serviceType"}, "NodePort") != st)
        causes.push_back(cause_invalid("spec.configPorts.serviceType", st, "Value is immutable"));
    }
    bool any_node_port = false;
    if (has_key(cp, "ports") &&
        check_type(cp["ports"], "array", "spec.configPorts.ports", causes)) {
      for (size_t i = 0; i < cp["ports"].size(); ++i) {
        const json& p = cp["ports"][i];
        std::string pf = "spec.configPorts.ports[" + std::to_string(i) + "]";
        if (!check_type(p, "object", pf, causes)) continue;
        std::string pname = jstr(p, {"name"});
        bool name_ok = !pname.empty();
        for (char c : pname)
          if (!lower_alnum(c) && c != '-') name_ok = false;
        if (!name_ok)
          causes.push_back(
              cause_invalid(pf + ".name", pname, pf + ".name in body should match '^[a-z0-9-]+$'"));
        std::string proto = jstr(p, {"protocol"});
        if (proto != "TCP" && proto != "UDP")
          causes.push_back(cause_unsupported(pf + ".protocol", proto, {"TCP", "UDP"}));
        if (!has_key(p, "port") || !p["port"].is_number_integer() ||
            p["port"].get<long long>() < 0 || p["port"].get<long long>() > 65535)
          causes.push_back(
              cause_invalid(pf + ".port", p.value("port", json()), "must be a valid port number"));
        if (has_key(p, "nodePort")) any_node_port = true;
      }
    }
    if (any_node_port && st != "NodePort")
      causes.push_back(cause_invalid("spec.configPorts", json::object(),
                                     "nodePort can only be set when serviceType is NodePort"));
  }

  // CEL rules on spec.
  bool deploy_in_cluster = jbool(s, {"deployInCluster"});
  bool has_privileged =
      jptr(s, {"security", "privileged"}) != nullptr && !s["security"]["privileged"].is_null();
  auto cel = [&](const std::string& msg) {
    causes.push_back(cause_invalid("spec", json::object(), msg));
  };
  bool has_interfaces = has_key(s, "interfaces");
  bool has_service_id = has_key(s, "serviceID");
  if (!((has_interfaces && has_service_id) || (!has_interfaces && !has_service_id) ||
        has_service_id))
    cel("serviceID must be provided when interfaces are provided");
  if (deploy_in_cluster && has_key(s, "configPorts"))
    cel("configPorts cannot be set when deployInCluster is true");
  if (deploy_in_cluster && has_key(s, "dpuClusterSelector"))
    cel("dpuClusterSelector cannot be set when deployInCluster is true");
  if (profile().privileged_cel && deploy_in_cluster && has_privileged)
    cel("security.privileged must not be set when deployInCluster is true");
  if (profile().privileged_cel && deploy_in_cluster && jptr(s, {"security", "spiffe"}) &&
      !s["security"]["spiffe"].is_null())
    cel("security.spiffe must not be set when deployInCluster is true");
  if (profile().privileged_cel && !deploy_in_cluster && !has_privileged) {
    bool ratcheted = false;
    if (old) {
      const json* os = jptr(*old, {"spec"});
      bool old_dic = os ? jbool(*os, {"deployInCluster"}) : false;
      bool old_priv = os && jptr(*os, {"security", "privileged"}) != nullptr &&
                      !(*os)["security"]["privileged"].is_null();
      ratcheted = !old_dic && !old_priv;
    }
    if (!ratcheted) cel("security.privileged must be set when deployInCluster is false");
  }
  if (has_key(s, "security") && check_type(s["security"], "object", "spec.security", causes) &&
      has_privileged)
    check_type(s["security"]["privileged"], "boolean", "spec.security.privileged", causes);
}

void prune_unknown_fields(const ResourceInfo& ri, json& obj, std::vector<std::string>* unknown) {
  const json* schema = schema_for(ri);
  if (!schema || !obj.is_object()) return;
  prune_with_schema(*schema, obj, "", unknown);
}

namespace {
thread_local FieldValidationScope* g_scope = nullptr;
}

FieldValidationScope::FieldValidationScope(FieldValidation m) : mode(m), prev(g_scope) {
  g_scope = this;
}
FieldValidationScope::~FieldValidationScope() {
  g_scope = prev;
}

void prune_for_request(const ResourceInfo& ri, json& obj) {
  std::vector<std::string> unknown;
  prune_unknown_fields(ri, obj, &unknown);
  if (unknown.empty() || !g_scope || g_scope->mode == FieldValidation::Ignore) return;
  if (g_scope->mode == FieldValidation::Strict) {
    std::string msg = ri.kind + " in version \"" + ri.version + "\" cannot be handled as a " +
                      ri.kind + ": strict decoding error: ";
    for (size_t i = 0; i < unknown.size(); ++i)
      msg += (i ? ", " : "") + std::string("unknown field \"") + unknown[i] + "\"";
    throw err_bad_request(msg);
  }
  for (const auto& u : unknown) g_scope->warnings.push_back("unknown field \"" + u + "\"");
}

void validate_or_throw(const ResourceInfo& ri, const json& obj, const json* old) {
  std::vector<FieldCause> causes;
  validate_object_meta(ri, obj, old == nullptr, causes);
  if (ri.kind == "DPUService") validate_dpuservice(obj, old, causes);
  if (ri.kind == "Lease") validate_lease(obj, causes);
  if (!causes.empty()) throw err_invalid(ri, jstr(obj, {"metadata", "name"}), causes);
}

}  // namespace dpfsim
