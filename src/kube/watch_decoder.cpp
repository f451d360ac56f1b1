#include "kube/watch_decoder.hpp"

#include "kube/detail/internal.hpp"

namespace extsvc::kube {

namespace {

using nlohmann::json;

// Drops the value of every key `key` met at `depth` while parsing (nlohmann's parser callback:
// keys of the root object are at depth 1).
json parse_dropping(std::string_view text, int depth, const char* key) {
  json::parser_callback_t cb = [depth, key](int d, json::parse_event_t event, json& parsed) {
    return !(event == json::parse_event_t::key && d == depth && parsed.is_string() &&
             parsed.get_ref<const std::string&>() == key);
  };
  return json::parse(text.begin(), text.end(), cb, false);
}

std::optional<WatchEventType> event_type(const std::string& s) {
  if (s == "ADDED") return WatchEventType::kAdded;
  if (s == "MODIFIED") return WatchEventType::kModified;
  if (s == "DELETED") return WatchEventType::kDeleted;
  if (s == "BOOKMARK") return WatchEventType::kBookmark;
  if (s == "ERROR") return WatchEventType::kError;
  return std::nullopt;
}

}  // namespace

const char* to_string(WatchEventType t) {
  switch (t) {
    case WatchEventType::kAdded:
      return "ADDED";
    case WatchEventType::kModified:
      return "MODIFIED";
    case WatchEventType::kDeleted:
      return "DELETED";
    case WatchEventType::kBookmark:
      return "BOOKMARK";
    case WatchEventType::kError:
      return "ERROR";
  }
  return "?";
}

std::optional<WatchEvent> parse_watch_event(std::string_view line, std::string* why) {
  // {"type":..,"object":{"metadata":{"managedFields":..}}}: managedFields is a key at depth 3
  json j = parse_dropping(line, 3, "managedFields");
  if (j.is_discarded()) {
    if (why) *why = "watch event is not valid JSON";
    return std::nullopt;
  }
  if (!j.is_object()) {
    if (why) *why = "watch event is not a JSON object";
    return std::nullopt;
  }
  auto t = j.find("type");
  if (t == j.end() || !t->is_string()) {
    if (why) *why = "watch event has no type";
    return std::nullopt;
  }
  const auto& type_name = t->get_ref<const std::string&>();
  auto type = event_type(type_name);
  if (!type) {
    if (why) *why = "unknown watch event type " + detail::sanitize_utf8(type_name, 32);
    return std::nullopt;
  }
  auto o = j.find("object");
  if (o == j.end() || !o->is_object()) {
    if (why) *why = std::string("watch event ") + to_string(*type) + " has no object";
    return std::nullopt;
  }
  WatchEvent ev;
  ev.type = *type;
  ev.object = std::move(*o);
  return ev;
}

std::optional<json> parse_list_page(std::string_view text, std::string* why) {
  // {"items":[{"metadata":{"managedFields":..}}]}: depth 4
  json j = parse_dropping(text, 4, "managedFields");
  if (j.is_discarded() || !j.is_object()) {
    if (why) *why = "the list response is not a JSON object";
    return std::nullopt;
  }
  auto items = j.find("items");
  if (items == j.end() || !(items->is_array() || items->is_null())) {
    if (why) *why = "the list response has no items array";
    return std::nullopt;
  }
  if (items->is_null()) *items = json::array();
  return j;
}

std::string resource_version(const json& object) {
  auto md = object.find("metadata");
  if (md == object.end() || !md->is_object()) return {};
  auto rv = md->find("resourceVersion");
  if (rv == md->end() || !rv->is_string()) return {};
  return rv->get<std::string>();
}

void WatchDecoder::feed(std::string_view bytes, std::vector<WatchEvent>& out) {
  while (!error_ && !bytes.empty()) {
    const size_t nl = bytes.find('\n');
    if (nl == std::string_view::npos) {
      if (partial_.size() + bytes.size() > max_line_) {
        error_ = "a watch event is longer than " + std::to_string(max_line_) + " bytes";
        partial_.clear();
        return;
      }
      partial_.append(bytes);
      return;
    }
    if (partial_.size() + nl > max_line_) {
      error_ = "a watch event is longer than " + std::to_string(max_line_) + " bytes";
      partial_.clear();
      return;
    }
    if (partial_.empty()) {
      line(bytes.substr(0, nl), out);
    } else {
      partial_.append(bytes.substr(0, nl));
      std::string text;
      text.swap(partial_);
      line(text, out);
    }
    bytes.remove_prefix(nl + 1);
  }
}

void WatchDecoder::line(std::string_view text, std::vector<WatchEvent>& out) {
  while (!text.empty() && (text.back() == '\r' || text.back() == ' ' || text.back() == '\t'))
    text.remove_suffix(1);
  if (text.find_first_not_of(" \t\r") == std::string_view::npos) return;  // keep-alive blank
  std::string why;
  auto ev = parse_watch_event(text, &why);
  if (!ev) {
    error_ = why;
    return;
  }
  out.push_back(std::move(*ev));
}

}  // namespace extsvc::kube
