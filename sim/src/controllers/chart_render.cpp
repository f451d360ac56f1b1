// DPF's reference chart as the simulated repo server renders it (Helm naming, DPF's injected
// values, the chart contract's labels/annotations/nodeSelector), and the ways a chart may break
// that contract (ChartProps, POST /charts).
#include <cmath>
#include <cstring>
#include <regex>
#include <stdexcept>

#include "controller_manager.h"
#include "resources.h"
#include "seeding.h"

namespace dpfsim {

namespace {
std::string trunc63(std::string s) {
  if (s.size() > 63) s.resize(63);
  while (!s.empty() && s.back() == '-') s.pop_back();
  return s;
}

// Deep merge: b over a (b wins), as Helm merges values maps.
json deep_merge(json a, const json& b) {
  if (!a.is_object() || !b.is_object()) return b;
  for (auto& [k, v] : b.items()) a[k] = a.contains(k) ? deep_merge(a[k], v) : v;
  return a;
}

}  // namespace

ChartNames chart_names(const std::string& release, const std::string& chart, const json& values) {
  ChartNames n;
  std::string name = chart;
  if (const json* o = jptr(values, {"nameOverride"});
      o && o->is_string() && !o->get<std::string>().empty())
    name = o->get<std::string>();
  n.name = trunc63(name);
  if (const json* f = jptr(values, {"fullnameOverride"});
      f && f->is_string() && !f->get<std::string>().empty())
    n.fullname = trunc63(f->get<std::string>());
  else if (release.find(name) != std::string::npos)
    n.fullname = trunc63(release);
  else
    n.fullname = trunc63(release + "-" + name);
  return n;
}

std::string helm_chart_label(const std::string& chart, const std::string& version) {
  std::string v = chart + "-" + version;
  std::replace(v.begin(), v.end(), '+', '_');
  return trunc63(v);
}

json dpf_values(const json& svc, const std::string& service_id, bool inject) {
  const json* sds_p = jptr(svc, {"spec", "serviceDaemonSet"});
  json sds = sds_p && sds_p->is_object() ? *sds_p : json::object();
  if (!sds.contains("labels") || !sds["labels"].is_object()) sds["labels"] = json::object();
  if (inject) sds["labels"][names::kServiceIdLabel] = service_id;
  const json* values_p = jptr(svc, {"spec", "helmChart", "values"});
  json values = values_p && values_p->is_object() ? *values_p : json::object();
  return deep_merge(values, json{{"serviceDaemonSet", sds}});
}

std::string argo_repo_url(const std::string& repo) {
  return starts_with(repo, "oci://") ? repo.substr(6) : repo;
}

ChartProps ChartProps::parse(const json& j) {
  if (!j.is_object()) throw std::invalid_argument("chart properties must be a JSON object");
  ChartProps p;
  for (auto& [k, v] : j.items()) {
    bool* flag = k == "needs_privileged"        ? &p.needs_privileged
                 : k == "ignores_labels"        ? &p.ignores_labels
                 : k == "ignores_annotations"   ? &p.ignores_annotations
                 : k == "ignores_node_selector" ? &p.ignores_node_selector
                                                : nullptr;
    if (flag != nullptr) {
      if (!v.is_boolean()) throw std::invalid_argument(k + " must be a boolean");
      *flag = v.get<bool>();
    } else if (k == "namespace") {
      if (!v.is_string()) throw std::invalid_argument("namespace must be a string");
      p.ns = v.get<std::string>();
    } else if (k == "requests") {
      if (!v.is_object()) throw std::invalid_argument("requests must be an object");
      for (auto& [r, q] : v.items()) {
        if (q.is_number_integer())
          p.requests[r] = std::to_string(q.get<long long>());
        else if (q.is_string() && !q.get<std::string>().empty())
          p.requests[r] = q;
        else
          throw std::invalid_argument("requests." + r + " must be a quantity");
      }
    } else {
      throw std::invalid_argument("unknown chart property " + k);
    }
  }
  return p;
}

json ChartProps::to_json() const {
  json j{{"needs_privileged", needs_privileged},
         {"ignores_labels", ignores_labels},
         {"ignores_annotations", ignores_annotations},
         {"ignores_node_selector", ignores_node_selector},
         {"requests", requests}};
  if (!ns.empty()) j["namespace"] = ns;
  return j;
}

ChartProps chart_props(SimContext& ctx, const std::string& chart) {
  std::lock_guard<std::mutex> l(ctx.knobs.mu);
  auto it = ctx.knobs.charts.find(chart);
  return it == ctx.knobs.charts.end() ? ChartProps{} : ChartProps::parse(it->second);
}

json render_chart_daemonset(const json& app, const ChartProps& props) {
  const json& src = app["spec"]["source"];
  std::string app_name = jstr(app, {"metadata", "name"});
  std::string ns = props.ns.empty() ? jstr(app, {"spec", "destination", "namespace"}) : props.ns;
  std::string chart = jstr(src, {"chart"});
  if (chart.empty()) {
    auto parts = split(jstr(src, {"path"}), '/');
    while (!parts.empty() && parts.back().empty()) parts.pop_back();
    chart = parts.empty() ? app_name : parts.back();
  }
  std::string version = jstr(src, {"targetRevision"});
  std::string release = jstr(src, {"helm", "releaseName"});
  if (release.empty()) release = app_name;  // Argo CD: release name defaults to the app name
  const json* vp = jptr(src, {"helm", "valuesObject"});
  json values = vp && vp->is_object() ? *vp : json::object();
  json sds = values.contains("serviceDaemonSet") && values["serviceDaemonSet"].is_object()
                 ? values["serviceDaemonSet"]
                 : json::object();
  ChartNames n = chart_names(release, chart, values);
  std::string repo = jstr(src, {"repoURL"});
  while (!repo.empty() && repo.back() == '/') repo.pop_back();

  json selector{{"app.kubernetes.io/name", n.name}, {"app.kubernetes.io/instance", release}};
  json chart_labels = selector;
  chart_labels["helm.sh/chart"] = helm_chart_label(chart, version);
  chart_labels["app.kubernetes.io/managed-by"] = "Helm";
  const json sds_labels = props.ignores_labels ? json::object() : string_map(jptr(sds, {"labels"}));
  const json sds_annotations =
      props.ignores_annotations ? json::object() : string_map(jptr(sds, {"annotations"}));

  json pod_labels = selector;
  for (auto& [k, v] : sds_labels.items()) pod_labels[k] = v;
  json container{{"name", n.name},
                 {"image", repo + "/" + chart + ":" + version},
                 {"imagePullPolicy", "IfNotPresent"},
                 {"terminationMessagePath", "/dev/termination-log"},
                 {"terminationMessagePolicy", "File"}};
  json resources = json::object();
  if (const json* res = jptr(sds, {"resources"}); res && res->is_object()) resources = *res;
  for (auto& [r, q] : props.requests.items()) resources[r] = q;
  if (!resources.empty())
    container["resources"] = {{"limits", resources}, {"requests", resources}};
  else
    container["resources"] = json::object();
  if (props.needs_privileged) container["securityContext"] = {{"privileged", true}};
  json pod_spec{{"containers", json::array({container})}, {"restartPolicy", "Always"},
                {"terminationGracePeriodSeconds", 30},    {"dnsPolicy", "ClusterFirst"},
                {"schedulerName", "default-scheduler"},   {"securityContext", json::object()}};
  if (const json* nsel = jptr(sds, {"nodeSelector"});
      nsel && nsel->is_object() && !props.ignores_node_selector) {
    const json* terms = jptr(*nsel, {"nodeSelectorTerms"});
    if (terms && terms->is_array() && !terms->empty())
      pod_spec["affinity"] = {
          {"nodeAffinity", {{"requiredDuringSchedulingIgnoredDuringExecution", *nsel}}}};
  }
  json tmpl{{"metadata", {{"labels", pod_labels}}}, {"spec", pod_spec}};
  // The reference chart always renders the annotations map; a checksum of the values stands in
  // for config checksums charts commonly add.
  json pod_annotations = sds_annotations;
  if (!pod_annotations.empty()) tmpl["metadata"]["annotations"] = pod_annotations;

  json ds_labels = chart_labels;
  for (auto& [k, v] : sds_labels.items()) ds_labels[k] = v;
  json ds_annotations = sds_annotations;
  ds_annotations[names::kArgoTrackingId] = app_name + ":apps/DaemonSet:" + ns + "/" + n.fullname;

  // apps/v1 defaulting of the update strategy.
  json strategy = json::object();
  if (const json* us = jptr(sds, {"updateStrategy"}); us && us->is_object()) strategy = *us;
  if (!strategy.contains("type") || strategy["type"].is_null()) strategy["type"] = "RollingUpdate";
  if (strategy["type"] == "RollingUpdate") {
    if (!strategy.contains("rollingUpdate") || !strategy["rollingUpdate"].is_object())
      strategy["rollingUpdate"] = json::object();
    json& ru = strategy["rollingUpdate"];
    if (!ru.contains("maxUnavailable") || ru["maxUnavailable"].is_null()) ru["maxUnavailable"] = 1;
    if (!ru.contains("maxSurge") || ru["maxSurge"].is_null()) ru["maxSurge"] = 0;
  }

  return json{{"apiVersion", "apps/v1"},
              {"kind", "DaemonSet"},
              {"metadata",
               {{"name", n.fullname},
                {"namespace", ns},
                {"labels", ds_labels},
                {"annotations", ds_annotations}}},
              {"spec",
               {{"selector", {{"matchLabels", selector}}},
                {"template", tmpl},
                {"updateStrategy", strategy},
                {"revisionHistoryLimit", 10}}}};
}

}  // namespace dpfsim
