// The body of a Kubernetes watch: one JSON object per line, {"type": ADDED | MODIFIED | DELETED
// | BOOKMARK | ERROR, "object": {...}}, arriving in chunks that split lines anywhere. Also the
// trimmed parse of LIST pages. Pure functions over text; fuzzed (test/fuzz/fuzz_watch_events).
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace extsvc::kube {

enum class WatchEventType { kAdded, kModified, kDeleted, kBookmark, kError };

const char* to_string(WatchEventType t);

struct WatchEvent {
  WatchEventType type = WatchEventType::kAdded;
  nlohmann::json object;  // always a JSON object
};

// Parses one event line. The object's metadata.managedFields is dropped while parsing (it can
// be most of an object's size and nothing here reads it). nullopt and *why on anything that is
// not such an event.
std::optional<WatchEvent> parse_watch_event(std::string_view line, std::string* why);

// Parses a LIST response (a page) the same way: items[*].metadata.managedFields dropped.
// nullopt and *why when it is not a JSON object with an items array.
std::optional<nlohmann::json> parse_list_page(std::string_view text, std::string* why);

// The resourceVersion of an object ("" when absent or not a string).
std::string resource_version(const nlohmann::json& object);

class WatchDecoder {
 public:
  // A line longer than max_line_bytes ends the stream with an error (no unbounded buffer).
  explicit WatchDecoder(size_t max_line_bytes) : max_line_(max_line_bytes) {}

  // Appends bytes and returns the events of every line completed by them. After an error, nothing
  // more is decoded.
  void feed(std::string_view bytes, std::vector<WatchEvent>& out);
  const std::optional<std::string>& error() const { return error_; }
  // Bytes of an unfinished line.
  size_t pending() const { return partial_.size(); }

 private:
  void line(std::string_view text, std::vector<WatchEvent>& out);

  size_t max_line_;
  std::string partial_;
  std::optional<std::string> error_;
};

}  // namespace extsvc::kube
