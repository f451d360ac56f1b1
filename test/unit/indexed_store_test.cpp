// The generic watch cache (controller/indexed_store.hpp, issue 24) driven as a reflector drives
// it, without a cluster: a (re-)list drops what it did not deliver, apply and remove keep every
// index right, facts that compare equal mark nothing; then the workload kinds built on it (pods
// by Node and owner, DaemonSets by uid with the deleted ones whose pods remain).
#include "controller/indexed_store.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "controller/device_node_store.hpp"
#include "controller/workload_store.hpp"
#include "core/workload.hpp"

namespace extsvc::controller {
namespace {

using kube::WatchEventType;
using nlohmann::json;

// A kind for the test: a colour (one index value) and tags (any number of them).
struct Item {
  std::string color;
  std::vector<std::string> tags;
  bool operator==(const Item&) const = default;
};

struct Change {
  std::string key;
  bool had_old = false;
  bool has_now = false;
};

class ItemStore : public IndexedStore<Item> {
 public:
  explicit ItemStore(Dirty& dirty) : IndexedStore(dirty, "items") {
    add_index("color", [](const Item& i) { return std::vector<std::string>{i.color}; });
    add_index("tag", [](const Item& i) { return i.tags; });
  }
  std::vector<Change> changes;

 protected:
  std::optional<Item> extract(const std::string&, const json& obj) override {
    const json& spec = obj.at("spec");
    if (spec.value("skip", false)) return std::nullopt;  // not ours
    return Item{spec.at("color").get<std::string>(),
                spec.value("tags", std::vector<std::string>{})};
  }
  void on_change(const std::string& key, const Item* old, const Item* now) override {
    changes.push_back({key, old != nullptr, now != nullptr});
    dirty_.nodes.insert(key);
  }
};

json item(const std::string& name, const std::string& color, std::vector<std::string> tags = {},
          const std::string& rv = "1") {
  return {{"metadata", {{"namespace", "ns"}, {"name", name}, {"resourceVersion", rv}}},
          {"spec", {{"color", color}, {"tags", tags}}}};
}

std::vector<std::string> colors_of(const std::vector<const Item*>& items) {
  std::vector<std::string> out;
  for (const Item* i : items) out.push_back(i->color);
  return out;
}

using Keys = std::vector<std::string>;

TEST(IndexedStore, AListThenARelistDropsWhatItDidNotDeliver) {
  Dirty dirty;
  ItemStore s(dirty);
  s.on_list_begin();
  for (const char* n : {"a", "b", "c"}) s.on_list_item(item(n, "red", {"t"}));
  s.on_list_end();
  EXPECT_EQ(s.size(), 3u);
  EXPECT_EQ(s.index_keys("color", "red"), (Keys{"ns/a", "ns/b", "ns/c"}));
  EXPECT_EQ(dirty.nodes, (std::set<std::string>{"ns/a", "ns/b", "ns/c"}));

  dirty = Dirty{};
  s.changes.clear();
  s.on_list_begin();
  s.on_list_item(item("a", "red", {"t"}));
  s.on_list_item(item("c", "blue", {"t"}));
  s.on_list_end();
  EXPECT_EQ(s.size(), 2u);
  EXPECT_EQ(s.get("ns/b"), nullptr);
  EXPECT_EQ(s.index_keys("color", "red"), (Keys{"ns/a"}));
  EXPECT_EQ(s.index_keys("color", "blue"), (Keys{"ns/c"}));
  EXPECT_EQ(s.index_keys("tag", "t"), (Keys{"ns/a", "ns/c"}));
  // a is unchanged: only c (changed) and b (gone) are reported
  ASSERT_EQ(s.changes.size(), 2u);
  EXPECT_EQ(s.changes[0].key, "ns/c");
  EXPECT_TRUE(s.changes[0].had_old && s.changes[0].has_now);
  EXPECT_EQ(s.changes[1].key, "ns/b");
  EXPECT_TRUE(s.changes[1].had_old && !s.changes[1].has_now);
  EXPECT_EQ(dirty.nodes, (std::set<std::string>{"ns/b", "ns/c"}));

  // an empty list empties the store and every index
  s.on_list_begin();
  s.on_list_end();
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(s.index_size("color"), 0u);
  EXPECT_EQ(s.index_size("tag"), 0u);
}

TEST(IndexedStore, ApplyAndRemoveKeepEveryIndexRight) {
  Dirty dirty;
  ItemStore s(dirty);
  s.on_event(WatchEventType::kAdded, item("b", "red", {"x"}));
  s.on_event(WatchEventType::kAdded, item("a", "red", {"x", "y"}));
  // key order, whatever the order of arrival
  EXPECT_EQ(s.index_keys("color", "red"), (Keys{"ns/a", "ns/b"}));
  EXPECT_EQ(s.index_keys("tag", "x"), (Keys{"ns/a", "ns/b"}));
  EXPECT_EQ(colors_of(s.by_index("tag", "y")), (Keys{"red"}));

  s.on_event(WatchEventType::kModified, item("a", "blue", {"y", "z"}));
  EXPECT_EQ(s.index_keys("color", "red"), (Keys{"ns/b"}));
  EXPECT_EQ(s.index_keys("color", "blue"), (Keys{"ns/a"}));
  EXPECT_EQ(s.index_keys("tag", "x"), (Keys{"ns/b"}));
  EXPECT_EQ(s.index_keys("tag", "y"), (Keys{"ns/a"}));
  EXPECT_EQ(s.index_keys("tag", "z"), (Keys{"ns/a"}));
  EXPECT_EQ(colors_of(s.by_index("tag", "z")), (Keys{"blue"}));
  ASSERT_NE(s.first_by_index("color", "blue"), nullptr);
  EXPECT_EQ(s.first_by_index("color", "blue")->tags, (Keys{"y", "z"}));

  s.on_event(WatchEventType::kDeleted, item("b", "red", {"x"}));
  EXPECT_EQ(s.index_count("color", "red"), 0u);
  EXPECT_EQ(s.first_by_index("color", "red"), nullptr);
  EXPECT_EQ(s.index_count("tag", "x"), 0u);
  // emptied values leave the index (a site's Nodes come and go)
  EXPECT_EQ(s.index_size("color"), 1u);
  EXPECT_EQ(s.index_size("tag"), 2u);
  // a delete of what is not held reports nothing
  s.changes.clear();
  s.on_event(WatchEventType::kDeleted, item("b", "red"));
  EXPECT_TRUE(s.changes.empty());
  EXPECT_THROW(s.by_index("size", "big"), std::out_of_range);
}

TEST(IndexedStore, FactsThatCompareEqualMarkNothing) {
  Dirty dirty;
  ItemStore s(dirty);
  s.on_event(WatchEventType::kAdded, item("a", "red", {"x"}, "1"));
  const Item* held = s.get("ns/a");
  dirty = Dirty{};
  s.changes.clear();
  // another resourceVersion, an annotation: nothing the kind extracts
  json again = item("a", "red", {"x"}, "2");
  again["metadata"]["annotations"] = {{"heartbeat", "now"}};
  s.on_event(WatchEventType::kModified, again);
  s.on_list_begin();
  s.on_list_item(item("a", "red", {"x"}, "3"));
  s.on_list_end();
  EXPECT_TRUE(s.changes.empty());
  EXPECT_TRUE(dirty.empty());
  EXPECT_EQ(s.get("ns/a"), held);  // not replaced
}

TEST(IndexedStore, AnObjectThatStopsBeingOursCountsAsDeleted) {
  Dirty dirty;
  ItemStore s(dirty);
  json skipped = item("a", "red", {"x"});
  skipped["spec"]["skip"] = true;
  s.on_event(WatchEventType::kAdded, skipped);
  EXPECT_EQ(s.size(), 0u);
  EXPECT_TRUE(s.changes.empty());
  s.on_event(WatchEventType::kModified, item("a", "red", {"x"}));
  s.on_event(WatchEventType::kModified, skipped);
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(s.index_size("color"), 0u);
  ASSERT_EQ(s.changes.size(), 2u);
  EXPECT_TRUE(s.changes[1].had_old && !s.changes[1].has_now);
}

TEST(IndexedStore, IndexesHoldAcrossRehashesAndAnIndexAddedLater) {
  Dirty dirty;
  ItemStore s(dirty);
  // the indexes point into the map's entries: thousands of inserts rehash it many times
  for (int i = 0; i < 5000; ++i)
    s.on_event(WatchEventType::kAdded,
               item("p" + std::to_string(i), i % 2 ? "odd" : "even", {"n" + std::to_string(i)}));
  EXPECT_EQ(s.index_count("color", "odd"), 2500u);
  for (int i = 0; i < 5000; i += 499) {
    const Item* f = s.first_by_index("tag", "n" + std::to_string(i));
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->color, i % 2 ? "odd" : "even");
  }
  s.add_index("first_tag", [](const Item& i) { return std::vector<std::string>{i.tags.at(0)}; });
  EXPECT_EQ(s.index_keys("first_tag", "n42"), (Keys{"ns/p42"}));
  EXPECT_EQ(s.index_size("first_tag"), 5000u);
}

// --- the kinds built on it ---------------------------------------------------------

constexpr const char* kRelease = "extsvc-abcdefghij2345672345";

json pod(const std::string& name, const std::string& node, const std::string& owner,
         const std::string& phase = "Running") {
  json p = {{"metadata", {{"namespace", "tenant"}, {"name", name}}},
            {"spec", {{"nodeName", node}}},
            {"status", {{"phase", phase}}}};
  if (!owner.empty())
    p["metadata"]["ownerReferences"] = {
        {{"kind", "DaemonSet"}, {"uid", owner}, {"controller", true}}};
  return p;
}

json daemonset(const std::string& name, const std::string& uid, const std::string& release) {
  json d = {{"metadata", {{"namespace", "tenant"}, {"name", name}, {"uid", uid}}}};
  if (!release.empty())
    d["metadata"]["annotations"] = {
        {core::kArgoTrackingAnnotation,
         "dpu-cplane-tenant1-" + release + ":apps/DaemonSet:tenant/" + name}};
  return d;
}

class Workloads : public ::testing::Test {
 protected:
  Workloads() : pods_(dirty_, "pods"), daemonsets_(dirty_, "daemonsets") {
    pods_.set_daemonsets(&daemonsets_);
    daemonsets_.set_pods(&pods_);
  }
  Dirty dirty_;
  PodStore pods_;
  DaemonSetStore daemonsets_;
};

TEST_F(Workloads, PodsOfADaemonSetWakeTheirNodesOnlyOnceItIsOurs) {
  pods_.on_event(WatchEventType::kAdded, pod("p1", "n1", "ds-uid"));
  pods_.on_event(WatchEventType::kAdded, pod("p2", "n2", "ds-uid"));
  pods_.on_event(WatchEventType::kAdded, pod("loose", "n1", ""));  // neither label nor owner
  EXPECT_EQ(pods_.size(), 2u);
  EXPECT_EQ(pods_.on("n1").size(), 1u);
  EXPECT_TRUE(dirty_.nodes.empty());  // somebody else's DaemonSet so far
  EXPECT_EQ(pods_.nodes_of("ds-uid"), (std::set<std::string>{"n1", "n2"}));

  daemonsets_.on_event(WatchEventType::kAdded, daemonset("ds", "ds-uid", kRelease));
  EXPECT_EQ(daemonsets_.release_of("ds-uid"), kRelease);
  EXPECT_EQ(dirty_.nodes, (std::set<std::string>{"n1", "n2"}));

  dirty_ = Dirty{};
  pods_.on_event(WatchEventType::kModified, pod("p1", "n1", "ds-uid"));  // a heartbeat
  EXPECT_TRUE(dirty_.nodes.empty());
  pods_.on_event(WatchEventType::kModified, pod("p1", "n1", "ds-uid", "Failed"));
  EXPECT_EQ(dirty_.nodes, (std::set<std::string>{"n1"}));
  ASSERT_EQ(pods_.on("n1").size(), 1u);
  EXPECT_EQ(pods_.on("n1")[0]->phase, "Failed");
}

TEST_F(Workloads, ADeletedDaemonSetAnswersWhileItsPodsRemain) {
  daemonsets_.on_event(WatchEventType::kAdded, daemonset("ds", "ds-uid", kRelease));
  daemonsets_.on_event(WatchEventType::kAdded, daemonset("other", "other-uid", ""));  // not ours
  EXPECT_EQ(daemonsets_.size(), 1u);
  pods_.on_event(WatchEventType::kAdded, pod("p1", "n1", "ds-uid"));
  EXPECT_EQ(dirty_.nodes, (std::set<std::string>{"n1"}));

  dirty_ = Dirty{};
  daemonsets_.on_event(WatchEventType::kDeleted, daemonset("ds", "ds-uid", kRelease));
  EXPECT_EQ(daemonsets_.size(), 0u);
  EXPECT_EQ(daemonsets_.release_of("ds-uid"), kRelease);  // its pod is still there
  EXPECT_EQ(dirty_.nodes, (std::set<std::string>{"n1"}));

  pods_.on_event(WatchEventType::kDeleted, pod("p1", "n1", "ds-uid"));
  EXPECT_FALSE(pods_.has_owner("ds-uid"));
  EXPECT_TRUE(pods_.on("n1").empty());
  // the next removal of a DaemonSet forgets the ones whose pods are gone
  daemonsets_.on_event(WatchEventType::kAdded, daemonset("ds2", "ds2-uid", kRelease));
  daemonsets_.on_event(WatchEventType::kDeleted, daemonset("ds2", "ds2-uid", kRelease));
  EXPECT_EQ(daemonsets_.release_of("ds-uid"), "");
  EXPECT_EQ(daemonsets_.release_of("ds2-uid"), "");
}

TEST(DeviceStore, AnOlderVersionNeverReplacesAPatchResponseAndANewVersionAloneWakesNothing) {
  Dirty dirty;
  DeviceStore s(dirty, "dpudevices");
  auto dev = [](const std::string& rv, const std::string& label) {
    return json{{"metadata", {{"namespace", "dpf"}, {"name", "dev1"}, {"resourceVersion", rv}}},
                {"spec", {{"cluster", {{"nodeLabels", {{"nico/extsvc-x", label}}}}}}}};
  };
  s.on_event(WatchEventType::kAdded, dev("10", "a"));
  EXPECT_EQ(dirty.devices, (std::set<std::string>{"dev1"}));  // keyed by name
  dirty = Dirty{};
  s.patched(dev("12", "b"));
  EXPECT_EQ(dirty.devices, (std::set<std::string>{"dev1"}));
  dirty = Dirty{};
  s.on_event(WatchEventType::kModified, dev("11", "a"));  // the watch lags behind the PATCH
  EXPECT_EQ(s.get("dev1")->labels.at("nico/extsvc-x"), "b");
  EXPECT_EQ(s.get("dev1")->resource_version, "12");
  s.on_event(WatchEventType::kModified, dev("13", "b"));  // DPF's status write
  EXPECT_EQ(s.get("dev1")->resource_version, "13");
  EXPECT_TRUE(dirty.empty());
  s.on_event(WatchEventType::kDeleted, dev("14", "b"));
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(dirty.devices, (std::set<std::string>{"dev1"}));
}

}  // namespace
}  // namespace extsvc::controller
