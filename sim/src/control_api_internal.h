// What the control API's route files share: JSON replies, error mapping, body-less POSTs.
#pragma once

#include <httplib.h>

#include <functional>
#include <string>

#include "sim_context.h"

namespace dpfsim {

inline void reply(httplib::Response& res, int code, const json& body) {
  res.status = code;
  res.set_content(body.dump() + "\n", "application/json");
}

inline json parse_or_empty(const httplib::Request& req) {
  if (trim(req.body).empty()) return json::object();
  return json::parse(req.body);
}

template <typename F>
httplib::Server::Handler guarded(F f) {
  return [f](const httplib::Request& req, httplib::Response& res) {
    try {
      f(req, res);
    } catch (const json::exception& e) {
      reply(res, 400, {{"error", std::string("bad JSON: ") + e.what()}});
    } catch (const std::invalid_argument& e) {
      reply(res, 400, {{"error", e.what()}});
    } catch (const ApiError& e) {
      reply(res, 400, {{"error", json::parse(e.body)}});
    } catch (const std::exception& e) {
      reply(res, 500, {{"error", e.what()}});
    }
  };
}

// Registers a POST route (also served without a body: curl -XPOST without -d).
using PostRoute = std::function<void(const std::string& path, httplib::Server::Handler h)>;

// The failure-mode knobs (control_knobs.cpp): pod faults, chart faults and properties, the
// DPUSet, Nodes that stop reporting, DPF's operator config and release profile.
void add_knob_routes(SimContext& ctx, httplib::Server& s, const PostRoute& post);

}  // namespace dpfsim
