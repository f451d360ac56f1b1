// Merge patch and diff. Input: a JSON array [from, to, wanted-label-keys?].
//   merge_diff: applying merge_diff(from, to) to `from` gives `to` (nulls in
//     objects mean "absent" on both sides), and diffing the result against
//     `to` again gives {}.
//   dpuservice_mutable_patch: applying the patch to `live` converges, i.e. the
//     next patch is {}, and it only ever touches spec.
//   node_labels_patch: after applying it, every wanted key is "enabled", no
//     other owned key is left, foreign keys are unchanged, and the next
//     patch is {}.
#include "core/merge_patch.hpp"

#include <exception>
#include <set>
#include <string>

#include "fuzz_check.hpp"
#include "fuzz_targets.hpp"

namespace extsvc::fuzz {

using nlohmann::json;

namespace {

// Removes null members of objects, recursively through objects only (array
// elements are values a merge patch replaces whole).
json strip_nulls(const json& v) {
  if (!v.is_object()) return v;
  json out = json::object();
  for (const auto& [k, x] : v.items())
    if (!x.is_null()) out[k] = strip_nulls(x);
  return out;
}

void check_merge_diff(const json& from, const json& to) {
  const json patch = core::merge_diff(from, to);
  const json applied = core::apply_merge_patch(from, patch);
  FUZZ_CHECK(strip_nulls(applied) == strip_nulls(to));
  if (to.is_object() && from.is_object()) {
    FUZZ_CHECK(core::merge_diff(applied, to) == json::object());
    FUZZ_CHECK(core::merge_diff(to, to) == json::object());
  }
}

void check_dpuservice_patch(const json& live, const json& desired) {
  const json patch = core::dpuservice_mutable_patch(live, desired);
  FUZZ_CHECK(patch.is_object());
  for (const auto& [k, v] : patch.items()) FUZZ_CHECK(k == "spec");
  if (patch.empty()) return;
  const json patched = core::apply_merge_patch(live, patch);
  FUZZ_CHECK(core::dpuservice_mutable_patch(patched, desired) == json::object());
}

void check_node_labels(const json& current, const json& wanted_json) {
  std::set<std::string> wanted;
  if (wanted_json.is_array())
    for (const auto& w : wanted_json)
      if (w.is_string()) wanted.insert(w.get<std::string>());
  const std::string prefix = "nico/extsvc-";
  const json patch = core::node_labels_patch(current, wanted, prefix);
  const json base = current.is_object() ? current : json::object();
  json labels = base;
  if (!patch.empty()) {
    FUZZ_CHECK(patch.size() == 1 && patch.contains("spec"));
    const json& changes = patch.at("spec").at("cluster").at("nodeLabels");
    FUZZ_CHECK(changes.is_object() && !changes.empty());
    labels = core::apply_merge_patch(base, changes);
  }
  for (const auto& key : wanted) FUZZ_CHECK(labels.contains(key) && labels[key] == "enabled");
  for (const auto& [k, v] : labels.items()) {
    if (std::string_view(k).starts_with(prefix) && !v.is_null()) FUZZ_CHECK(wanted.contains(k));
    if (!wanted.contains(k) && !std::string_view(k).starts_with(prefix))
      FUZZ_CHECK(base.contains(k) && base.at(k) == v);
  }
  FUZZ_CHECK(core::node_labels_patch(labels, wanted, prefix) == json::object());
}

}  // namespace

int merge_patch(const std::uint8_t* data, std::size_t size) {
  const json input = json::parse(as_text(data, size), nullptr, /*allow_exceptions=*/false);
  if (input.is_discarded() || !input.is_array() || input.size() < 2) return 0;
  const json& a = input[0];
  const json& b = input[1];
  try {
    check_merge_diff(a, b);
    check_merge_diff(b, a);
    check_dpuservice_patch(a, b);
    check_node_labels(a, input.size() > 2 ? input[2] : b);
  } catch (const std::exception& e) {
    fail(__FILE__, __LINE__, e.what());
  }
  return 0;
}

}  // namespace extsvc::fuzz
