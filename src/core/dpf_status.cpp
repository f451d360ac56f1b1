#include "core/dpf_status.hpp"

#include <algorithm>
#include <optional>
#include <string_view>
#include <utility>

#include "core/json_access.hpp"
#include "core/merge_patch.hpp"
#include "core/utf8.hpp"

namespace extsvc::core {
namespace {

using nlohmann::json;

// Collects the paths of a merge patch ("spec.security") down to the first
// level the echoed object lacks: that is what the server dropped. Nulls
// (fields the server added) are not losses and are skipped.
void dropped_paths(const json& patch, const json* echoed, const std::string& prefix,
                   std::vector<std::string>& out) {
  if (patch.is_null()) return;
  if (echoed == nullptr || echoed->is_null() || !patch.is_object() || patch.empty() ||
      !echoed->is_object()) {
    out.push_back(prefix);
    return;
  }
  for (const auto& [key, value] : patch.items()) {
    const auto it = echoed->find(key);
    dropped_paths(value, it == echoed->end() ? nullptr : &*it,
                  prefix.empty() ? key : prefix + "." + key, out);
  }
}

}  // namespace

DpfStatus dpf_status(const json& obj) {
  DpfStatus s;
  const json& gen = json_at(obj, {"metadata", "generation"});
  if (gen.is_number_integer()) s.generation = gen.get<int64_t>();
  const json& observed = json_at(obj, {"status", "observedGeneration"});
  s.generation_observed = observed.is_number_integer() && observed.get<int64_t>() == s.generation;
  s.paused = json_at(obj, {"spec", "paused"}) == json(true);
  for (const auto& c : json_at(obj, {"status", "conditions"})) {
    if (!c.is_object() || json_text_at(c, {"type"}) != "Ready") continue;
    const std::string status = json_text_at(c, {"status"});
    if (status == "True") s.ready = true;
    if (status == "False") s.ready = false;
    s.reason = json_text_at(c, {"reason"});
    s.message = json_text_at(c, {"message"});
  }
  // DPF's Ready is a summary ("The following conditions are not ready: ApplicationsReady"); the
  // cause is in the conditions it names (an Argo CD sync failure shows only in ApplicationsReady:
  // "Application is not ready (Sync: OutOfSync, Health: Missing) ..."), so the first two are added.
  if (s.ready == std::optional<bool>(false)) {
    int added = 0;
    for (const auto& c : json_at(obj, {"status", "conditions"})) {
      if (!c.is_object() || added == 2) continue;
      const std::string type = json_text_at(c, {"type"});
      const std::string message = json_text_at(c, {"message"});
      if (type == "Ready" || json_text_at(c, {"status"}) == "True" || message.empty()) continue;
      s.message += (s.message.empty() ? "" : "; ") + type + ": " + utf8_prefix(message, 300);
      ++added;
    }
  }
  if (s.paused)
    s.message = "spec.paused is true: DPF does not reconcile or delete this DPUService" +
                (s.message.empty() ? std::string() : "; " + s.message);
  return s;
}

bool dpf_reports_out_of_sync(const DpfStatus& s) {
  return s.ready == std::optional<bool>(false) &&
         s.message.find("(Sync: OutOfSync") != std::string::npos;
}

std::string argo_application_selector(const std::string& name, const std::string& ns) {
  return "dpu.nvidia.com/dpuservice-name=" + name + ",dpu.nvidia.com/dpuservice-namespace=" + ns;
}

std::string argo_sync_failure(const json& app) {
  const std::string phase = json_text_at(app, {"status", "operationState", "phase"});
  if (phase == "Failed" || phase == "Error") {
    std::string msg = json_text_at(app, {"status", "operationState", "message"});
    if (!msg.empty()) return msg;
  }
  for (const auto& c : json_at(app, {"status", "conditions"}))
    if (c.is_object() && json_text_at(c, {"type"}) == "SyncError") {
      std::string msg = json_text_at(c, {"message"});
      if (!msg.empty()) return msg;
    }
  return {};
}

std::string argo_sync_note(const json& items,
                           const std::function<std::string(std::string_view)>& clean,
                           std::size_t max_bytes) {
  if (!items.is_array()) return {};
  std::vector<std::pair<std::string, std::string>> failed;
  for (const auto& app : items)
    if (std::string msg = argo_sync_failure(app); !msg.empty())
      failed.emplace_back(json_text_at(app, {"metadata", "name"}), std::move(msg));
  std::string out;
  for (const auto& [name, msg] : failed) {
    if (!out.empty()) out += "; ";
    if (items.size() > 1) out += "Application " + name + " ";
    out += "sync failed: " + utf8_prefix(clean(msg), max_bytes);
  }
  return out;
}

std::string argo_unreadable_note(int http_status, const std::string& why, const std::string& ns) {
  std::string out = "the Argo CD sync message could not be read (" + why + ")";
  if (http_status == 403)
    out += ": grant get and list on applications.argoproj.io in namespace " + ns +
           " to show why the sync failed";
  return out;
}

std::vector<std::string> strict_unknown_fields(const std::string& msg) {
  std::vector<std::string> out;
  if (msg.find("strict decoding error") == std::string::npos) return out;
  static const std::string kMarker = "unknown field \"";
  for (std::size_t pos = msg.find(kMarker); pos != std::string::npos;
       pos = msg.find(kMarker, pos)) {
    pos += kMarker.size();
    const auto end = msg.find('"', pos);
    if (end == std::string::npos) break;
    std::string field = msg.substr(pos, end - pos);
    if (std::find(out.begin(), out.end(), field) == out.end()) out.push_back(std::move(field));
    pos = end;
  }
  return out;
}

namespace {

// Fields this product sends that not every DPF release's CRD defines, with the
// releases whose CRDs were read (docs/dpfsim.md "Release profiles"). The first
// release that added each one is not established, so only what was read is said.
const char* release_note(std::string_view field) {
  static constexpr std::pair<std::string_view, const char*> kKnown[] = {
      {"spec.security",
       "not in DPF v24.10's or v25.7's DPUService CRD; first in DPF v26.8, the minimum release"},
      {"spec.security.spiffe",
       "not in DPF v24.10's or v25.7's DPUService CRD; first in DPF v26.8, the minimum release"},
      {"spec.serviceDaemonSet.resources", "not in DPF v24.10's DPUService CRD; in v26.10's"},
      {"spec.cluster",
       "DPF v24.10 has no DPUDevice CRD and v25.7's has no spec.cluster; DPF v26.8 is the "
       "minimum release"},
  };
  for (const auto& [name, note] : kKnown)
    if (field == name || (field.size() > name.size() && field.substr(0, name.size()) == name &&
                          field[name.size()] == '.'))
      return note;
  return nullptr;
}

std::string annotated(const std::vector<std::string>& fields) {
  std::string list;
  for (const auto& f : fields) {
    list += (list.empty() ? "" : ", ") + f;
    if (const char* note = release_note(f)) list += std::string(" (") + note + ")";
  }
  return list;
}

}  // namespace

std::string no_dpudevice_resource_message() {
  return "the DPF API serves no DPUDevice resource (404 for the resource, as DPF v24.10, which "
         "has no DPUDevice CRD): NICo places services with labels in DPUDevice "
         "spec.cluster.nodeLabels, which needs DPF v26.8 or later: upgrade DPF";
}

std::string unknown_device_fields_message(const std::vector<std::string>& fields) {
  return "the DPF API refused DPUDevice field(s) its CRD does not define: " + annotated(fields) +
         " (fieldValidation=Strict). NICo places services with labels in "
         "DPUDevice spec.cluster.nodeLabels, which this DPF release does not have: upgrade DPF "
         "(docs/placement.md lists which release has which field)";
}

std::string unknown_fields_message(const std::vector<std::string>& fields) {
  const std::string list = annotated(fields);
  return "the DPF API refused field(s) its CRD does not define: " + list +
         " (fieldValidation=Strict). The installed DPF release is older than this service "
         "needs: upgrade DPF to a release whose CRD has these fields, or update the service "
         "without them (docs/placement.md lists which release has which field)";
}

std::vector<std::string> dropped_fields(const json& sent, const json& echoed) {
  std::vector<std::string> out;
  // What it would take to turn the echo back into what was sent: exactly the
  // owned fields the server did not keep.
  const json patch = dpuservice_mutable_patch(echoed, sent);
  if (!patch.empty()) dropped_paths(patch, &echoed, "", out);
  return out;
}

}  // namespace extsvc::core
