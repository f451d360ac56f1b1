// Site identity (issue 25): the site id, the Lease's name, an object's membership, and which
// placement keys a pass may remove.
#include "core/site.hpp"

#include <gtest/gtest.h>

#include "core/placement_keys.hpp"
#include "core/site_timing.hpp"

namespace extsvc::core {
namespace {

using nlohmann::json;

TEST(SiteId, LabelValueThatAlsoNamesALease) {
  EXPECT_EQ(site_id_error("site-a"), std::nullopt);
  EXPECT_EQ(site_id_error("eu-west.1"), std::nullopt);
  EXPECT_EQ(site_id_error(std::string(63, 'a')), std::nullopt);
  EXPECT_EQ(site_id_error(""), "it is not set");
  EXPECT_TRUE(site_id_error(std::string(64, 'a')));
  // label values allow these, Lease names (DNS-1123 subdomains) do not
  EXPECT_TRUE(site_id_error("Site-A"));
  EXPECT_TRUE(site_id_error("site_a"));
  EXPECT_TRUE(site_id_error("-site"));
  EXPECT_TRUE(site_id_error("site."));
  EXPECT_TRUE(site_id_error("site a"));
  EXPECT_TRUE(site_id_error("site/a"));
  EXPECT_EQ(lease_name("site-a"), "nico-extsvc-site-a");
}

TEST(SiteMembership, ByTheSiteLabel) {
  const json ours = {{"metadata", {{"labels", {{"nico/site", "a"}}}}}};
  const json other = {{"metadata", {{"labels", {{"nico/site", "b"}}}}}};
  const json none = {{"metadata", {{"labels", {{"nico/extension-service-id", "x"}}}}}};
  const json not_string = {{"metadata", {{"labels", {{"nico/site", 1}}}}}};
  EXPECT_EQ(site_membership(ours, "a"), SiteMembership::kOurs);
  EXPECT_EQ(site_membership(other, "a"), SiteMembership::kForeign);
  EXPECT_EQ(site_membership(none, "a"), SiteMembership::kUnlabelled);
  EXPECT_EQ(site_membership(json::object(), "a"), SiteMembership::kUnlabelled);
  EXPECT_EQ(site_membership(not_string, "a"), SiteMembership::kForeign);
  // a worker without a site id owns nothing
  EXPECT_EQ(site_membership(ours, ""), SiteMembership::kForeign);
}

TEST(PlacementKeys, OnlyRegisteredKeysAreRemoved) {
  const json labels = {{"nico/extsvc-wanted", "enabled"},
                       {"nico/extsvc-detached", "enabled"},
                       {"nico/extsvc-late", "enabled"},
                       {"nico/extsvc-foreign", "enabled"},
                       {"other/key", "x"},
                       {"nico/extsvc-null", nullptr}};
  const std::set<std::string> wanted = {"nico/extsvc-wanted", "nico/extsvc-new"};
  const std::set<std::string> explained = {"nico/extsvc-wanted", "nico/extsvc-detached"};
  const std::set<std::string> registered = {"nico/extsvc-wanted", "nico/extsvc-detached",
                                            "nico/extsvc-late", "nico/extsvc-new"};
  const auto p = classify_present_keys(labels, wanted, explained, &registered);
  EXPECT_EQ(p.explicit_removals, std::set<std::string>{"nico/extsvc-detached"});
  EXPECT_EQ(p.derived_removals, std::set<std::string>{"nico/extsvc-late"});
  EXPECT_EQ(p.foreign, std::set<std::string>{"nico/extsvc-foreign"});
  // without a registry every key of the prefix counts as ours (unit tests, old behaviour)
  const auto all = classify_present_keys(labels, wanted, explained, nullptr);
  EXPECT_TRUE(all.foreign.empty());
  EXPECT_EQ(all.derived_removals.size(), 2u);

  const json patch = placement_patch(labels, wanted, p.explicit_removals);
  EXPECT_EQ(patch, json::parse(R"({"spec":{"cluster":{"nodeLabels":
      {"nico/extsvc-new":"enabled","nico/extsvc-detached":null}}}})"));
  // a key to remove that is absent or wanted changes nothing
  EXPECT_EQ(placement_patch(json::object(), {}, {"nico/extsvc-x"}), json::object());
  EXPECT_EQ(placement_patch({{"nico/extsvc-x", "enabled"}}, {"nico/extsvc-x"}, {"nico/extsvc-x"}),
            json::object());
}

TEST(SiteTiming, SettingsThatCannotWorkTogetherAreNamedWithTheArithmetic) {
  SiteTiming t;  // the defaults work
  EXPECT_EQ(timing_error(t), std::nullopt);
  t.lease_duration_ms = 12000;  // == 10 s + 2 s
  EXPECT_EQ(timing_error(t),
            "extsvc.lease_duration (12 s) must exceed extsvc.http_timeout + extsvc.lease_margin "
            "(10 s + 2 s = 12 s): the site Lease would not cover one call, and every call would "
            "be fenced");
  t = SiteTiming{};
  t.http_timeout_ms = 30000;  // the 0.2.0 default
  EXPECT_TRUE(timing_error(t)->starts_with("extsvc.lease_duration (15 s) must exceed"));
  t = SiteTiming{};
  t.lease_time_ms = 5000;
  EXPECT_TRUE(timing_error(t)->starts_with("extsvc.lease_time (5 s) must exceed"));
  t = SiteTiming{};
  t.renew_deadline_ms = 15000;
  EXPECT_EQ(timing_error(t),
            "extsvc.lease_renew_deadline (15 s) must be below extsvc.lease_duration (15 s): the "
            "holder must stop writing before another candidate may take the Lease");
  t = SiteTiming{};
  t.retry_period_ms = 10000;
  EXPECT_TRUE(timing_error(t)->starts_with("extsvc.lease_retry_period (10 s) must be below"));
  EXPECT_EQ(duration_text(1500), "1.5 s");
  EXPECT_EQ(duration_text(200), "200 ms");
}

}  // namespace
}  // namespace extsvc::core
