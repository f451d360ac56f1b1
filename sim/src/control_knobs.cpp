// The control API's failure-mode knobs: pod faults, chart faults, chart properties (charts that
// break DPF's chart contract), the one DPUSet, Nodes that stop reporting, DPF's operator config
// (privileged-pod enforcement) and the DPF release profile.
#include <chrono>

#include "control_api_internal.h"
#include "controllers/controller_manager.h"
#include "profile.h"

namespace dpfsim {

void add_knob_routes(SimContext& ctx, httplib::Server& s, const PostRoute& post) {
  // ---- Failure-mode knobs: pod faults, chart faults, chart properties ----
  auto knobs_json = [&ctx]() {
    std::lock_guard<std::mutex> l(ctx.knobs.mu);
    json pf = json::object(), cf = json::object(), ch = json::object();
    for (const auto& [k, v] : ctx.knobs.pod_faults) pf[k] = v;
    for (const auto& [k, v] : ctx.knobs.chart_faults) cf[k] = v;
    for (const auto& [k, v] : ctx.knobs.charts) ch[k] = v;
    return json{{"pod_faults", pf}, {"chart_faults", cf}, {"charts", ch}};
  };
  s.Get("/pod-faults", guarded([knobs_json](const httplib::Request&, httplib::Response& res) {
          reply(res, 200, knobs_json()["pod_faults"]);
        }));
  post("/pod-faults",
       guarded([&ctx, knobs_json](const httplib::Request& req, httplib::Response& res) {
         json b = parse_or_empty(req);
         json items = b.is_array() ? b : json::array({b});
         for (const auto& it : items) {
           if (!it.is_object() || !it.contains("node") || !it["node"].is_string() ||
               it["node"].get<std::string>().empty())
             throw std::invalid_argument("node (string) is required");
           std::string reason = it.value("reason", "CrashLoopBackOff");
           if (reason.empty()) throw std::invalid_argument("reason must not be empty");
           std::lock_guard<std::mutex> l(ctx.knobs.mu);
           ctx.knobs.pod_faults[it["node"].get<std::string>()] = reason;
         }
         ++ctx.knobs.seq;
         ctx.poke_controllers();
         reply(res, 200, knobs_json()["pod_faults"]);
       }));
  s.Delete("/pod-faults",
           guarded([&ctx, knobs_json](const httplib::Request& req, httplib::Response& res) {
             std::string node = req.get_param_value("node");
             {
               std::lock_guard<std::mutex> l(ctx.knobs.mu);
               if (node.empty())
                 ctx.knobs.pod_faults.clear();
               else
                 ctx.knobs.pod_faults.erase(node);
             }
             ++ctx.knobs.seq;
             ctx.poke_controllers();
             reply(res, 200, knobs_json()["pod_faults"]);
           }));
  s.Get("/chart-faults", guarded([knobs_json](const httplib::Request&, httplib::Response& res) {
          reply(res, 200, knobs_json()["chart_faults"]);
        }));
  post("/chart-faults",
       guarded([&ctx, knobs_json](const httplib::Request& req, httplib::Response& res) {
         json b = parse_or_empty(req);
         if (!b.contains("chart") || !b["chart"].is_string())
           throw std::invalid_argument("chart (string) is required");
         std::string kind = b.value("kind", "pull");
         if (kind != "pull" && kind != "sync")
           throw std::invalid_argument("kind must be \"pull\" or \"sync\"");
         {
           std::lock_guard<std::mutex> l(ctx.knobs.mu);
           ctx.knobs.chart_faults[b["chart"].get<std::string>()] = {
               {"kind", kind}, {"message", b.value("message", "")}};
         }
         ++ctx.knobs.seq;
         ctx.poke_controllers();
         reply(res, 200, knobs_json()["chart_faults"]);
       }));
  s.Delete("/chart-faults",
           guarded([&ctx, knobs_json](const httplib::Request& req, httplib::Response& res) {
             std::string chart = req.get_param_value("chart");
             {
               std::lock_guard<std::mutex> l(ctx.knobs.mu);
               if (chart.empty())
                 ctx.knobs.chart_faults.clear();
               else
                 ctx.knobs.chart_faults.erase(chart);
             }
             ++ctx.knobs.seq;
             ctx.poke_controllers();
             reply(res, 200, knobs_json()["chart_faults"]);
           }));
  s.Get("/charts", guarded([knobs_json](const httplib::Request&, httplib::Response& res) {
          reply(res, 200, knobs_json()["charts"]);
        }));
  post("/charts", guarded([&ctx, knobs_json](const httplib::Request& req, httplib::Response& res) {
         json b = parse_or_empty(req);
         if (!b.contains("chart") || !b["chart"].is_string())
           throw std::invalid_argument("chart (string) is required");
         json props = b;
         props.erase("chart");
         json stored = ChartProps::parse(props).to_json();  // throws on a bad property
         {
           std::lock_guard<std::mutex> l(ctx.knobs.mu);
           ctx.knobs.charts[b["chart"].get<std::string>()] = stored;
         }
         ++ctx.knobs.seq;
         ctx.poke_controllers();
         reply(res, 200, knobs_json()["charts"]);
       }));
  s.Delete("/charts", guarded([&ctx, knobs_json](const httplib::Request&, httplib::Response& res) {
             ctx.knobs.clear_charts();
             ctx.poke_controllers();
             reply(res, 200, knobs_json()["charts"]);
           }));
  // The one simulated DPUSet's template: its cluster.nodeLabels are merged with every
  // DPUDevice's (a differing value is ClusterMetadataConflict) and applyOnLabelChange puts a DPU
  // through "Node Effect" on a label change.
  s.Get("/dpuset", guarded([&ctx](const httplib::Request&, httplib::Response& res) {
          std::lock_guard<std::mutex> l(ctx.knobs.mu);
          json ready = ctx.knobs.dpuset_status.empty()
                           ? json{{"type", "Ready"}, {"status", "True"}, {"reason", "Success"}}
                           : ctx.knobs.dpuset_status;
          reply(res, 200, {{"dpuTemplate", ctx.knobs.dpuset}, {"conditions", {ready}}});
        }));
  post("/dpuset", guarded([&ctx](const httplib::Request& req, httplib::Response& res) {
         json b = parse_or_empty(req);
         if (!b.is_object()) throw std::invalid_argument("a JSON object is required");
         json next = Knobs::default_dpuset();
         for (auto& [k, v] : b.items()) {
           if (k == "nodeLabels") {
             if (!v.is_object()) throw std::invalid_argument("nodeLabels must be an object");
             for (auto& [lk, lv] : v.items())
               if (!lv.is_string())
                 throw std::invalid_argument("nodeLabels." + lk + " must be a string");
             next["nodeLabels"] = v;
           } else if (k == "applyOnLabelChange") {
             if (!v.is_boolean())
               throw std::invalid_argument("applyOnLabelChange must be a boolean");
             next["applyOnLabelChange"] = v;
           } else {
             throw std::invalid_argument("unknown field " + k);
           }
         }
         {
           std::lock_guard<std::mutex> l(ctx.knobs.mu);
           ctx.knobs.dpuset = next;
         }
         ++ctx.knobs.seq;
         ctx.poke_controllers();
         reply(res, 200, {{"dpuTemplate", next}});
       }));
  // A Node's kubelet stops (or resumes) posting status: after node_grace_ms the Node is
  // Ready=Unknown and its pods not Ready; its pods' deletions hang until it reports again.
  auto reporting = [&ctx](const std::string& node, bool on) {
    {
      std::lock_guard<std::mutex> l(ctx.knobs.mu);
      if (on)
        ctx.knobs.silent_nodes.erase(node);
      else
        ctx.knobs.silent_nodes.emplace(node,
                                       std::chrono::duration_cast<std::chrono::milliseconds>(
                                           std::chrono::system_clock::now().time_since_epoch())
                                           .count());
    }
    ++ctx.knobs.seq;
    ctx.poke_controllers();
  };
  for (bool on : {false, true})
    post(on ? R"(/nodes/([^/]+)/ready)" : R"(/nodes/([^/]+)/not-ready)",
         guarded([reporting, on](const httplib::Request& req, httplib::Response& res) {
           // /nodes/<name>/...: the name is the second path segment
           const std::string node = split(req.path, '/').at(2);
           reporting(node, on);
           reply(res, 200, {{"ok", true}, {"node", node}, {"reporting", on}});
         }));
  s.Get("/nodes-not-reporting", guarded([&ctx](const httplib::Request&, httplib::Response& res) {
          std::lock_guard<std::mutex> l(ctx.knobs.mu);
          json out = json::object();
          for (const auto& [n, t] : ctx.knobs.silent_nodes) out[n] = t;
          reply(res, 200, out);
        }));
  // DPF's operator config, as far as the simulated controllers read it:
  // spec.security.privilegedPodEnforcement (true: the privileged-pod VAP denies, false: Audit).
  auto dpf_config = [&ctx]() {
    std::lock_guard<std::mutex> l(ctx.knobs.mu);
    return json{{"privileged_pod_enforcement", ctx.knobs.privileged_pod_enforcement}};
  };
  s.Get("/dpf-config", guarded([dpf_config](const httplib::Request&, httplib::Response& res) {
          reply(res, 200, dpf_config());
        }));
  post("/dpf-config",
       guarded([&ctx, dpf_config](const httplib::Request& req, httplib::Response& res) {
         json b = parse_or_empty(req);
         if (!b.is_object()) throw std::invalid_argument("a JSON object is required");
         for (auto& [k, v] : b.items()) {
           if (k != "privileged_pod_enforcement") throw std::invalid_argument("unknown field " + k);
           if (!v.is_boolean())
             throw std::invalid_argument("privileged_pod_enforcement must be a boolean");
         }
         if (b.contains("privileged_pod_enforcement")) {
           std::lock_guard<std::mutex> l(ctx.knobs.mu);
           ctx.knobs.privileged_pod_enforcement = b["privileged_pod_enforcement"].get<bool>();
         }
         ++ctx.knobs.seq;
         ctx.poke_controllers();
         reply(res, 200, dpf_config());
       }));
  // An API server whose clock is off by offset_ms (both clusters): the Date header of every API
  // response shows this host's time plus the offset. POST /reset restores 0.
  s.Get("/clock", guarded([&ctx](const httplib::Request&, httplib::Response& res) {
          reply(res, 200, {{"offset_ms", ctx.clock_offset_ms.load()}});
        }));
  post("/clock", guarded([&ctx](const httplib::Request& req, httplib::Response& res) {
         json b = parse_or_empty(req);
         if (!b.contains("offset_ms") || !b["offset_ms"].is_number_integer())
           throw std::invalid_argument("offset_ms (integer) is required");
         const auto ms = b["offset_ms"].get<int64_t>();
         // ten years either way: beyond that the Date header's year leaves four digits' sense
         if (ms < -315360000000LL || ms > 315360000000LL)
           throw std::invalid_argument("offset_ms must be within +-315360000000 (ten years)");
         ctx.clock_offset_ms = ms;
         reply(res, 200, {{"offset_ms", ctx.clock_offset_ms.load()}});
       }));
  s.Get("/profile", guarded([](const httplib::Request&, httplib::Response& res) {
          reply(res, 200, {{"dpf_version", profile().name}, {"profiles", profile_names()}});
        }));
  // DPF upgraded (or downgraded) in place: the served CRDs change, stored objects stay as they
  // are. POST /reset restores the --dpf-version profile.
  post("/profile", guarded([&ctx](const httplib::Request& req, httplib::Response& res) {
         json b = parse_or_empty(req);
         if (!b.contains("dpf_version") || !b["dpf_version"].is_string())
           throw std::invalid_argument("dpf_version (string) is required");
         set_profile(b["dpf_version"].get<std::string>());
         ++ctx.knobs.seq;
         ctx.poke_controllers();
         reply(res, 200, {{"dpf_version", profile().name}, {"profiles", profile_names()}});
       }));
}

}  // namespace dpfsim
