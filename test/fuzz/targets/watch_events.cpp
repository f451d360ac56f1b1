// Watch streams and LIST pages as the informers read them (issue 11): kube::WatchDecoder,
// parse_watch_event, parse_list_page, and what the caches compute from every object
// (core::pod_facts, core::dpuservice_drift_key). Input layout: the first byte chooses the chunk
// size the stream is fed in, the rest is the stream.
// Properties: nothing throws; feeding in chunks gives exactly the events (and error) of feeding
// it whole; every event is of a known type with an object, without metadata.managedFields; the
// unfinished line never exceeds the bound; a parsed LIST page has an items array without
// managedFields; the drift key is 32 bytes and stable across a dump/parse round trip.
#include <exception>
#include <string>
#include <vector>

#include "core/drift_key.hpp"
#include "core/pod_status.hpp"
#include "fuzz_check.hpp"
#include "fuzz_targets.hpp"
#include "kube/watch_decoder.hpp"

namespace extsvc::fuzz {

namespace {

constexpr std::size_t kMaxLine = 4096;

bool has_managed_fields(const nlohmann::json& obj) {
  auto md = obj.find("metadata");
  return md != obj.end() && md->is_object() && md->contains("managedFields");
}

}  // namespace

int watch_events(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t chunk = 1 + data[0] % 64;
  const std::string_view stream = as_text(data + 1, size - 1);
  try {
    kube::WatchDecoder whole(kMaxLine), pieces(kMaxLine);
    std::vector<kube::WatchEvent> a, b;
    whole.feed(stream, a);
    for (std::size_t i = 0; i < stream.size(); i += chunk) {
      pieces.feed(stream.substr(i, chunk), b);
      FUZZ_CHECK(pieces.pending() <= kMaxLine);
    }
    FUZZ_CHECK(a.size() == b.size());
    FUZZ_CHECK(whole.error().has_value() == pieces.error().has_value());
    for (std::size_t i = 0; i < a.size(); ++i) {
      FUZZ_CHECK(a[i].type == b[i].type);
      FUZZ_CHECK(a[i].object == b[i].object);
      FUZZ_CHECK(a[i].object.is_object());
      FUZZ_CHECK(!has_managed_fields(a[i].object));
      // what the caches compute from any object never throws, and the key is stable
      (void)core::pod_facts(a[i].object);
      const std::string key = core::dpuservice_drift_key(a[i].object);
      FUZZ_CHECK(key.size() == 32);
      FUZZ_CHECK(core::dpuservice_drift_key(nlohmann::json::parse(a[i].object.dump())) == key);
      (void)kube::resource_version(a[i].object);
    }
    std::string why;
    if (auto page = kube::parse_list_page(stream, &why)) {
      FUZZ_CHECK(page->is_object() && (*page)["items"].is_array());
      for (const auto& item : (*page)["items"])
        if (item.is_object()) FUZZ_CHECK(!has_managed_fields(item));
    } else {
      FUZZ_CHECK(!why.empty());
    }
  } catch (const std::exception& ex) {
    fail(__FILE__, __LINE__, ex.what());
  }
  return 0;
}

}  // namespace extsvc::fuzz
