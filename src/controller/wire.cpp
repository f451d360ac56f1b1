#include "controller/wire.hpp"

#include <cstdint>
#include <exception>
#include <new>
#include <string>

#include "core/dpuservice_render.hpp"

namespace extsvc::controller {
namespace {

using nlohmann::json;

json parse_object(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw WireError("work is not JSON");
  if (!j.is_object()) throw WireError("work is not a JSON object");
  return j;
}

// One field of an object, by its path for the error text.
class Fields {
 public:
  Fields(const json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

  std::string text(const char* key, bool nullable = false) const {
    const json* v = find(key, nullable);
    if (v == nullptr) return "";
    if (!v->is_string()) throw WireError(where(key) + " is not a string");
    return v->get<std::string>();
  }

  std::optional<int64_t> integer(const char* key, bool nullable, int64_t lo, int64_t hi,
                                 const char* what) const {
    const json* v = find(key, nullable);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number_integer() || v->get<int64_t>() < lo || v->get<int64_t>() > hi)
      throw WireError(where(key) + " is not " + what);
    return v->get<int64_t>();
  }

  bool boolean(const char* key) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || !it->is_boolean()) throw WireError(where(key) + " is not a boolean");
    return it->get<bool>();
  }

  const json& array(const char* key) const {
    const json* v = find(key, false);
    if (!v->is_array()) throw WireError(where(key) + " is not a JSON array");
    return *v;
  }

  std::string where(const char* key) const { return prefix_.empty() ? key : prefix_ + "." + key; }

 private:
  // nullptr: absent or null and allowed to be (a null that is not allowed is
  // returned, and refused by the caller's type check)
  const json* find(const char* key, bool nullable) const {
    auto it = obj_.find(key);
    if (it == obj_.end()) {
      if (nullable) return nullptr;
      throw WireError(where(key) + " is missing");
    }
    if (it->is_null() && nullable) return nullptr;
    return &*it;
  }

  const json& obj_;
  std::string prefix_;
};

void put_if(json& j, const char* key, const std::string& s) {
  if (!s.empty()) j[key] = s;
}

template <class T>
void put_if(json& j, const char* key, const std::optional<T>& v) {
  if (v) j[key] = *v;
}

reconcile::DpuItem decode_item(const json& it, size_t i) {
  const std::string at = "items[" + std::to_string(i) + "]";
  if (!it.is_object()) throw WireError(at + " is not an object");
  const Fields f(it, at);
  reconcile::DpuItem item;
  item.kind = f.text("kind");
  if (item.kind != "attachment" && item.kind != "site")
    throw WireError(f.where("kind") + " is neither attachment nor site");
  item.instance_id = f.text("instance_id", /*nullable=*/item.kind == "site");
  if (item.kind == "attachment" && item.instance_id.empty())
    throw WireError(f.where("instance_id") + " is empty");
  item.service_id = f.text("service_id");
  item.version = f.text("version");
  item.label_key = f.text("label_key");
  item.dpf_service_name = f.text("dpf_service_name");
  item.applied_revision = static_cast<int>(
      f.integer("applied_revision", true, 0, INT32_MAX, "a revision number").value_or(0));
  item.wanted = f.boolean("wanted");
  return item;
}

}  // namespace

ServiceItem decode_service_work(std::string_view work_json) {
  const json j = parse_object(work_json);
  const Fields f(j, "");
  ServiceItem item;
  reconcile::ServiceWork& w = item.work;
  w.service_id = f.text("service_id");
  w.lifecycle_state = f.text("lifecycle_state");
  w.deployment_scope = f.text("deployment_scope");
  w.dpf_service_name = f.text("dpf_service_name");
  w.attachable_version = f.text("attachable_version");
  w.desired_revision =
      static_cast<int>(*f.integer("desired_revision", false, 1, INT32_MAX, "a revision number"));
  if (auto applied = f.integer("applied_revision", true, 1, INT32_MAX, "a revision number"))
    w.applied_revision = static_cast<int>(*applied);
  w.attempts = static_cast<int>(*f.integer("attempts", false, 0, INT32_MAX, "a count"));
  w.placement_clear = f.boolean("placement_clear");
  item.ns = f.text("namespace");
  const auto data = j.find("helm_data");
  if (data != j.end() && !data->is_null()) {
    if (!data->is_object()) throw WireError("helm_data is not an object");
    item.helm_data = *data;
  }
  const auto applied = j.find("applied_helm_data");
  if (applied != j.end() && !applied->is_null()) {
    if (!applied->is_object()) throw WireError("applied_helm_data is not an object");
    item.applied_helm_data = *applied;
  }
  return item;
}

void render_desired(ServiceItem& item, const std::string& site_id) {
  if (!item.helm_data) throw std::invalid_argument("no Helm data is stored for the revision");
  const auto& w = item.work;
  item.work.desired = core::render_dpuservice(
      w.service_id, w.attachable_version, w.desired_revision, *item.helm_data, item.ns, site_id);
  // the applied revision's object is only a patch base: one that no longer renders leaves the
  // update to the GET path
  if (item.applied_helm_data && w.applied_revision) {
    try {
      item.work.applied =
          core::render_dpuservice(w.service_id, w.attachable_version, *w.applied_revision,
                                  *item.applied_helm_data, item.ns, site_id);
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception&) {
      item.work.applied = nullptr;
    }
  }
}

json encode_service_outcome(const reconcile::Outcome& o) {
  using Kind = reconcile::Outcome::Kind;
  json j = {{"outcome", o.kind == Kind::kLost ? "retry" : reconcile::to_string(o.kind)}};
  put_if(j, "new_state", o.new_state);
  put_if(j, "reason", o.reason);
  put_if(j, "message", o.message);
  put_if(j, "applied_revision", o.applied_revision);
  put_if(j, "http_status", o.http_status);
  put_if(j, "retry_after_s", o.retry_after_s);
  put_if(j, "observed_generation", o.observed_generation);
  put_if(j, "observed_resource_version", o.observed_resource_version);
  return j;
}

json encode_service_failure(const std::string& message) {
  reconcile::Outcome o;
  o.kind = reconcile::Outcome::Kind::kTransition;
  o.new_state = "FAILED";
  o.reason = reconcile::kPermanentError;
  o.message = message;
  return encode_service_outcome(o);
}

json encode_retry(const std::string& message, std::optional<double> retry_after_s) {
  json j = {{"outcome", "retry"}, {"message", message}};
  put_if(j, "retry_after_s", retry_after_s);
  return j;
}

reconcile::DpuWork decode_dpu_work(std::string_view work_json) {
  const json j = parse_object(work_json);
  const Fields f(j, "");
  reconcile::DpuWork w;
  w.dpu_machine_id = f.text("dpu_machine_id");
  w.device_name = f.text("device_name", true);
  w.node_name = f.text("node_name", true);
  w.deregistered = f.boolean("deregistered");
  w.attempts = static_cast<int>(*f.integer("attempts", false, 0, INT32_MAX, "a count"));
  const json& keys = f.array("wanted_keys");
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!keys[i].is_string() || keys[i].get_ref<const std::string&>().empty())
      throw WireError("wanted_keys[" + std::to_string(i) + "] is not a label key");
    w.wanted_keys.insert(keys[i].get<std::string>());
  }
  const json& items = f.array("items");
  w.items.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) w.items.push_back(decode_item(items[i], i));
  return w;
}

json encode_dpu_outcome(const reconcile::DpuOutcome& o) {
  json results = json::array();
  for (const auto& r : o.results)
    results.push_back(
        {{"kind", r.item->kind},
         {"instance_id", r.item->instance_id.empty() ? json() : json(r.item->instance_id)},
         {"service_id", r.item->service_id},
         {"version", r.item->version},
         {"state", r.state},
         {"message", r.message}});
  json j = {{"outcome", o.retry ? "retry" : "observed"},
            {"results", std::move(results)},
            {"observation", o.observation},
            {"keep_polling", o.keep_polling}};
  put_if(j, "message", o.message);
  put_if(j, "http_status", o.http_status);
  put_if(j, "retry_after_s", o.retry_after_s);
  put_if(j, "observed_at", o.observed_at);
  if (o.watched) j["watched"] = true;
  if (o.strays_observed && !o.retry) {
    json strays = json::array();
    for (const auto& s : o.strays)
      strays.push_back({{"service_id", s.service_id.empty() ? json() : json(s.service_id)},
                        {"release", s.release.empty() ? json() : json(s.release)},
                        {"pod", s.pod},
                        {"reason", s.reason}});
    j["strays"] = std::move(strays);
  }
  if (!o.node_keys_removed.empty()) j["node_keys_removed"] = o.node_keys_removed;
  return j;
}

std::string encode_dpf_statuses(
    const std::vector<std::pair<std::string, core::DpfStatus>>& statuses) {
  if (statuses.empty()) return "";
  json seen = json::array();
  for (const auto& [id, st] : statuses)
    seen.push_back({{"service_id", id},
                    {"ready", st.ready ? json(*st.ready) : json()},
                    {"reason", st.reason.empty() ? json() : json(st.reason)},
                    {"message", st.message.empty() ? json() : json(st.message)}});
  return seen.dump();
}

}  // namespace extsvc::controller
