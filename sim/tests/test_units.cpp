// Unit tests of the building blocks (no subprocess): selectors, node selectors, store semantics,
// validation.
#include <gtest/gtest.h>

#include "kube_errors.h"
#include "label_selector.h"
#include "node_selector.h"
#include "resources.h"
#include "store.h"
#include "validation.h"

using namespace dpfsim;

TEST(LabelSelector, EqualityOperators) {
  json l{{"env", "prod"}, {"tier", "fe"}};
  EXPECT_TRUE(LabelSelector::parse("env=prod").matches(l));
  EXPECT_TRUE(LabelSelector::parse("env==prod").matches(l));
  EXPECT_FALSE(LabelSelector::parse("env!=prod").matches(l));
  EXPECT_TRUE(LabelSelector::parse("missing!=x").matches(l));
  EXPECT_TRUE(LabelSelector::parse("env=prod,tier=fe").matches(l));
  EXPECT_FALSE(LabelSelector::parse("env=prod,tier=be").matches(l));
  EXPECT_TRUE(LabelSelector::parse("").matches(l));
}

TEST(LabelSelector, SetOperators) {
  json l{{"env", "prod"}, {"a.b/c", "x"}};
  EXPECT_TRUE(LabelSelector::parse("env in (prod, qa)").matches(l));
  EXPECT_FALSE(LabelSelector::parse("env in (qa)").matches(l));
  EXPECT_FALSE(LabelSelector::parse("env notin (prod,qa)").matches(l));
  EXPECT_TRUE(LabelSelector::parse("missing notin (prod)").matches(l));
  EXPECT_TRUE(LabelSelector::parse("a.b/c").matches(l));
  EXPECT_FALSE(LabelSelector::parse("!a.b/c").matches(l));
  EXPECT_TRUE(LabelSelector::parse("!nothere").matches(l));
  EXPECT_TRUE(LabelSelector::parse("env in (prod),!nothere,a.b/c=x").matches(l));
  EXPECT_TRUE(LabelSelector::parse("n>3").matches(json{{"n", "5"}}));
  EXPECT_FALSE(LabelSelector::parse("n<3").matches(json{{"n", "5"}}));
}

TEST(LabelSelector, ParseErrors) {
  EXPECT_THROW(LabelSelector::parse("env in prod"), std::invalid_argument);
  EXPECT_THROW(LabelSelector::parse("env in ()"), std::invalid_argument);
  EXPECT_THROW(LabelSelector::parse("=x"), std::invalid_argument);
  EXPECT_THROW(LabelSelector::parse("a=b c"), std::invalid_argument);
}

TEST(FieldSelector, Basics) {
  json pod{{"metadata", {{"name", "p1"}, {"namespace", "ns"}}}, {"spec", {{"nodeName", "n1"}}}};
  std::vector<std::string> allowed{"metadata.name", "spec.nodeName"};
  EXPECT_TRUE(FieldSelector::parse("spec.nodeName=n1", allowed).matches(pod));
  EXPECT_FALSE(FieldSelector::parse("spec.nodeName!=n1", allowed).matches(pod));
  EXPECT_TRUE(FieldSelector::parse("metadata.name==p1,spec.nodeName=n1", allowed).matches(pod));
  EXPECT_THROW(FieldSelector::parse("spec.foo=x", allowed), std::invalid_argument);
}

TEST(NodeSelector, TermsOrExpressionsAnd) {
  json node{{"metadata", {{"name", "n1"}, {"labels", {{"a", "1"}, {"b", "2"}, {"num", "7"}}}}}};
  auto term = [](json exprs) { return json{{"matchExpressions", exprs}}; };
  auto sel = [](json terms) { return json{{"nodeSelectorTerms", terms}}; };
  json in_a1 = {{"key", "a"}, {"operator", "In"}, {"values", {"1"}}};
  json in_a2 = {{"key", "a"}, {"operator", "In"}, {"values", {"2"}}};
  json exists_b = {{"key", "b"}, {"operator", "Exists"}};
  json dne_c = {{"key", "c"}, {"operator", "DoesNotExist"}};
  json notin_b = {{"key", "b"}, {"operator", "NotIn"}, {"values", {"2"}}};
  json gt = {{"key", "num"}, {"operator", "Gt"}, {"values", {"5"}}};
  json lt = {{"key", "num"}, {"operator", "Lt"}, {"values", {"5"}}};
  EXPECT_TRUE(node_selector_matches(json(), node));
  EXPECT_TRUE(node_selector_matches(sel({term({in_a1, exists_b, dne_c})}), node));
  EXPECT_FALSE(node_selector_matches(sel({term({in_a1, notin_b})}), node));
  EXPECT_TRUE(node_selector_matches(sel({term({in_a2}), term({in_a1})}), node));
  EXPECT_FALSE(node_selector_matches(sel(json::array()), node));
  EXPECT_TRUE(node_selector_matches(sel({term({gt})}), node));
  EXPECT_FALSE(node_selector_matches(sel({term({lt})}), node));
  json mf = {{"matchFields", {{{"key", "metadata.name"}, {"operator", "In"}, {"values", {"n1"}}}}}};
  EXPECT_TRUE(node_selector_matches(sel({mf}), node));
}

class StoreTest : public ::testing::Test {
 protected:
  Prng prng{7};
  Store store{prng};
  void SetUp() override {
    std::lock_guard<std::mutex> l(store.mutex());
    store.create_l(*find_resource_by_plural(ClusterId::Management, "namespaces"),
                   json{{"metadata", {{"name", "ns"}}}});
  }
  const ResourceInfo& svc = *find_resource_by_plural(ClusterId::Management, "dpuservices");
  const ResourceInfo& node = *find_resource_by_plural(ClusterId::Dpu, "nodes");
  json svc_body(const std::string& name) {
    return json{{"apiVersion", "svc.dpu.nvidia.com/v1alpha1"},
                {"kind", "DPUService"},
                {"metadata", {{"name", name}}},
                {"spec",
                 {{"helmChart",
                   {{"source", {{"repoURL", "https://charts.example.com"}, {"version", "1.0"}}}}},
                  {"security", {{"privileged", true}}}}},
                {"status", {{"x", 1}}}};
  }
};

TEST_F(StoreTest, CreateSetsMetadataAndDropsStatus) {
  auto r = store.create(svc, "ns", svc_body("a"));
  EXPECT_EQ(r.code, 201);
  const json& o = *r.obj;
  EXPECT_EQ(o["metadata"]["generation"], 1);
  EXPECT_FALSE(o["metadata"]["uid"].get<std::string>().empty());
  EXPECT_FALSE(o.contains("status"));
  EXPECT_EQ(o["metadata"]["namespace"], "ns");
}

TEST_F(StoreTest, GenerationAndNoop) {
  auto o = *store.create(svc, "ns", svc_body("a")).obj;
  std::string rv = o["metadata"]["resourceVersion"];
  auto r =
      store.patch(svc, "ns", "a", PatchType::Merge, R"({"metadata":{"labels":{"k":"v"}}})", false);
  EXPECT_EQ((*r.obj)["metadata"]["generation"], 1);
  EXPECT_NE((*r.obj)["metadata"]["resourceVersion"], rv);
  rv = (*r.obj)["metadata"]["resourceVersion"];
  r = store.patch(svc, "ns", "a", PatchType::Merge, R"({"metadata":{"labels":{"k":"v"}}})", false);
  EXPECT_EQ((*r.obj)["metadata"]["resourceVersion"], rv) << "no-op must keep the resourceVersion";
  r = store.patch(svc, "ns", "a", PatchType::Merge, R"({"spec":{"paused":true}})", false);
  EXPECT_EQ((*r.obj)["metadata"]["generation"], 2);
  r = store.patch(svc, "ns", "a", PatchType::Merge, R"({"status":{"observedGeneration":2,"y":1}})",
                  true);
  EXPECT_EQ((*r.obj)["metadata"]["generation"], 2);
  EXPECT_EQ((*r.obj)["status"]["observedGeneration"], 2);
  EXPECT_FALSE((*r.obj)["status"].contains("y")) << "unknown status fields are pruned too";
  r = store.patch(svc, "ns", "a", PatchType::Merge,
                  R"({"status":{"observedGeneration":3},"spec":{"paused":false}})", false);
  EXPECT_EQ((*r.obj)["status"]["observedGeneration"], 2) << "main resource writes ignore status";
  EXPECT_EQ((*r.obj)["metadata"]["generation"], 3);
}

TEST_F(StoreTest, ConflictAndMissingResourceVersion) {
  auto o = *store.create(svc, "ns", svc_body("a")).obj;
  json stale = o;
  store.patch(svc, "ns", "a", PatchType::Merge, R"({"metadata":{"labels":{"k":"v"}}})", false);
  try {
    store.update(svc, "ns", "a", stale, false);
    FAIL() << "expected conflict";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code, 409);
  }
  json norv = o;
  norv["metadata"].erase("resourceVersion");
  try {
    store.update(svc, "ns", "a", norv, false);
    FAIL() << "expected 422";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code, 422);
    EXPECT_NE(e.body.find("must be specified for an update"), std::string::npos);
  }
  // Built-in Nodes allow unconditional update.
  json n{{"metadata", {{"name", "n1"}}}};
  store.create(node, "", n);
  auto r = store.update(node, "", "n1",
                        json{{"metadata", {{"name", "n1"}, {"labels", {{"a", "b"}}}}}}, false);
  EXPECT_EQ((*r.obj)["metadata"]["labels"]["a"], "b");
}

TEST_F(StoreTest, FinalizerDeletion) {
  json b = svc_body("a");
  b["metadata"]["finalizers"] = {"x/y"};
  store.create(svc, "ns", b);
  auto r = store.remove(svc, "ns", "a", {});
  ASSERT_TRUE(r.obj);
  EXPECT_TRUE((*r.obj)["metadata"].contains("deletionTimestamp"));
  EXPECT_EQ((*r.obj)["metadata"]["generation"], 2);
  auto r2 = store.remove(svc, "ns", "a", {});
  EXPECT_EQ((*r2.obj)["metadata"]["resourceVersion"], (*r.obj)["metadata"]["resourceVersion"]);
  try {
    store.patch(svc, "ns", "a", PatchType::Merge,
                R"({"metadata":{"finalizers":["x/y","new/one"]}})", false);
    FAIL() << "expected 422";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code, 422);
  }
  store.patch(svc, "ns", "a", PatchType::Merge, R"({"metadata":{"finalizers":null}})", false);
  EXPECT_THROW(store.get(svc, "ns", "a"), ApiError);
}

TEST(Validation, DPUServiceRules) {
  const ResourceInfo& svc = *find_resource_by_plural(ClusterId::Management, "dpuservices");
  auto causes_of = [&](json obj, const json* old = nullptr) {
    std::vector<FieldCause> c;
    validate_object_meta(svc, obj, old == nullptr, c);
    validate_dpuservice(obj, old, c);
    return c;
  };
  json ok{{"metadata", {{"name", "ok"}}},
          {"spec",
           {{"helmChart", {{"source", {{"repoURL", "oci://x/y"}, {"version", "1"}}}}},
            {"security", {{"privileged", false}}}}}};
  EXPECT_TRUE(causes_of(ok).empty());
  json bad = ok;
  bad["spec"]["helmChart"]["source"]["repoURL"] = "http://x";
  bad["spec"]["helmChart"]["source"]["version"] = "";
  auto c = causes_of(bad);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].field, "spec.helmChart.source.repoURL");
  EXPECT_EQ(c[1].field, "spec.helmChart.source.version");
  json nopriv = ok;
  nopriv["spec"].erase("security");
  c = causes_of(nopriv);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(
      c[0].message,
      "Invalid value: \"object\": security.privileged must be set when deployInCluster is false");
  EXPECT_TRUE(causes_of(nopriv, &nopriv).empty()) << "ratcheting: old object lacked it too";
  json dic = nopriv;
  dic["spec"]["deployInCluster"] = true;
  EXPECT_TRUE(causes_of(dic).empty());
  dic["spec"]["security"]["privileged"] = true;
  EXPECT_EQ(causes_of(dic).size(), 1u);
  json ifaces = ok;
  ifaces["spec"]["interfaces"] = {"p0"};
  EXPECT_EQ(causes_of(ifaces).size(), 1u);
  json nsel = ok;
  nsel["spec"]["serviceDaemonSet"]["nodeSelector"] = json::object();
  c = causes_of(nsel);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].field, "spec.serviceDaemonSet.nodeSelector.nodeSelectorTerms");
  json longname = ok;
  longname["metadata"]["name"] = std::string(64, 'a');
  EXPECT_EQ(causes_of(longname).size(), 1u);
  json badname = ok;
  badname["metadata"]["name"] = "Bad_Name";
  EXPECT_EQ(causes_of(badname).size(), 1u);
}

TEST(KubeErrors, NotFoundBodyExact) {
  const ResourceInfo& svc = *find_resource_by_plural(ClusterId::Management, "dpuservices");
  EXPECT_EQ(
      err_not_found(svc, "x").body,
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"dpuservices.svc.dpu.nvidia.com \"x\" not found","reason":"NotFound","details":{"name":"x","group":"svc.dpu.nvidia.com","kind":"dpuservices"},"code":404})");
  const ResourceInfo& node = *find_resource_by_plural(ClusterId::Dpu, "nodes");
  EXPECT_EQ(
      err_not_found(node, "n").body,
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"nodes \"n\" not found","reason":"NotFound","details":{"name":"n","kind":"nodes"},"code":404})");
}
