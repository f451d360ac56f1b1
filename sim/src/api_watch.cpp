// Watch: the initial list when no resourceVersion is given, then the store's events, filtered
// as the list is, until the timeout, a partition or the client going away.
#include <httplib.h>
#include <poll.h>

#include "api_server_internal.h"
#include "kube_errors.h"

namespace dpfsim {

namespace {

using api_detail::find_socket_fd;
using api_detail::list_options;

}  // namespace

void KubeApiServer::serve_watch(const httplib::Request& req, httplib::Response& res,
                                const Target& t) {
  struct WatchState {
    uint64_t after = 0;
    std::vector<ObjPtr> initial;
    bool expired = false;
    SteadyClock::time_point deadline;
  };
  auto state = std::make_shared<WatchState>();
  ListOptions opts = list_options(req, *t.ri, t.ns);
  opts.limit = 0;
  opts.cont.clear();
  std::string rv = req.get_param_value("resourceVersion");
  std::string timeout = req.get_param_value("timeoutSeconds");
  long tsec = timeout.empty() ? 1800 : std::max(1L, std::atol(timeout.c_str()));
  state->deadline = SteadyClock::now() + std::chrono::seconds(tsec);
  if (rv.empty() || rv == "0") {
    ListResult lr = ctx_.store.list(*t.ri, opts);
    state->initial = lr.items;
    state->after = std::strtoull(lr.resource_version.c_str(), nullptr, 10);
  } else {
    state->after = std::strtoull(rv.c_str(), nullptr, 10);
  }
  SimContext* ctx = &ctx_;
  const ResourceInfo* ri = t.ri;
  // The socket, to notice a client that went away while no events flow.
  int fd = req.ssl ? SSL_get_fd(const_cast<SSL*>(req.ssl))
                   : find_socket_fd(req.local_port, req.remote_port);
  bool dpu = cluster_ == ClusterId::Dpu;
  std::string ns = t.ns;
  res.status = 200;
  res.set_chunked_content_provider(
      "application/json;stream=watch",
      [ctx, ri, ns, opts, state, fd, dpu](size_t, httplib::DataSink& sink) -> bool {
        if (dpu && !ctx->dpu_reachable.load()) return false;  // partition: the stream breaks
        if (fd >= 0) {
          pollfd p{fd, POLLRDHUP, 0};
          if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) return false;
        }
        auto emit = [&](const std::string& type, const json& obj) {
          std::string line = "{\"type\":\"" + type + "\",\"object\":" + obj.dump() + "}\n";
          return sink.write(line.data(), line.size());
        };
        for (const auto& o : state->initial)
          if (!emit("ADDED", *o)) return false;
        state->initial.clear();
        std::vector<WatchEvent> evs;
        uint64_t latest = 0;
        if (!ctx->store.events_since(*ri, state->after, evs, latest)) {
          json st = json::parse(status_failure_body(
              410, "Expired", "too old resource version: " + std::to_string(state->after)));
          emit("ERROR", st);
          sink.done();
          return true;
        }
        for (const auto& ev : evs) {
          const json& o = *ev.obj;
          if (ri->namespaced && !ns.empty() && jstr(o, {"metadata", "namespace"}) != ns) continue;
          const json* labels = jptr(o, {"metadata", "labels"});
          if (!opts.labels.empty() && !opts.labels.matches(labels ? *labels : json())) continue;
          if (!opts.fields.empty() && !opts.fields.matches(o)) continue;
          if (!emit(ev.type, o)) return false;
        }
        state->after = std::max(state->after, latest);
        if (SteadyClock::now() >= state->deadline || ctx->stopping) {
          sink.done();
          return true;
        }
        if (sink.is_writable && !sink.is_writable()) return false;
        ctx->store.wait_for_change(state->after, std::chrono::milliseconds(250));
        return true;
      });
}

}  // namespace dpfsim
