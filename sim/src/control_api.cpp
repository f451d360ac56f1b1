#include "control_api.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <map>
#include <memory>
#include <regex>
#include <utility>
#include <vector>

#include "control_api_internal.h"
#include "controllers/controller_manager.h"
#include "profile.h"
#include "seeding.h"

namespace dpfsim {

ControlApi::ControlApi(SimContext& ctx) : ctx_(ctx), srv_(std::make_unique<httplib::Server>()) {
  auto& s = *srv_;
  // curl -XPOST without -d sends no Content-Length, which httplib rejects before routing; serve
  // such body-less POSTs from a pre-routing handler instead.
  auto bodiless = std::make_shared<std::map<std::string, httplib::Server::Handler>>();
  // Paths with a regex group are matched whole (their handlers read the path themselves).
  auto bodiless_re =
      std::make_shared<std::vector<std::pair<std::regex, httplib::Server::Handler>>>();
  auto post = [&s, bodiless, bodiless_re](const std::string& path, httplib::Server::Handler h) {
    s.Post(path, h);
    if (path.find('(') != std::string::npos)
      bodiless_re->emplace_back(std::regex(path), h);
    else
      (*bodiless)[path] = h;
  };
  s.set_pre_routing_handler(
      [bodiless, bodiless_re](const httplib::Request& req, httplib::Response& res) {
        if (req.method != "POST" || req.has_header("Content-Length") ||
            req.has_header("Transfer-Encoding"))
          return httplib::Server::HandlerResponse::Unhandled;
        auto it = bodiless->find(req.path);
        if (it != bodiless->end()) {
          it->second(req, res);
          return httplib::Server::HandlerResponse::Handled;
        }
        for (const auto& [re, h] : *bodiless_re)
          if (std::regex_match(req.path, re)) {
            h(req, res);
            return httplib::Server::HandlerResponse::Handled;
          }
        return httplib::Server::HandlerResponse::Unhandled;
      });
  s.new_task_queue = [] { return new httplib::ThreadPool(8); };
  s.set_keep_alive_max_count(100000);

  s.Get("/", guarded([](const httplib::Request&, httplib::Response& res) {
          reply(res, 200,
                {{"endpoints",
                  {"GET /healthz",
                   "POST /reset {\"dpus\":N}",
                   "POST /seed {\"dpus\":N,\"objects\":[...]}",
                   "GET|POST /delays",
                   "GET|POST|DELETE /faults",
                   "DELETE /faults/<id>",
                   "GET|POST /dpu-cluster",
                   "GET /counts",
                   "POST /counts/reset",
                   "GET /state",
                   "GET /requests?limit=N",
                   "DELETE /requests",
                   "POST /shutdown",
                   "GET|POST|DELETE /pod-faults",
                   "GET|POST|DELETE /chart-faults",
                   "GET|POST|DELETE /charts",
                   "GET|POST /profile",
                   "GET|POST /clock {\"offset_ms\":N}",
                   "GET|POST /dpf-config",
                   "GET|POST /dpuset",
                   "POST /nodes/<name>/not-ready",
                   "POST /nodes/<name>/ready",
                   "GET /nodes-not-reporting",
                   "GET|POST|DELETE /kill-points",
                   "DELETE /kill-points/<id>",
                   "GET|POST /watch-config",
                   "POST /watch-cut",
                   "GET /watches",
                   "GET /controllers",
                   "POST /controllers/resync"}}});
        }));
  s.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok", "text/plain");
  });

  post("/reset", guarded([this](const httplib::Request& req, httplib::Response& res) {
         json b = parse_or_empty(req);
         int dpus = -1;
         if (b.contains("dpus")) {
           if (!b["dpus"].is_number_integer() || b["dpus"].get<int>() < 0)
             throw std::invalid_argument("dpus must be a non-negative integer");
           dpus = b["dpus"].get<int>();
         }
         ctx_.reset(dpus);
         reply(res, 200, {{"ok", true}, {"dpus", dpus < 0 ? ctx_.initial_dpus : dpus}});
       }));

  post("/seed", guarded([this](const httplib::Request& req, httplib::Response& res) {
         json b = parse_or_empty(req);
         {
           std::lock_guard<std::mutex> l(ctx_.store.mutex());
           seed_from_json_l(ctx_.store, b);
         }
         reply(res, 200, {{"ok", true}});
       }));

  s.Get("/delays", guarded([this](const httplib::Request&, httplib::Response& res) {
          reply(res, 200, ctx_.delays.to_json());
        }));
  post("/delays", guarded([this](const httplib::Request& req, httplib::Response& res) {
         ctx_.delays.apply(parse_or_empty(req));
         ctx_.poke_controllers();
         reply(res, 200, ctx_.delays.to_json());
       }));

  // Watch window and timing knobs (event_log.h), open watch streams, cutting them.
  s.Get("/watch-config", guarded([this](const httplib::Request&, httplib::Response& res) {
          reply(res, 200, ctx_.store.watch_config().to_json());
        }));
  post("/watch-config", guarded([this](const httplib::Request& req, httplib::Response& res) {
         ctx_.store.watch_config().apply(parse_or_empty(req));
         reply(res, 200, ctx_.store.watch_config().to_json());
       }));
  s.Get("/watches", guarded([this](const httplib::Request&, httplib::Response& res) {
          reply(res, 200, ctx_.watches.stats(ctx_.store));
        }));
  post("/watch-cut", guarded([this](const httplib::Request& req, httplib::Response& res) {
         json b = parse_or_empty(req);
         std::optional<ClusterId> cluster;
         std::string c = b.value("cluster", "*");
         if (c == "management")
           cluster = ClusterId::Management;
         else if (c == "dpu")
           cluster = ClusterId::Dpu;
         else if (c != "*")
           throw std::invalid_argument("cluster must be \"management\", \"dpu\" or \"*\"");
         std::string mode = b.value("mode", "drop");
         if (mode != "drop" && mode != "end")
           throw std::invalid_argument("mode must be \"drop\" or \"end\"");
         size_t n = ctx_.watches.cut(
             cluster, mode == "drop" ? WatchStream::kDrop : WatchStream::kEnd, ctx_.store);
         reply(res, 200, {{"cut", n}});
       }));

  // Controller statistics (longest store-mutex hold of a controller step, work per controller)
  // and the full pass on demand.
  s.Get("/controllers", guarded([this](const httplib::Request&, httplib::Response& res) {
          if (!ctx_.controllers) throw std::invalid_argument("controllers are not running");
          json j = ctx_.controllers->stats();
          j["idle"] = ctx_.controllers->idle();
          reply(res, 200, j);
        }));
  post("/controllers/resync", guarded([this](const httplib::Request&, httplib::Response& res) {
         if (!ctx_.controllers) throw std::invalid_argument("controllers are not running");
         ctx_.controllers->resync_all();
         reply(res, 200, {{"ok", true}});
       }));
  post("/controllers/stats/reset", guarded([this](const httplib::Request&, httplib::Response& res) {
         if (!ctx_.controllers) throw std::invalid_argument("controllers are not running");
         ctx_.controllers->reset_stats();
         reply(res, 200, {{"ok", true}});
       }));

  s.Get("/faults", guarded([this](const httplib::Request&, httplib::Response& res) {
          reply(res, 200, {{"faults", ctx_.faults.list()}});
        }));
  post("/faults", guarded([this](const httplib::Request& req, httplib::Response& res) {
         json b = parse_or_empty(req);
         json ids = json::array();
         if (b.is_array()) {
           for (const auto& r : b) ids.push_back(ctx_.faults.add(r));
         } else {
           ids.push_back(ctx_.faults.add(b));
         }
         reply(res, 200, {{"ok", true}, {"id", ids.size() == 1 ? ids[0] : ids}});
       }));
  s.Delete("/faults", guarded([this](const httplib::Request&, httplib::Response& res) {
             ctx_.faults.clear();
             reply(res, 200, {{"ok", true}});
           }));
  s.Delete(R"(/faults/(\d+))", guarded([this](const httplib::Request& req, httplib::Response& res) {
             bool ok = ctx_.faults.remove(std::stoi(req.matches[1]));
             reply(res, ok ? 200 : 404, {{"ok", ok}});
           }));

  // Kill points: SIGKILL the given pids on the nth matching request (kill_points.h).
  s.Get("/kill-points", guarded([this](const httplib::Request&, httplib::Response& res) {
          reply(res, 200, {{"kill_points", ctx_.kill_points.list()}});
        }));
  post("/kill-points", guarded([this](const httplib::Request& req, httplib::Response& res) {
         json b = parse_or_empty(req);
         json ids = json::array();
         if (b.is_array()) {
           for (const auto& k : b) ids.push_back(ctx_.kill_points.add(k));
         } else {
           ids.push_back(ctx_.kill_points.add(b));
         }
         reply(res, 200, {{"ok", true}, {"id", ids.size() == 1 ? ids[0] : ids}});
       }));
  s.Delete("/kill-points", guarded([this](const httplib::Request&, httplib::Response& res) {
             ctx_.kill_points.clear();
             reply(res, 200, {{"ok", true}});
           }));
  s.Delete(R"(/kill-points/(\d+))",
           guarded([this](const httplib::Request& req, httplib::Response& res) {
             bool ok = ctx_.kill_points.remove(std::stoi(req.matches[1]));
             reply(res, ok ? 200 : 404, {{"ok", ok}});
           }));

  s.Get("/dpu-cluster", guarded([this](const httplib::Request&, httplib::Response& res) {
          reply(res, 200,
                {{"reachable", ctx_.dpu_reachable.load()},
                 {"mode", ctx_.dpu_unreachable_mode.load() == 1 ? "503" : "reset"}});
        }));
  post("/dpu-cluster", guarded([this](const httplib::Request& req, httplib::Response& res) {
         json b = parse_or_empty(req);
         if (b.contains("mode")) {
           std::string m = b["mode"].is_string() ? b["mode"].get<std::string>() : b["mode"].dump();
           if (m == "reset")
             ctx_.dpu_unreachable_mode = 0;
           else if (m == "503")
             ctx_.dpu_unreachable_mode = 1;
           else
             throw std::invalid_argument("mode must be \"reset\" or \"503\"");
         }
         if (b.contains("reachable")) {
           if (!b["reachable"].is_boolean())
             throw std::invalid_argument("reachable must be a boolean");
           ctx_.dpu_reachable = b["reachable"].get<bool>();
           // A partition breaks the open watch streams of the DPU cluster at once.
           if (!ctx_.dpu_reachable.load())
             ctx_.watches.cut(ClusterId::Dpu, WatchStream::kDrop, ctx_.store, true);
           ctx_.poke_controllers();
         }
         reply(res, 200,
               {{"reachable", ctx_.dpu_reachable.load()},
                {"mode", ctx_.dpu_unreachable_mode.load() == 1 ? "503" : "reset"}});
       }));

  add_knob_routes(ctx_, s, post);

  s.Get("/counts", guarded([this](const httplib::Request&, httplib::Response& res) {
          reply(res, 200, ctx_.reqlog.counts());
        }));
  post("/counts/reset", guarded([this](const httplib::Request&, httplib::Response& res) {
         ctx_.reqlog.reset_counts();
         ctx_.watches.reset_counters();
         reply(res, 200, {{"ok", true}});
       }));

  s.Get("/state", guarded([this](const httplib::Request&, httplib::Response& res) {
          json dump;
          {
            std::lock_guard<std::mutex> l(ctx_.store.mutex());
            dump = ctx_.store.dump_l();
          }
          reply(res, 200, dump);
        }));

  s.Get("/requests", guarded([this](const httplib::Request& req, httplib::Response& res) {
          std::string lim = req.get_param_value("limit");
          size_t n = lim.empty() ? 100 : static_cast<size_t>(std::stoul(lim));
          reply(res, 200, {{"requests", ctx_.reqlog.recent(n)}});
        }));
  s.Delete("/requests", guarded([this](const httplib::Request&, httplib::Response& res) {
             ctx_.reqlog.clear_recent();
             reply(res, 200, {{"ok", true}});
           }));

  post("/shutdown", guarded([this](const httplib::Request&, httplib::Response& res) {
         reply(res, 200, {{"ok", true}});
         if (ctx_.request_shutdown) ctx_.request_shutdown();
       }));
}

ControlApi::~ControlApi() {
  stop();
}

int ControlApi::bind(const std::string& host, int port) {
  int p = port == 0 ? srv_->bind_to_any_port(host) : (srv_->bind_to_port(host, port) ? port : -1);
  if (p < 0) return -1;
  std::string h = host;
  if (h == "0.0.0.0" || h == "::" || h.empty()) h = "127.0.0.1";
  url_ =
      "http://" + (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + std::to_string(p);
  return p;
}

void ControlApi::start() {
  thread_ = std::thread([this] { srv_->listen_after_bind(); });
}

void ControlApi::stop() {
  if (srv_) srv_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace dpfsim
