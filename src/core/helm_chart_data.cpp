#include "core/helm_chart_data.hpp"

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <variant>

#include "core/ascii.hpp"
#include "core/json_path.hpp"
#include "core/kube_metadata.hpp"
#include "core/kube_quantity.hpp"
#include "core/semver.hpp"
#include "core/strict_json.hpp"
#include "core/url.hpp"

namespace extsvc::core {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kRoot = "$";

[[noreturn]] void invalid(const std::string& path, const std::string& message,
                          const std::string& hint) {
  throw ValidationError(ErrorClass::kInvalidField, path, message, hint);
}

std::string member(std::string_view parent, std::string_view key) {
  return json_path_member(parent, key);
}

std::string_view type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_float:
      return "a fractional number";
    default:
      return "a number";
  }
}

// Names the field by its last path segment so messages read naturally.
void require_type(const Json& v, bool ok, const std::string& path, std::string_view field,
                  std::string_view expected) {
  if (ok) return;
  invalid(path,
          std::string(field) + " must be " + std::string(expected) + ", not " +
              std::string(type_name(v)),
          "Send " + std::string(field) + " as " + std::string(expected) + ".");
}

const Json& require_object(const Json& v, const std::string& path, std::string_view field) {
  require_type(v, v.is_object(), path, field, "an object");
  return v;
}

std::string allowed_list(std::initializer_list<std::string_view> allowed) {
  std::string out;
  for (auto a : allowed) {
    if (!out.empty()) out += ", ";
    out += a;
  }
  return out;
}

// Typed levels refuse unknown keys, so a misspelt field (upgradeStrategy) or a
// legacy credential field fails loudly instead of being dropped.
void refuse_unknown(const Json& obj, std::string_view path, std::string_view where,
                    std::initializer_list<std::string_view> allowed) {
  for (const auto& [key, value] : obj.items()) {
    bool known = false;
    for (auto a : allowed) known = known || key == a;
    if (known) continue;
    invalid(member(path, key), "unknown field in " + std::string(where),
            "Remove the field; allowed fields are " + allowed_list(allowed) + ".");
  }
}

const Json* find(const Json& obj, std::string_view key) {
  const auto it = obj.find(std::string(key));
  return it == obj.end() ? nullptr : &*it;
}

const Json& require_field(const Json& obj, std::string_view parent, std::string_view key) {
  const Json* v = find(obj, key);
  if (v == nullptr)
    invalid(member(parent, key), std::string(key) + " is required",
            "Add " + std::string(key) + " to the object.");
  return *v;
}

std::string validate_repo_url(const Json& v) {
  const std::string path = member(kRoot, "repoURL");
  require_type(v, v.is_string(), path, "repoURL", "a string");
  auto parsed = parse_repo_url_detailed(v.get_ref<const std::string&>());
  if (auto* url = std::get_if<RepoUrl>(&parsed)) return to_string(*url);
  const auto problem = std::get<RepoUrlProblem>(parsed);
  const std::string message(describe(problem));
  if (problem == RepoUrlProblem::kCredentials)
    throw ValidationError(ErrorClass::kUnsupported, path, message,
                          "Remove the user information from repoURL; the site operator "
                          "provisions repository credentials as an Argo CD Secret.");
  invalid(path, message,
          "Use an oci:// or https:// URL with a host and optional port and path, "
          "such as oci://registry.example.com/charts.");
}

bool is_chart_name(std::string_view s) {
  if (s.empty() || s.size() > 100) return false;
  if (!is_lower_alnum(s.front()) || !is_lower_alnum(s.back())) return false;
  for (char c : s)
    if (!is_lower_alnum(c) && c != '-' && c != '_' && c != '.') return false;
  return true;
}

std::string validate_chart_name(const Json& v) {
  const std::string path = member(kRoot, "chartName");
  require_type(v, v.is_string(), path, "chartName", "a string");
  const auto& s = v.get_ref<const std::string&>();
  if (!is_chart_name(s))
    invalid(path, "chartName is not a valid Helm chart name",
            "Use 1 to 100 lowercase letters, digits, '-', '_' or '.', starting and ending "
            "with a letter or digit.");
  return s;
}

bool looks_like_range(std::string_view s) {
  if (s == "latest" || s == "stable" || s == "*") return true;
  if (s.find_first_of("^~<>=*|, ") != std::string_view::npos) return true;
  // "1.x", "1.2.X": wildcard components, as opposed to a prerelease "1.2.3-x".
  const auto core = s.substr(0, s.find_first_of("-+"));
  std::size_t start = 0;
  while (start <= core.size()) {
    const auto dot = core.find('.', start);
    const auto part = core.substr(start, dot == std::string_view::npos ? core.npos : dot - start);
    if (part == "x" || part == "X") return true;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return false;
}

std::string validate_chart_version(const Json& v) {
  const std::string path = member(kRoot, "chartVersion");
  require_type(v, v.is_string(), path, "chartVersion", "a string");
  const auto& s = v.get_ref<const std::string&>();
  if (is_exact_semver(s)) return s;
  invalid(path,
          looks_like_range(s) ? "chartVersion must be one exact version, not a range, wildcard "
                                "or tag"
                              : "chartVersion is not a valid SemVer 2.0.0 version",
          "Pin one exact version such as 1.2.3.");
}

Json validate_security(const Json& v) {
  const std::string path = member(kRoot, "security");
  require_object(v, path, "security");
  refuse_unknown(v, path, "security", {"privileged", "spiffe"});
  const Json& privileged = require_field(v, path, "privileged");
  require_type(privileged, privileged.is_boolean(), member(path, "privileged"),
               "security.privileged", "a boolean");
  Json out = Json::object();
  out["privileged"] = privileged;
  if (const Json* spiffe = find(v, "spiffe")) {
    const std::string spath = member(path, "spiffe");
    require_type(*spiffe, spiffe->is_object(), spath, "security.spiffe", "an empty object");
    // Presence enables SPIFFE in DPF; it has no settings NICo could vouch for.
    refuse_unknown(*spiffe, spath, "security.spiffe", {});
    out["spiffe"] = Json::object();
  }
  return out;
}

void refuse_reserved_key(std::string_view key, const std::string& path, std::string_view what) {
  if (!is_reserved_metadata_key(key)) return;
  invalid(path, std::string(what) + " key prefix is reserved for NICo and DPF",
          "Use a key outside the nico/ and svc.dpu.nvidia.com/ prefixes.");
}

void require_qualified_key(std::string_view key, const std::string& path, std::string_view what) {
  if (is_qualified_name(key)) return;
  invalid(path, std::string(what) + " key is not a valid Kubernetes qualified name",
          "Use an optional DNS subdomain prefix and '/', then up to 63 letters, digits, '-', "
          "'_' or '.', starting and ending with a letter or digit.");
}

Json validate_labels(const Json& v, const std::string& path) {
  require_object(v, path, "serviceDaemonSet.labels");
  for (const auto& [key, value] : v.items()) {
    const std::string kpath = member(path, key);
    require_qualified_key(key, kpath, "label");
    refuse_reserved_key(key, kpath, "label");
    require_type(value, value.is_string(), kpath, "a label value", "a string");
    if (!is_label_value(value.get_ref<const std::string&>()))
      invalid(kpath, "label value is not a valid Kubernetes label value",
              "Use at most 63 letters, digits, '-', '_' or '.', starting and ending with a "
              "letter or digit, or an empty string.");
  }
  return v;
}

Json validate_annotations(const Json& v, const std::string& path) {
  require_object(v, path, "serviceDaemonSet.annotations");
  std::size_t total = 0;
  for (const auto& [key, value] : v.items()) {
    const std::string kpath = member(path, key);
    require_qualified_key(key, kpath, "annotation");
    refuse_reserved_key(key, kpath, "annotation");
    require_type(value, value.is_string(), kpath, "an annotation value", "a string");
    total += key.size() + value.get_ref<const std::string&>().size();
  }
  if (total > kMaxAnnotationBytes)
    invalid(path, "annotations exceed the Kubernetes 262144-byte limit",
            "Shorten or remove annotations.");
  return v;
}

bool is_int32_nonnegative(const Json& v) {
  if (v.is_number_unsigned())
    return v.get<std::uint64_t>() <=
           static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max());
  if (v.is_number_integer()) {
    const auto n = v.get<std::int64_t>();
    return n >= 0 && n <= std::numeric_limits<std::int32_t>::max();
  }
  return false;
}

Json validate_resources(const Json& v, const std::string& path) {
  require_object(v, path, "serviceDaemonSet.resources");
  for (const auto& [key, value] : v.items()) {
    const std::string kpath = member(path, key);
    require_qualified_key(key, kpath, "resource");
    const bool ok = value.is_string() ? is_nonnegative_quantity(value.get_ref<const std::string&>())
                                      : is_int32_nonnegative(value);
    if (!ok)
      invalid(kpath, "resource quantity is not a non-negative Kubernetes quantity",
              "Use a whole number up to 2147483647 or a quantity string such as 100m, 1Gi or "
              "0.5.");
  }
  return v;
}

// Resolves an int-or-percent to its numeric part, or nullopt when malformed.
std::optional<std::int64_t> int_or_percent(const Json& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) {
    if (!is_int32_nonnegative(v)) return std::nullopt;
    return v.get<std::int64_t>();
  }
  if (!v.is_string()) return std::nullopt;
  std::string_view s = v.get_ref<const std::string&>();
  if (s.size() < 2 || s.size() > 4 || s.back() != '%') return std::nullopt;
  s.remove_suffix(1);
  if (s.size() > 1 && s[0] == '0') return std::nullopt;
  std::int64_t n = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  if (n > 100) return std::nullopt;
  return n;
}

Json validate_update_strategy(const Json& v, const std::string& path) {
  require_object(v, path, "serviceDaemonSet.updateStrategy");
  refuse_unknown(v, path, "serviceDaemonSet.updateStrategy", {"type", "rollingUpdate"});
  const Json& type = require_field(v, path, "type");
  const std::string tpath = member(path, "type");
  require_type(type, type.is_string(), tpath, "updateStrategy.type", "a string");
  const auto& t = type.get_ref<const std::string&>();
  if (t != "RollingUpdate" && t != "OnDelete")
    invalid(tpath, "updateStrategy.type must be RollingUpdate or OnDelete",
            "Set type to RollingUpdate or OnDelete.");

  Json out = Json::object();
  out["type"] = t;
  const Json* rolling = find(v, "rollingUpdate");
  if (rolling == nullptr) return out;

  const std::string rpath = member(path, "rollingUpdate");
  if (t == "OnDelete")
    invalid(rpath, "rollingUpdate is not allowed with updateStrategy type OnDelete",
            "Remove rollingUpdate or set type to RollingUpdate.");
  require_object(*rolling, rpath, "updateStrategy.rollingUpdate");
  refuse_unknown(*rolling, rpath, "updateStrategy.rollingUpdate", {"maxSurge", "maxUnavailable"});

  // Kubernetes defaults a missing maxSurge to 0 and maxUnavailable to 1, then
  // requires exactly one of them to be non-zero; checking here turns a
  // DaemonSet the DPU cluster would refuse into an immediate, named error.
  std::int64_t resolved[2] = {0, 1};
  const char* names[2] = {"maxSurge", "maxUnavailable"};
  Json rout = Json::object();
  for (int i = 0; i < 2; ++i) {
    const Json* field = find(*rolling, names[i]);
    if (field == nullptr) continue;
    const std::string fpath = member(rpath, names[i]);
    const auto n = int_or_percent(*field);
    if (!n)
      invalid(fpath,
              std::string(names[i]) +
                  " must be a non-negative integer or a percentage from 0% to "
                  "100%",
              "Use a whole number such as 1 or a percentage string such as 25%.");
    resolved[i] = *n;
    rout[names[i]] = *field;
  }
  if (resolved[0] == 0 && resolved[1] == 0)
    invalid(rpath, "maxSurge and maxUnavailable must not both be zero",
            "Set maxUnavailable (default 1) or maxSurge to a non-zero value.");
  if (resolved[0] != 0 && resolved[1] != 0)
    invalid(member(rpath, "maxSurge"),
            "maxSurge must be zero when maxUnavailable is non-zero (maxUnavailable defaults to 1)",
            "Set maxUnavailable to 0 when using maxSurge, or drop maxSurge.");
  out["rollingUpdate"] = std::move(rout);
  return out;
}

Json validate_service_daemon_set(const Json& v) {
  const std::string path = member(kRoot, "serviceDaemonSet");
  require_object(v, path, "serviceDaemonSet");
  for (const auto& [key, value] : v.items()) {
    if (key == "nodeSelector")
      invalid(member(path, key), "serviceDaemonSet.nodeSelector is reserved for NICo",
              "Remove nodeSelector; NICo owns placement and targets DPUs through instance "
              "attachments.");
  }
  refuse_unknown(v, path, "serviceDaemonSet",
                 {"labels", "annotations", "resources", "updateStrategy"});

  Json out = Json::object();
  if (const Json* f = find(v, "labels"))
    out["labels"] = validate_labels(*f, member(path, "labels"));
  if (const Json* f = find(v, "annotations"))
    out["annotations"] = validate_annotations(*f, member(path, "annotations"));
  if (const Json* f = find(v, "resources"))
    out["resources"] = validate_resources(*f, member(path, "resources"));
  if (const Json* f = find(v, "updateStrategy"))
    out["updateStrategy"] = validate_update_strategy(*f, member(path, "updateStrategy"));
  return out;
}

// DPF merges spec.serviceDaemonSet over values.serviceDaemonSet; a non-object
// there, or any nodeSelector, could shadow the NICo-generated selector.
void validate_values(const Json& v) {
  const std::string path = member(kRoot, "values");
  require_type(v, v.is_object(), path, "values", "an object or null");
  const Json* sds = find(v, "serviceDaemonSet");
  if (sds == nullptr) return;
  const std::string spath = member(path, "serviceDaemonSet");
  if (!sds->is_object())
    invalid(spath, "values.serviceDaemonSet must be an object",
            "Send values.serviceDaemonSet as an object or leave it out; NICo owns its "
            "nodeSelector.");
  if (sds->contains("nodeSelector"))
    invalid(member(spath, "nodeSelector"),
            "values.serviceDaemonSet.nodeSelector is reserved for NICo",
            "Remove nodeSelector; NICo owns placement and targets DPUs through instance "
            "attachments.");
}

}  // namespace

nlohmann::ordered_json validate_helm_chart_data(std::string_view text) {
  if (text.size() > kMaxHelmChartDataBytes)
    invalid(std::string(kRoot), "data exceeds 131072 bytes",
            "Shorten values or move bulk configuration into the chart.");
  Json data;
  try {
    StrictJsonOptions options;
    options.exact_numbers = true;  // never round a tenant's number (issue #10)
    options.refuse_nul = true;     // jsonb cannot store U+0000
    data = parse_strict_json(text, options);
  } catch (const JsonSyntaxError& e) {
    switch (e.kind) {
      case JsonSyntaxError::Kind::kInexactNumber:
        invalid(e.path, e.what(),
                "Send the number as a string, or as an integer within 64 bits or a decimal "
                "with at most 15 significant digits.");
      case JsonSyntaxError::Kind::kNulCharacter:
        invalid(e.path, e.what(), "Remove the \\u0000 escape; NUL characters cannot be stored.");
      case JsonSyntaxError::Kind::kSyntax:
        break;
    }
    throw ValidationError(ErrorClass::kNotJson, e.path, e.what(),
                          "Send exactly one UTF-8 JSON object with unique keys.");
  }
  if (!data.is_object())
    invalid(std::string(kRoot), "data must be a JSON object, not " + std::string(type_name(data)),
            "Send a JSON object with repoURL, chartName, chartVersion and security.");
  refuse_unknown(
      data, kRoot, "data",
      {"repoURL", "chartName", "chartVersion", "security", "serviceDaemonSet", "values"});

  Json out = Json::object();
  out["repoURL"] = validate_repo_url(require_field(data, kRoot, "repoURL"));
  out["chartName"] = validate_chart_name(require_field(data, kRoot, "chartName"));
  out["chartVersion"] = validate_chart_version(require_field(data, kRoot, "chartVersion"));
  out["security"] = validate_security(require_field(data, kRoot, "security"));
  if (const Json* sds = find(data, "serviceDaemonSet"))
    out["serviceDaemonSet"] = validate_service_daemon_set(*sds);
  if (const Json* values = find(data, "values"); values != nullptr && !values->is_null()) {
    validate_values(*values);
    out["values"] = *values;
  }
  return out;
}

}  // namespace extsvc::core
