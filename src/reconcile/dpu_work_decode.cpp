#include "reconcile/dpu_work_decode.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>

namespace extsvc::reconcile {
namespace {

using nlohmann::json;

json parse(std::string_view text, const char* what) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw std::invalid_argument(std::string(what) + " is not JSON");
  if (!j.is_array()) throw std::invalid_argument(std::string(what) + " is not a JSON array");
  return j;
}

std::string where(size_t i, const char* key) {
  return "items[" + std::to_string(i) + "]." + key;
}

std::string text(const json& item, size_t i, const char* key, bool nullable = false) {
  auto it = item.find(key);
  if (it == item.end() || (nullable && it->is_null())) {
    if (nullable) return "";
    throw std::invalid_argument(where(i, key) + " is missing");
  }
  if (!it->is_string()) throw std::invalid_argument(where(i, key) + " is not a string");
  return it->get<std::string>();
}

}  // namespace

void decode_dpu_items(std::string_view wanted_keys_json, std::string_view items_json, DpuWork& w) {
  const json keys = parse(wanted_keys_json, "wanted_keys");
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!keys[i].is_string() || keys[i].get_ref<const std::string&>().empty())
      throw std::invalid_argument("wanted_keys[" + std::to_string(i) + "] is not a label key");
    w.wanted_keys.insert(keys[i].get<std::string>());
  }
  const json items = parse(items_json, "items");
  w.items.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const json& it = items[i];
    if (!it.is_object())
      throw std::invalid_argument("items[" + std::to_string(i) + "] is not an object");
    DpuItem item;
    item.kind = text(it, i, "kind");
    if (item.kind != "attachment" && item.kind != "site")
      throw std::invalid_argument(where(i, "kind") + " is neither attachment nor site");
    item.instance_id = text(it, i, "instance_id", /*nullable=*/item.kind == "site");
    if (item.kind == "attachment" && item.instance_id.empty())
      throw std::invalid_argument(where(i, "instance_id") + " is empty");
    item.service_id = text(it, i, "service_id");
    item.version = text(it, i, "version");
    item.label_key = text(it, i, "label_key");
    item.dpf_service_name = text(it, i, "dpf_service_name");
    const auto rev = it.find("applied_revision");
    if (rev != it.end() && !rev->is_null()) {
      if (!rev->is_number_integer() || rev->get<int64_t>() < 0 || rev->get<int64_t>() > INT32_MAX)
        throw std::invalid_argument(where(i, "applied_revision") + " is not a revision number");
      item.applied_revision = rev->get<int>();
    }
    const auto wanted = it.find("wanted");
    if (wanted == it.end() || !wanted->is_boolean())
      throw std::invalid_argument(where(i, "wanted") + " is not a boolean");
    item.wanted = wanted->get<bool>();
    w.items.push_back(std::move(item));
  }
}

}  // namespace extsvc::reconcile
