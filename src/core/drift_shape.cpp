#include "core/drift_shape.hpp"

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/drift_key.hpp"
#include "core/identity.hpp"
#include "core/json_access.hpp"
#include "core/merge_patch.hpp"

namespace extsvc::core {

namespace {

using nlohmann::json;

// Not a cryptographic digest: a collision can only make the patch miss a value, and a patch
// that leaves the drift key different is followed by the read path (the empty patch below, or
// the next drift check of the object the PATCH left).
uint64_t fnv1a(std::string_view text) {
  uint64_t h = 14695981039346656037ull;
  for (const unsigned char ch : text) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

// Objects keep their keys (without null members: absent for a merge patch); anything else is
// replaced whole by a merge patch, so its digest is enough.
json digested(const json& v) {
  if (!v.is_object()) return json(fnv1a(v.dump()));
  json out = json::object();
  for (const auto& [k, x] : v.items())
    if (!x.is_null()) out[k] = digested(x);
  return out;
}

// Whether the value behind digest tree h equals v (null members of v being absent).
bool same(const json& h, const json& v) {
  if (!v.is_object()) return !h.is_object() && h.get<uint64_t>() == fnv1a(v.dump());
  if (!h.is_object()) return false;
  size_t members = 0;
  for (const auto& [k, x] : v.items()) {
    if (x.is_null()) continue;
    ++members;
    const auto it = h.find(k);
    if (it == h.end() || !same(*it, x)) return false;
  }
  return members == h.size();
}

// merge_diff(from, to) with `from` known only by its digest tree.
json diff(const json& h, const json& to) {
  if (!to.is_object() || !h.is_object()) return to;
  json patch = json::object();
  for (const auto& [k, _] : h.items()) {
    const auto it = to.find(k);
    if (it == to.end() || it->is_null()) patch[k] = nullptr;
  }
  for (const auto& [k, x] : to.items()) {
    if (x.is_null()) continue;
    const auto it = h.find(k);
    if (it == h.end()) {
      patch[k] = x;
    } else if (!same(*it, x)) {
      if (it->is_object() && x.is_object()) {
        json sub = diff(*it, x);
        if (!sub.empty()) patch[k] = std::move(sub);
      } else {
        patch[k] = x;
      }
    }
  }
  return patch;
}

std::string dotted(const std::vector<std::string>& path) {
  std::string out;
  for (const auto& k : path) out += (out.empty() ? "" : ".") + k;
  return out;
}

std::vector<std::uint8_t> identity_digest(const json& projection) {
  const std::string d = sha256_bytes(projection.value("identity", json::object()).dump());
  return {d.begin(), d.end()};
}

}  // namespace

std::string dpuservice_drift_shape(const json& obj, const json& projection) {
  bool dpf_keys = false;
  if (const json* labels = json_find(obj, {"spec", "serviceDaemonSet", "labels"});
      labels != nullptr && labels->is_object())
    for (const auto& [k, _] : labels->items())
      if (std::string_view(k).starts_with(kDpfOwnedKeyPrefix)) dpf_keys = true;
  json owned = json::object();
  if (const auto it = projection.find("owned"); it != projection.end() && it->is_object())
    for (const auto& [k, v] : it->items()) owned[k] = digested(v);
  const json shape = {
      {"i", json::binary(identity_digest(projection))}, {"d", dpf_keys}, {"o", std::move(owned)}};
  const std::vector<std::uint8_t> bytes = json::to_msgpack(shape);
  return {bytes.begin(), bytes.end()};
}

std::string dpuservice_drift_shape(const json& obj) {
  return dpuservice_drift_shape(obj, dpuservice_drift_projection(obj));
}

std::optional<json> dpuservice_patch_from_shape(const std::string& bytes, const json& desired) {
  const json shape = json::from_msgpack(bytes, true, false);
  if (shape.is_discarded() || !shape.is_object() || !shape.contains("i") ||
      !shape["i"].is_binary() || !shape.contains("o") || !shape["o"].is_object())
    return std::nullopt;
  const std::vector<std::uint8_t>& identity = shape["i"].get_binary();
  if (identity != identity_digest(dpuservice_drift_projection(desired))) return std::nullopt;
  const bool dpf_keys = shape.value("d", false);
  const json& owned = shape["o"];
  const json no_labels_of_ours = json::object();
  // dpuservice_mutable_patch, field by field, with the live value known by its digest tree
  json patch = json::object();
  for (const auto& path : dpuservice_owned_paths()) {
    const bool labels_path = path.size() == 3 && path[2] == "labels";
    const auto it = owned.find(dotted(path));
    const json* have = it != owned.end() ? &*it : nullptr;
    // only DPF's keys: the projection leaves the field out, the patch sees an empty object
    if (have == nullptr && labels_path && dpf_keys) have = &no_labels_of_ours;
    const json* want = json_find(desired, path);
    if (want == nullptr) {
      if (have != nullptr && labels_path && dpf_keys) {
        // null our keys one by one: a whole-object null would drop DPF's
        json nulls = json::object();
        if (have->is_object())
          for (const auto& [k, _] : have->items()) nulls[k] = nullptr;
        if (!nulls.empty()) json_put(patch, path, std::move(nulls));
      } else if (have != nullptr) {
        json_put(patch, path, nullptr);
      }
    } else if (have == nullptr) {
      json_put(patch, path, *want);
    } else if (!same(*have, *want)) {
      json d = diff(*have, *want);
      if (!(d.is_object() && d.empty() && have->is_object())) json_put(patch, path, std::move(d));
    }
  }
  return patch;
}

}  // namespace extsvc::core
