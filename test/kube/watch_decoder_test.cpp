// The watch stream decoder (issue 11): lines split anywhere, blank keep-alive lines, CRLF,
// managedFields dropped while parsing, and every malformed input refused with a reason.
#include "kube/watch_decoder.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace extsvc::kube {
namespace {

using nlohmann::json;

std::string line(const char* type, const json& obj) {
  return json{{"type", type}, {"object", obj}}.dump() + "\n";
}

TEST(WatchDecoder, SplitsEventsAcrossArbitraryChunks) {
  const json pod = {{"kind", "Pod"},
                    {"metadata",
                     {{"name", "p"},
                      {"resourceVersion", "7"},
                      {"managedFields", json::array({{{"manager", "kubelet"}}})}}}};
  const std::string stream =
      line("ADDED", pod) + "\n" + line("MODIFIED", pod) + "\r\n" +
      line("BOOKMARK", {{"kind", "Pod"}, {"metadata", {{"resourceVersion", "9"}}}}) +
      line("DELETED", pod);
  for (size_t chunk : {1u, 2u, 7u, 64u, 4096u}) {
    WatchDecoder d(1 << 20);
    std::vector<WatchEvent> events;
    for (size_t i = 0; i < stream.size(); i += chunk) d.feed(stream.substr(i, chunk), events);
    ASSERT_FALSE(d.error()) << *d.error();
    ASSERT_EQ(events.size(), 4u) << "chunk " << chunk;
    EXPECT_EQ(events[0].type, WatchEventType::kAdded);
    EXPECT_EQ(events[1].type, WatchEventType::kModified);
    EXPECT_EQ(events[2].type, WatchEventType::kBookmark);
    EXPECT_EQ(events[3].type, WatchEventType::kDeleted);
    EXPECT_EQ(resource_version(events[2].object), "9");
    EXPECT_EQ(resource_version(events[0].object), "7");
    EXPECT_FALSE(events[0].object["metadata"].contains("managedFields"));
    EXPECT_EQ(d.pending(), 0u);
  }
}

TEST(WatchDecoder, KeepsAnUnfinishedLineForTheNextChunk) {
  WatchDecoder d(1 << 20);
  std::vector<WatchEvent> events;
  const std::string l = line("ADDED", {{"metadata", {{"name", "x"}}}});
  d.feed(l.substr(0, l.size() - 1), events);
  EXPECT_TRUE(events.empty());
  EXPECT_EQ(d.pending(), l.size() - 1);
  d.feed("\n", events);
  EXPECT_EQ(events.size(), 1u);
}

TEST(WatchDecoder, RefusesMalformedEventsAndStops) {
  const std::vector<std::string> bad = {
      "not json\n",
      "[1,2]\n",
      R"({"object":{}})"
      "\n",
      R"({"type":"ADDED"})"
      "\n",
      R"({"type":"ADDED","object":[1]})"
      "\n",
      R"({"type":"UPSERTED","object":{}})"
      "\n",
      R"({"type":7,"object":{}})"
      "\n",
  };
  for (const auto& b : bad) {
    WatchDecoder d(1 << 20);
    std::vector<WatchEvent> events;
    d.feed(b + line("ADDED", json::object()), events);
    EXPECT_TRUE(d.error().has_value()) << b;
    EXPECT_TRUE(events.empty()) << b;  // nothing after the bad line either
  }
}

TEST(WatchDecoder, BoundsTheLineLength) {
  WatchDecoder d(100);
  std::vector<WatchEvent> events;
  d.feed(std::string(60, ' '), events);
  EXPECT_FALSE(d.error());
  d.feed(std::string(60, 'x'), events);
  ASSERT_TRUE(d.error().has_value());
  EXPECT_NE(d.error()->find("longer than 100"), std::string::npos);
  EXPECT_EQ(d.pending(), 0u);
}

TEST(WatchDecoder, AnErrorEventCarriesTheStatus) {
  WatchDecoder d(1 << 20);
  std::vector<WatchEvent> events;
  d.feed(line("ERROR", {{"kind", "Status"},
                        {"code", 410},
                        {"reason", "Expired"},
                        {"message", "too old resource version: 5 (900)"}}),
         events);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, WatchEventType::kError);
  EXPECT_EQ(events[0].object["code"], 410);
}

TEST(ListPage, DropsManagedFieldsOfItemsAndNeedsAnItemsArray) {
  std::string why;
  auto page =
      parse_list_page(R"({"kind":"PodList","metadata":{"resourceVersion":"5","continue":"c"},)"
                      R"("items":[{"metadata":{"name":"a","managedFields":[{"m":1}]}}]})",
                      &why);
  ASSERT_TRUE(page.has_value()) << why;
  EXPECT_FALSE((*page)["items"][0]["metadata"].contains("managedFields"));
  EXPECT_EQ((*page)["metadata"]["continue"], "c");
  EXPECT_TRUE(parse_list_page(R"({"items":null})", &why).has_value());
  EXPECT_FALSE(parse_list_page(R"({"items":{}})", &why).has_value());
  EXPECT_FALSE(parse_list_page("[]", &why).has_value());
  EXPECT_FALSE(parse_list_page("{", &why).has_value());
}

}  // namespace
}  // namespace extsvc::kube
