#include "core/helm_chart_data.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/validation_error.hpp"

namespace extsvc::core {
namespace {

using Json = nlohmann::ordered_json;

Json minimal() {
  return Json::parse(R"({"repoURL":"oci://registry.example.com/charts","chartName":"tenant-service",
                         "chartVersion":"1.2.3","security":{"privileged":false}})");
}

// Applies `edit` to the minimal document and validates the result.
Json accept_with(const std::function<void(Json&)>& edit) {
  Json d = minimal();
  edit(d);
  return validate_helm_chart_data(d.dump());
}

ValidationError refusal(std::string_view text) {
  try {
    validate_helm_chart_data(text);
  } catch (const ValidationError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << text;
  return ValidationError(ErrorClass::kInvalidField, "", "", "");
}

void expect_refused(std::string_view text, ErrorClass cls, std::string_view path) {
  const auto e = refusal(text);
  EXPECT_EQ(e.cls, cls) << text << " -> " << e.what();
  EXPECT_EQ(e.path, path) << text << " -> " << e.what();
  const std::string msg = e.what();
  EXPECT_FALSE(msg.empty());
  EXPECT_EQ(msg.find('\n'), std::string::npos);
  EXPECT_FALSE(msg[0] >= 'A' && msg[0] <= 'Z') << msg;
  EXPECT_FALSE(e.hint.empty()) << msg;
}

void expect_refused_with(const std::function<void(Json&)>& edit, ErrorClass cls,
                         std::string_view path) {
  Json d = minimal();
  edit(d);
  expect_refused(d.dump(), cls, path);
}

constexpr auto kInvalid = ErrorClass::kInvalidField;

// ---------------------------------------------------------------- normalization

TEST(HelmChartData, MinimalNormalizedExactly) {
  EXPECT_EQ(validate_helm_chart_data(minimal().dump()).dump(),
            R"({"repoURL":"oci://registry.example.com/charts","chartName":"tenant-service",)"
            R"("chartVersion":"1.2.3","security":{"privileged":false}})");
}

TEST(HelmChartData, FullNormalizedInCanonicalOrder) {
  const std::string text = R"({
    "values": {"z": 1, "a": {"b": [1, 2]}, "serviceDaemonSet": {"labels": {"x": "y"}}},
    "serviceDaemonSet": {
      "updateStrategy": {"rollingUpdate": {"maxUnavailable": "25%"}, "type": "RollingUpdate"},
      "resources": {"cpu": "100m", "memory": "1Gi", "nvidia.com/gpu": 1},
      "annotations": {"example.com/note": "hello world"},
      "labels": {"app": "svc", "example.com/tier": ""}
    },
    "security": {"spiffe": {}, "privileged": true},
    "chartVersion": "v1.2.3-rc.1+b.5",
    "chartName": "my.chart_name-1",
    "repoURL": "https://Charts.Example.com:8443/a/b"
  })";
  EXPECT_EQ(
      validate_helm_chart_data(text).dump(),
      R"({"repoURL":"https://charts.example.com:8443/a/b","chartName":"my.chart_name-1",)"
      R"("chartVersion":"v1.2.3-rc.1+b.5","security":{"privileged":true,"spiffe":{}},)"
      R"("serviceDaemonSet":{"labels":{"app":"svc","example.com/tier":""},)"
      R"("annotations":{"example.com/note":"hello world"},)"
      R"("resources":{"cpu":"100m","memory":"1Gi","nvidia.com/gpu":1},)"
      R"("updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":"25%"}}},)"
      R"("values":{"z":1,"a":{"b":[1,2]},"serviceDaemonSet":{"labels":{"x":"y"}}}})");
}

TEST(HelmChartData, NormalizationIsIdempotent) {
  const auto once = validate_helm_chart_data(
      R"({"security":{"privileged":true},"repoURL":"oci://R.io/x","chartName":"c","chartVersion":"1.0.0",
          "serviceDaemonSet":{"updateStrategy":{"type":"OnDelete"}},"values":{"k":"v"}})");
  EXPECT_EQ(validate_helm_chart_data(once.dump()), once);
}

TEST(HelmChartData, ValuesNullAbsentAndEmpty) {
  EXPECT_FALSE(accept_with([](Json& d) { d["values"] = nullptr; }).contains("values"));
  EXPECT_FALSE(accept_with([](Json&) {}).contains("values"));
  const auto empty = accept_with([](Json& d) { d["values"] = Json::object(); });
  ASSERT_TRUE(empty.contains("values"));
  EXPECT_EQ(empty["values"], Json::object());
}

TEST(HelmChartData, ValuesPassThroughUntouched) {
  const auto out = accept_with([](Json& d) {
    d["values"] = Json::parse(
        R"({"imagePullSecrets":[{"name":"x"}],"n":null,"serviceDaemonSet":{"labels":{"a":"b"},"resources":{}}})");
  });
  EXPECT_EQ(
      out["values"].dump(),
      R"({"imagePullSecrets":[{"name":"x"}],"n":null,"serviceDaemonSet":{"labels":{"a":"b"},"resources":{}}})");
}

// ---------------------------------------------------------------- document level

TEST(HelmChartData, SizeBoundary) {
  Json d = minimal();
  d["values"] = {{"pad", ""}};
  const std::size_t base = d.dump().size();
  d["values"]["pad"] = std::string(kMaxHelmChartDataBytes - base, 'x');
  ASSERT_EQ(d.dump().size(), kMaxHelmChartDataBytes);
  EXPECT_NO_THROW(validate_helm_chart_data(d.dump()));
  d["values"]["pad"] = std::string(kMaxHelmChartDataBytes - base + 1, 'x');
  ASSERT_EQ(d.dump().size(), kMaxHelmChartDataBytes + 1);
  expect_refused(d.dump(), kInvalid, "$");
  // Even when the oversized text is not JSON, size wins.
  expect_refused(std::string(kMaxHelmChartDataBytes + 1, '{'), kInvalid, "$");
}

TEST(HelmChartData, NotJson) {
  expect_refused("", ErrorClass::kNotJson, "$");
  expect_refused("{", ErrorClass::kNotJson, "$");
  expect_refused("{} {}", ErrorClass::kNotJson, "$");
  expect_refused(minimal().dump() + " x", ErrorClass::kNotJson, "$");
  expect_refused(minimal().dump() + "\n{}", ErrorClass::kNotJson, "$");
  expect_refused("{\"repoURL\":\"\xC0\xAF\"}", ErrorClass::kNotJson, "$");
  expect_refused("{\"repoURL\":\"\xED\xA0\x80\"}", ErrorClass::kNotJson, "$");
  expect_refused("{\"repoURL\":\"\xE2\x82\"}", ErrorClass::kNotJson, "$");
  std::string deep_path = "$.values";
  for (int i = 0; i < 63; ++i) deep_path += "[0]";
  expect_refused(R"({"values":)" + std::string(70, '[') + std::string(70, ']') + "}",
                 ErrorClass::kNotJson, deep_path);
}

TEST(HelmChartData, DuplicateKeysAtAnyLevel) {
  expect_refused(R"({"repoURL":"oci://a/b","repoURL":"oci://c/d"})", ErrorClass::kNotJson,
                 "$.repoURL");
  expect_refused(R"({"security":{"privileged":true,"privileged":false}})", ErrorClass::kNotJson,
                 "$.security.privileged");
  expect_refused(R"({"values":{"a":{"b":1,"b":1}}})", ErrorClass::kNotJson, "$.values.a.b");
  expect_refused(R"({"serviceDaemonSet":{"labels":{"app/x":"1","app/x":"2"}}})",
                 ErrorClass::kNotJson, R"($.serviceDaemonSet.labels["app/x"])");
}

TEST(HelmChartData, RootMustBeObject) {
  for (const char* t : {"[]", "null", "1", "\"x\"", "true"}) expect_refused(t, kInvalid, "$");
}

TEST(HelmChartData, UnknownRootFieldsIncludingLegacyCredentials) {
  for (const char* f :
       {"unsupported", "credential", "credentials", "username", "password", "observability",
        "serviceID", "deployInCluster", "security.privileged", "RepoURL"})
    expect_refused_with([f](Json& d) { d[f] = "x"; }, kInvalid,
                        std::string("$") + (std::string(f).find('.') == std::string::npos
                                                ? "." + std::string(f)
                                                : "[\"" + std::string(f) + "\"]"));
}

TEST(HelmChartData, RequiredFields) {
  for (const char* f : {"repoURL", "chartName", "chartVersion", "security"})
    expect_refused_with([f](Json& d) { d.erase(f); }, kInvalid, std::string("$.") + f);
  expect_refused_with([](Json& d) { d["security"].erase("privileged"); }, kInvalid,
                      "$.security.privileged");
}

TEST(HelmChartData, WrongTypes) {
  expect_refused_with([](Json& d) { d["repoURL"] = 1; }, kInvalid, "$.repoURL");
  expect_refused_with([](Json& d) { d["chartName"] = nullptr; }, kInvalid, "$.chartName");
  expect_refused_with([](Json& d) { d["chartVersion"] = 1.2; }, kInvalid, "$.chartVersion");
  expect_refused_with([](Json& d) { d["security"] = true; }, kInvalid, "$.security");
  expect_refused_with([](Json& d) { d["security"]["privileged"] = "true"; }, kInvalid,
                      "$.security.privileged");
  expect_refused_with([](Json& d) { d["serviceDaemonSet"] = Json::array(); }, kInvalid,
                      "$.serviceDaemonSet");
  expect_refused_with([](Json& d) { d["serviceDaemonSet"] = nullptr; }, kInvalid,
                      "$.serviceDaemonSet");
}

// ---------------------------------------------------------------- repoURL

TEST(HelmChartData, RepoUrl) {
  for (const char* u : {"oci://registry.example.com/charts", "https://charts.example.com",
                        "https://10.1.2.3:8443/x", "https://[::1]/x", "oci://nvcr.io/nvidia/doca"})
    EXPECT_NO_THROW(accept_with([u](Json& d) { d["repoURL"] = u; })) << u;
  for (const char* u : {"http://charts.example.com", "HTTPS://charts.example.com", "", "https://",
                        "https://h/x?y", "https://h/x#y", "https://h/ x", "https://h/\n",
                        "https://h:99999", "ftp://h", "https://h_/x"})
    expect_refused_with([u](Json& d) { d["repoURL"] = u; }, kInvalid, "$.repoURL");
  expect_refused_with([](Json& d) { d["repoURL"] = "https://h/" + std::string(2040, 'a'); },
                      kInvalid, "$.repoURL");
}

TEST(HelmChartData, RepoUrlCredentialsAreUnsupportedAndNotEchoed) {
  for (const char* u : {"https://user:hunter2@charts.example.com/x", "oci://hunter2@r.io/x",
                        "https://user:hun?ter2@h/x"}) {
    Json d = minimal();
    d["repoURL"] = u;
    const auto e = refusal(d.dump());
    EXPECT_EQ(e.cls, ErrorClass::kUnsupported);
    EXPECT_EQ(e.path, "$.repoURL");
    EXPECT_EQ(std::string(e.what()), "repoURL must not embed credentials");
    EXPECT_EQ(std::string(e.what()).find("hunter2"), std::string::npos);
    EXPECT_EQ(e.hint.find("hunter2"), std::string::npos);
  }
}

// ---------------------------------------------------------------- chartName / chartVersion

TEST(HelmChartData, ChartName) {
  for (const char* n : {"a", "tenant-service", "my.chart_1", "0chart"})
    EXPECT_NO_THROW(accept_with([n](Json& d) { d["chartName"] = n; })) << n;
  EXPECT_NO_THROW(accept_with([](Json& d) { d["chartName"] = std::string(100, 'c'); }));
  for (const char* n : {"", "Chart", "-chart", "chart-", "_c", "c/d", "c d", "c:1", "ch\xC3\xA9"})
    expect_refused_with([n](Json& d) { d["chartName"] = n; }, kInvalid, "$.chartName");
  expect_refused_with([](Json& d) { d["chartName"] = std::string(101, 'c'); }, kInvalid,
                      "$.chartName");
}

TEST(HelmChartData, ChartVersion) {
  for (const char* v : {"1.2.3", "v1.2.3", "1.2.3-alpha.1+build.5", "0.0.1"})
    EXPECT_NO_THROW(accept_with([v](Json& d) { d["chartVersion"] = v; })) << v;
  for (const char* v : {"01.2.3", "1.2", "^1.2.3", "~1.2.3", ">=1.2.3", "latest", "1.x", "*",
                        "1.2.3 || 2.0.0", "", " 1.2.3"}) {
    Json d = minimal();
    d["chartVersion"] = v;
    const auto e = refusal(d.dump());
    EXPECT_EQ(e.cls, kInvalid) << v;
    EXPECT_EQ(e.path, "$.chartVersion") << v;
    EXPECT_NE(e.hint.find("1.2.3"), std::string::npos) << v;
  }
}

// ---------------------------------------------------------------- security

TEST(HelmChartData, Security) {
  EXPECT_EQ(accept_with([](Json& d) {
              d["security"] = {{"privileged", true}};
            })["security"]
                .dump(),
            R"({"privileged":true})");
  EXPECT_EQ(
      accept_with([](Json& d) { d["security"]["spiffe"] = Json::object(); })["security"].dump(),
      R"({"privileged":false,"spiffe":{}})");
  expect_refused_with(
      [](Json& d) {
        d["security"]["spiffe"] = {{"x", 1}};
      },
      kInvalid, "$.security.spiffe.x");
  expect_refused_with([](Json& d) { d["security"]["spiffe"] = true; }, kInvalid,
                      "$.security.spiffe");
  expect_refused_with([](Json& d) { d["security"]["spiffe"] = nullptr; }, kInvalid,
                      "$.security.spiffe");
  expect_refused_with([](Json& d) { d["security"]["other"] = 1; }, kInvalid, "$.security.other");
}

// ---------------------------------------------------------------- serviceDaemonSet

TEST(HelmChartData, ServiceDaemonSetFields) {
  EXPECT_EQ(
      accept_with([](Json& d) { d["serviceDaemonSet"] = Json::object(); })["serviceDaemonSet"],
      Json::object());
  expect_refused_with(
      [](Json& d) {
        d["serviceDaemonSet"] = {{"upgradeStrategy", {{"type", "OnDelete"}}}};
      },
      kInvalid, "$.serviceDaemonSet.upgradeStrategy");
  expect_refused_with(
      [](Json& d) {
        d["serviceDaemonSet"] = {{"tolerations", Json::array()}};
      },
      kInvalid, "$.serviceDaemonSet.tolerations");
}

TEST(HelmChartData, TypedNodeSelectorIsReserved) {
  Json d = minimal();
  d["serviceDaemonSet"] = {{"nodeSelector", {{"nodeSelectorTerms", Json::array()}}}};
  const auto e = refusal(d.dump());
  EXPECT_EQ(e.cls, kInvalid);
  EXPECT_EQ(e.path, "$.serviceDaemonSet.nodeSelector");
  EXPECT_NE(e.hint.find("placement"), std::string::npos);
  expect_refused_with(
      [](Json& d2) {
        d2["serviceDaemonSet"] = {{"nodeSelector", nullptr}};
      },
      kInvalid, "$.serviceDaemonSet.nodeSelector");
}

TEST(HelmChartData, Labels) {
  auto with_labels = [](Json labels) {
    return [labels](Json& d) { d["serviceDaemonSet"] = {{"labels", labels}}; };
  };
  EXPECT_NO_THROW(
      accept_with(with_labels({{"app", "x"}, {"example.com/a_b", ""}, {"A.b-c", "V.1_x-2"}})));
  EXPECT_NO_THROW(accept_with(with_labels({{"k", std::string(63, 'v')}})));
  EXPECT_NO_THROW(accept_with(with_labels({{"nico.example.com/x", "y"}})));
  expect_refused_with(with_labels({{"bad key", "x"}}), kInvalid,
                      R"($.serviceDaemonSet.labels["bad key"])");
  expect_refused_with(with_labels({{"a/b/c", "x"}}), kInvalid,
                      R"($.serviceDaemonSet.labels["a/b/c"])");
  expect_refused_with(with_labels({{std::string(64, 'k'), "x"}}), kInvalid,
                      "$.serviceDaemonSet.labels." + std::string(64, 'k'));
  expect_refused_with(with_labels({{"k", std::string(64, 'v')}}), kInvalid,
                      "$.serviceDaemonSet.labels.k");
  expect_refused_with(with_labels({{"k", "-v"}}), kInvalid, "$.serviceDaemonSet.labels.k");
  expect_refused_with(with_labels({{"k", "a/b"}}), kInvalid, "$.serviceDaemonSet.labels.k");
  expect_refused_with(with_labels({{"k", 1}}), kInvalid, "$.serviceDaemonSet.labels.k");
  expect_refused_with(with_labels({{"k", nullptr}}), kInvalid, "$.serviceDaemonSet.labels.k");
  expect_refused_with(with_labels(Json::array()), kInvalid, "$.serviceDaemonSet.labels");
  expect_refused_with(with_labels({{"nico/extsvc-abc", "enabled"}}), kInvalid,
                      R"($.serviceDaemonSet.labels["nico/extsvc-abc"])");
  expect_refused_with(with_labels({{"svc.dpu.nvidia.com/service", "x"}}), kInvalid,
                      R"($.serviceDaemonSet.labels["svc.dpu.nvidia.com/service"])");
}

TEST(HelmChartData, Annotations) {
  auto with_annotations = [](Json a) {
    return [a](Json& d) { d["serviceDaemonSet"] = {{"annotations", a}}; };
  };
  EXPECT_NO_THROW(accept_with(with_annotations(
      {{"example.com/long", std::string(100000, 'x')}, {"note", "any text / with: symbols\n"}})));
  expect_refused_with(with_annotations({{"nico/owner", "x"}}), kInvalid,
                      R"($.serviceDaemonSet.annotations["nico/owner"])");
  expect_refused_with(with_annotations({{"svc.dpu.nvidia.com/critical", ""}}), kInvalid,
                      R"($.serviceDaemonSet.annotations["svc.dpu.nvidia.com/critical"])");
  expect_refused_with(with_annotations({{"Bad.Prefix/x", "v"}}), kInvalid,
                      R"($.serviceDaemonSet.annotations["Bad.Prefix/x"])");
  expect_refused_with(with_annotations({{"k", true}}), kInvalid,
                      "$.serviceDaemonSet.annotations.k");
  expect_refused_with(with_annotations("x"), kInvalid, "$.serviceDaemonSet.annotations");
}

TEST(HelmChartData, Resources) {
  auto with_resources = [](Json r) {
    return [r](Json& d) { d["serviceDaemonSet"] = {{"resources", r}}; };
  };
  EXPECT_NO_THROW(accept_with(with_resources({{"cpu", "100m"},
                                              {"memory", "1Gi"},
                                              {"x", "1e3"},
                                              {"y", "0.5"},
                                              {"nvidia.com/gpu", 1},
                                              {"z", 0},
                                              {"w", 2147483647}})));
  expect_refused_with(with_resources({{"cpu", "-1"}}), kInvalid,
                      "$.serviceDaemonSet.resources.cpu");
  expect_refused_with(with_resources({{"memory", "1GiB"}}), kInvalid,
                      "$.serviceDaemonSet.resources.memory");
  expect_refused_with(with_resources({{"cpu", -1}}), kInvalid, "$.serviceDaemonSet.resources.cpu");
  expect_refused_with(with_resources({{"cpu", 2147483648LL}}), kInvalid,
                      "$.serviceDaemonSet.resources.cpu");
  expect_refused_with(with_resources({{"cpu", 0.5}}), kInvalid, "$.serviceDaemonSet.resources.cpu");
  expect_refused_with(with_resources({{"cpu", true}}), kInvalid,
                      "$.serviceDaemonSet.resources.cpu");
  expect_refused_with(with_resources({{"cpu", ""}}), kInvalid, "$.serviceDaemonSet.resources.cpu");
  expect_refused_with(with_resources({{"bad name", "1"}}), kInvalid,
                      R"($.serviceDaemonSet.resources["bad name"])");
}

TEST(HelmChartData, UpdateStrategy) {
  auto with_strategy = [](Json s) {
    return [s](Json& d) { d["serviceDaemonSet"] = {{"updateStrategy", s}}; };
  };
  const std::string rpath = "$.serviceDaemonSet.updateStrategy.rollingUpdate";
  // Accepted combinations.
  for (const char* s :
       {R"({"type":"OnDelete"})", R"({"type":"RollingUpdate"})",
        R"({"type":"RollingUpdate","rollingUpdate":{}})",
        R"({"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":2}})",
        R"({"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":"100%"}})",
        R"({"type":"RollingUpdate","rollingUpdate":{"maxSurge":1,"maxUnavailable":0}})",
        R"({"type":"RollingUpdate","rollingUpdate":{"maxSurge":"10%","maxUnavailable":"0%"}})",
        R"({"type":"RollingUpdate","rollingUpdate":{"maxSurge":0}})"})
    EXPECT_NO_THROW(accept_with(with_strategy(Json::parse(s)))) << s;

  expect_refused_with(with_strategy(Json::object()), kInvalid,
                      "$.serviceDaemonSet.updateStrategy.type");
  expect_refused_with(with_strategy({{"type", "Recreate"}}), kInvalid,
                      "$.serviceDaemonSet.updateStrategy.type");
  expect_refused_with(with_strategy({{"type", "rollingupdate"}}), kInvalid,
                      "$.serviceDaemonSet.updateStrategy.type");
  expect_refused_with(with_strategy({{"type", "OnDelete"}, {"extra", 1}}), kInvalid,
                      "$.serviceDaemonSet.updateStrategy.extra");
  expect_refused_with(with_strategy(Json::parse(R"({"type":"OnDelete","rollingUpdate":{}})")),
                      kInvalid, rpath);
  expect_refused_with(
      with_strategy(Json::parse(R"({"type":"OnDelete","rollingUpdate":{"maxUnavailable":1}})")),
      kInvalid, rpath);
  expect_refused_with(with_strategy(Json::parse(R"({"type":"RollingUpdate","rollingUpdate":[]})")),
                      kInvalid, rpath);
  expect_refused_with(
      with_strategy(Json::parse(R"({"type":"RollingUpdate","rollingUpdate":{"partition":1}})")),
      kInvalid, rpath + ".partition");

  // Both zero, directly or through the maxSurge default of 0.
  for (const char* ru :
       {R"({"maxUnavailable":0})", R"({"maxUnavailable":"0%"})",
        R"({"maxSurge":0,"maxUnavailable":0})", R"({"maxSurge":"0%","maxUnavailable":"0%"})"})
    expect_refused_with(
        with_strategy({{"type", "RollingUpdate"}, {"rollingUpdate", Json::parse(ru)}}), kInvalid,
        rpath);
  // Both non-zero: Kubernetes allows only one; maxUnavailable defaults to 1.
  for (const char* ru : {R"({"maxSurge":1})", R"({"maxSurge":1,"maxUnavailable":1})",
                         R"({"maxSurge":"25%","maxUnavailable":"25%"})"})
    expect_refused_with(
        with_strategy({{"type", "RollingUpdate"}, {"rollingUpdate", Json::parse(ru)}}), kInvalid,
        rpath + ".maxSurge");
  // Malformed values.
  for (const char* v : {R"("101%")", R"("1")", R"("-1%")", R"("%")", R"("1.5%")", R"("05%")",
                        R"(-1)", R"(1.5)", R"(null)", R"(true)", R"(2147483648)", R"(" 1%")"})
    expect_refused_with(with_strategy({{"type", "RollingUpdate"},
                                       {"rollingUpdate", {{"maxUnavailable", Json::parse(v)}}}}),
                        kInvalid, rpath + ".maxUnavailable");
}

TEST(HelmChartData, RollingUpdateNormalizedWithoutDefaults) {
  const auto out = accept_with([](Json& d) {
    d["serviceDaemonSet"] = Json::parse(
        R"({"updateStrategy":{"rollingUpdate":{"maxUnavailable":0,"maxSurge":"10%"},"type":"RollingUpdate"}})");
  });
  EXPECT_EQ(
      out["serviceDaemonSet"].dump(),
      R"({"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"maxSurge":"10%","maxUnavailable":0}}})");
}

// ---------------------------------------------------------------- values

TEST(HelmChartData, ValuesMustBeObjectOrNull) {
  for (const char* v : {"[]", "1", "\"x\"", "true"})
    expect_refused_with([v](Json& d) { d["values"] = Json::parse(v); }, kInvalid, "$.values");
}

TEST(HelmChartData, ValuesReservedServiceDaemonSetPaths) {
  const std::string sds = "$.values.serviceDaemonSet";
  for (const char* v : {"null", "[]", "1", "\"x\"", "false"})
    expect_refused_with(
        [v](Json& d) {
          d["values"] = {{"serviceDaemonSet", Json::parse(v)}};
        },
        kInvalid, sds);
  for (const char* v : {"null", "{}", "{\"nodeSelectorTerms\":[]}", "\"x\"", "[]"})
    expect_refused_with(
        [v](Json& d) {
          d["values"] = {{"serviceDaemonSet", {{"nodeSelector", Json::parse(v)}}}};
        },
        kInvalid, sds + ".nodeSelector");
  // Other values.serviceDaemonSet keys and nodeSelector elsewhere pass through.
  EXPECT_NO_THROW(accept_with([](Json& d) {
    d["values"] = Json::parse(R"({"serviceDaemonSet":{"labels":{"a":"b"}},"nodeSelector":{"x":"y"},
                                 "sub":{"serviceDaemonSet":{"nodeSelector":{}}}})");
  }));
}

TEST(HelmChartData, ValidationErrorCarriesSqlstate) {
  EXPECT_STREQ(sqlstate(ErrorClass::kNotJson), "22P02");
  EXPECT_STREQ(sqlstate(ErrorClass::kInvalidField), "22023");
  EXPECT_STREQ(sqlstate(ErrorClass::kUnsupported), "0A000");
}

// ---------------------------------------------------------------- issue #10

Json values_out(const std::string& values_text) {
  Json d = minimal();
  std::string text = d.dump();
  text.back() = ',';
  text += "\"values\":" + values_text + "}";
  return validate_helm_chart_data(text)["values"];
}

std::string with_values(const std::string& values_text) {
  std::string text = minimal().dump();
  text.back() = ',';
  return text + "\"values\":" + values_text + "}";
}

TEST(HelmChartData, ValuesNumbersKeptExactly) {
  EXPECT_EQ(
      values_out(R"({"a":0.1,"b":18446744073709551615,"c":-9223372036854775808,"d":2.5})").dump(),
      R"({"a":0.1,"b":18446744073709551615,"c":-9223372036854775808,"d":2.5})");
  EXPECT_EQ(values_out(R"({"big":12345678901234567890})").dump(),
            R"({"big":12345678901234567890})");
}

TEST(HelmChartData, ValuesNumbersThatWouldBeRoundedAreRefused) {
  expect_refused(with_values(R"({"n":123456789012345678901234567890})"), kInvalid, "$.values.n");
  expect_refused(with_values(R"({"x":[1e-400]})"), kInvalid, "$.values.x[0]");
  expect_refused(with_values(R"({"x":{"y":1e400}})"), kInvalid, "$.values.x.y");
  const auto e = refusal(with_values("{\"n\":" + std::string(120000, '9') + "}"));
  EXPECT_EQ(e.cls, kInvalid);
  EXPECT_EQ(e.path, "$.values.n");
  EXPECT_LT(std::string(e.what()).size(), 200u);
  EXPECT_EQ(std::string(e.what()).find("9999999999"), std::string::npos);
}

TEST(HelmChartData, NulCharacterRefusedWithPath) {
  expect_refused(with_values(R"({"s":"a\u0000b"})"), kInvalid, "$.values.s");
  expect_refused(with_values(R"({"k\u0000":"v"})"), kInvalid, R"($.values["k\u0000"])");
  expect_refused(R"({"repoURL":"oci://a/b\u0000"})", kInvalid, "$.repoURL");
}

TEST(HelmChartData, LongKeysAreNotEchoedWhole) {
  const std::string key(100000, 'a');
  const auto e = refusal("{\"" + key + "\":1}");
  EXPECT_EQ(e.path, "$[\"" + std::string(64, 'a') + "\"...]");
  EXPECT_LT(std::string(e.what()).size() + e.hint.size(), 1000u);
}

}  // namespace
}  // namespace extsvc::core
