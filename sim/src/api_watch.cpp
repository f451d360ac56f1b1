// Watch as kube-apiserver's watch cache serves it (staging/src/k8s.io/apiserver/pkg/storage/
// cacher/cacher.go, cache_watcher.go, watch_cache.go):
//   * resourceVersion unset or "0": synthetic ADDED events for the current state, then changes;
//     N: the changes after N; N older than the kept window: HTTP 200 and one ERROR event carrying
//     a 410 Expired Status, then the end of the stream;
//   * a label/field selector is applied to the object before and after each change: ADDED when it
//     starts matching, MODIFIED while it matches, DELETED (the previous content with the event's
//     resourceVersion) when it stops matching, nothing otherwise;
//   * with allowWatchBookmarks, a BOOKMARK every bookmark_ms and 2 s before the timeout;
//   * timeoutSeconds (default: a random 30-60 minutes, minRequestTimeout * [1, 2)) ends the stream
//     cleanly; a watcher whose unsent events left the window is closed without an ERROR, as the
//     cacher closes an unresponsive watcher;
//   * a cut (POST /watch-cut), a partition of the DPU cluster or the client going away end it.
// Each stream sleeps on its resource's condition variable; it wakes for a change of that
// resource, its next bookmark, its deadline or a cut, and once a second to notice a client that
// closed its connection.
#include <httplib.h>
#include <poll.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "api_server_internal.h"
#include "kube_errors.h"

namespace dpfsim {

namespace {

using api_detail::find_socket_fd;
using api_detail::list_options;

constexpr size_t kInitialBatch = 256;  // ADDED events written per call of the content provider
constexpr size_t kEventBatch = 512;    // changes taken from the log per call
constexpr auto kLivenessCheck = std::chrono::seconds(1);

struct WatchState {
  std::shared_ptr<WatchStream> stream;
  std::vector<ObjPtr> initial;
  size_t next_initial = 0;
  uint64_t start_rv = 0;     // the resourceVersion the watch started from
  uint64_t cursor = 0;       // the resourceVersion the client has everything up to
  std::string error_status;  // non-empty: send one ERROR event with it and end
  SteadyClock::time_point deadline;
  SteadyClock::time_point next_bookmark = SteadyClock::time_point::max();
  bool ended = false;
};

std::string event_line(const char* type, const std::string& object_json) {
  std::string line;
  line.reserve(object_json.size() + 32);
  line += "{\"type\":\"";
  line += type;
  line += "\",\"object\":";
  line += object_json;
  line += "}\n";
  return line;
}

// cache_watcher.go nextBookmarkTime: every bookmark_ms, but no later than 2 s before the deadline;
// nothing once that moment has passed.
SteadyClock::time_point next_bookmark_time(SteadyClock::time_point now,
                                           SteadyClock::time_point deadline, long bookmark_ms) {
  auto t = now + std::chrono::milliseconds(bookmark_ms);
  auto pre = deadline - std::chrono::seconds(2);
  if (pre < t) t = pre;
  if (t < now) return SteadyClock::time_point::max();
  return t;
}

}  // namespace

void KubeApiServer::serve_watch(const httplib::Request& req, httplib::Response& res,
                                const Target& t) {
  ListOptions opts = list_options(req, *t.ri, t.ns);
  opts.limit = 0;
  opts.cont.clear();
  std::string rv = req.get_param_value("resourceVersion");
  uint64_t start_rv = 0;
  if (!rv.empty() && rv != "0") {
    char* end = nullptr;
    start_rv = std::strtoull(rv.c_str(), &end, 10);
    if (!end || *end || rv[0] == '-')
      throw err_bad_request("invalid resource version: strconv.ParseUint: parsing \"" + rv +
                            "\": invalid syntax");
  }
  std::string bm = req.get_param_value("allowWatchBookmarks");
  bool bookmarks = query_bool(bm);
  // handlers/get.go: timeoutSeconds, or minRequestTimeout (1800 s) * (1 + rand) when unset or 0.
  long tsec = std::atol(req.get_param_value("timeoutSeconds").c_str());
  auto now = SteadyClock::now();
  std::chrono::milliseconds timeout;
  if (tsec > 0) {
    timeout = std::chrono::seconds(tsec);
  } else {
    static thread_local std::mt19937_64 gen(std::random_device{}());
    timeout = std::chrono::milliseconds(
        1800000 + static_cast<long>(std::uniform_real_distribution<double>(0, 1)(gen) * 1800000));
  }

  auto state = std::make_shared<WatchState>();
  auto stream = std::make_shared<WatchStream>();
  stream->cluster = cluster_;
  stream->ri = t.ri;
  stream->ns = t.ns;
  stream->label_selector = req.get_param_value("labelSelector");
  stream->field_selector = req.get_param_value("fieldSelector");
  stream->bookmarks = bookmarks;
  stream->started = rfc3339_now();
  stream->remote_port = req.remote_port;
  state->stream = stream;
  state->deadline = now + timeout;
  if (bookmarks)
    state->next_bookmark =
        next_bookmark_time(now, state->deadline, ctx_.store.watch_config().bookmark_ms.load());
  if (rv.empty() || rv == "0") {
    ListResult lr = ctx_.store.list(*t.ri, opts);
    state->initial = std::move(lr.items);
    state->cursor = std::strtoull(lr.resource_version.c_str(), nullptr, 10);
  } else {
    state->cursor = start_rv;
    uint64_t oldest = ctx_.store.log(*t.ri).oldest_valid(ctx_.store.watch_config());
    if (start_rv < oldest) {
      state->error_status = status_watch_expired(start_rv, oldest);
      ctx_.watches.expired.fetch_add(1);
    }
  }
  state->start_rv = state->cursor;
  stream->rv = state->cursor;
  ctx_.watches.open(stream);

  SimContext* ctx = &ctx_;
  const ResourceInfo* ri = t.ri;
  // The socket, to notice a client that went away while no events flow.
  int fd = req.ssl ? SSL_get_fd(const_cast<SSL*>(req.ssl))
                   : find_socket_fd(req.local_port, req.remote_port);
  bool dpu = cluster_ == ClusterId::Dpu;
  std::string ns = t.ns;
  auto matches = [ri, ns, opts](const json& o) {
    if (ri->namespaced && !ns.empty() && jstr(o, {"metadata", "namespace"}) != ns) return false;
    if (!opts.labels.empty()) {
      const json* labels = jptr(o, {"metadata", "labels"});
      if (!opts.labels.matches(labels ? *labels : json())) return false;
    }
    return opts.fields.empty() || opts.fields.matches(o);
  };
  res.status = 200;
  res.set_header("Cache-Control", "no-cache, private");
  res.set_chunked_content_provider(
      "application/json;stream=watch",
      [ctx, ri, state, fd, dpu, matches](size_t, httplib::DataSink& sink) -> bool {
        WatchHub& hub = ctx->watches;
        WatchStream& ws = *state->stream;
        auto finish = [&](bool clean) {
          if (!state->ended) hub.close(state->stream);
          state->ended = true;
          if (clean) sink.done();
          return clean;
        };
        auto write = [&](const std::string& s) {
          return s.empty() || sink.write(s.data(), s.size());
        };
        int cut = ws.cut.load();
        if (state->ended) return false;
        if (cut == WatchStream::kDrop || ctx->stopping || (dpu && !ctx->dpu_reachable.load()))
          return finish(false);
        if (cut == WatchStream::kEnd) return finish(true);
        if (!state->error_status.empty()) {
          write(event_line("ERROR", state->error_status));
          return finish(true);
        }
        if (state->next_initial < state->initial.size()) {
          std::string out;
          size_t begin = state->next_initial;
          size_t end = std::min(state->initial.size(), begin + kInitialBatch);
          for (; state->next_initial < end; ++state->next_initial)
            out += event_line("ADDED", state->initial[state->next_initial]->dump());
          ws.events.fetch_add(end - begin);
          hub.events_sent.fetch_add(end - begin);
          if (state->next_initial >= state->initial.size()) state->initial.clear();
          return write(out) ? true : finish(false);
        }

        Store& store = ctx->store;
        const WatchConfig& cfg = store.watch_config();
        EventLog& log = store.log(*ri);
        uint64_t published = store.published_rv();
        std::vector<EntryPtr> evs;
        if (!log.since(state->cursor, kEventBatch, evs, cfg)) {
          hub.fell_behind.fetch_add(1);
          return finish(true);
        }
        std::string out;
        uint64_t sent = 0;
        for (const auto& e : evs) {
          bool deleted = std::strcmp(e->type, "DELETED") == 0;
          bool cur = !deleted && matches(*e->obj);
          bool old = e->prev && matches(*e->prev);
          if (cur && !old) {
            out += event_line("ADDED", e->obj_json());
          } else if (cur && old) {
            out += event_line("MODIFIED", e->obj_json());
          } else if (old) {
            out += event_line("DELETED", deleted ? e->obj_json() : e->prev_as_deleted_json());
          }
          if (cur || old) ++sent;
          state->cursor = e->rv;
        }
        if (!write(out)) return finish(false);
        if (sent) {
          ws.events.fetch_add(sent);
          hub.events_sent.fetch_add(sent);
        }
        ws.rv = state->cursor;
        bool caught_up = evs.size() < kEventBatch;
        auto now = SteadyClock::now();
        if (caught_up && now >= state->next_bookmark) {
          // The newest resourceVersion whose events were all sent; as cache_watcher.go process(),
          // only when it is newer than the one the watch started from.
          uint64_t brv = std::max(published, state->cursor);
          if (brv > state->start_rv) {
            json obj{{"kind", ri->kind},
                     {"apiVersion", ri->api_version()},
                     {"metadata", {{"resourceVersion", std::to_string(brv)}}}};
            if (!write(event_line("BOOKMARK", obj.dump()))) return finish(false);
            state->cursor = brv;
            ws.rv = brv;
            ws.bookmarks_sent.fetch_add(1);
            hub.bookmarks_sent.fetch_add(1);
          }
          state->next_bookmark = next_bookmark_time(now, state->deadline, cfg.bookmark_ms.load());
        }
        if (now >= state->deadline) {
          hub.timeouts.fetch_add(1);
          return finish(true);
        }
        if (!caught_up) return true;
        if (fd >= 0) {
          pollfd p{fd, POLLRDHUP, 0};
          if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
            hub.client_gone.fetch_add(1);
            return finish(false);
          }
        }
        auto wake = std::min({state->deadline, state->next_bookmark, now + kLivenessCheck});
        std::unique_lock<std::mutex> l(log.mutex());
        log.cv().wait_until(l, wake, [&] {
          return log.has_newer_l(state->cursor) || ws.cut.load() != WatchStream::kNone ||
                 ctx->stopping.load();
        });
        return true;
      },
      [ctx, state](bool) {
        // The response is over (also when httplib gave up on the connection).
        if (!state->ended) ctx->watches.close(state->stream);
        state->ended = true;
      });
}

}  // namespace dpfsim
