#include "api_server.h"

#include <dirent.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include "discovery.h"
#include "kube_errors.h"
#include "profile.h"
#include "table.h"
#include "validation.h"

namespace dpfsim {

struct KubeApiServer::Target {
  enum Kind { Discovery, Health, OpenApi, Resource, Unknown } kind = Unknown;
  std::string doc;
  const ResourceInfo* ri = nullptr;
  std::string ns, name, sub;
  bool collection() const { return name.empty(); }
  std::string resource_label() const {
    switch (kind) {
      case Discovery:
        return "discovery";
      case Health:
        return "healthz";
      case OpenApi:
        return "openapi";
      case Resource:
        return sub.empty() ? ri->plural : ri->plural + "/" + sub;
      default:
        return "unknown";
    }
  }
};

namespace {

int socket_port(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(ss).sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(ss).sin6_port);
  return -1;
}

int find_socket_fd(int local_port, int remote_port) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1;
  while (dirent* e = readdir(d)) {
    int fd = std::atoi(e->d_name);
    if (fd <= 2) continue;
    sockaddr_storage a{}, b{};
    socklen_t la = sizeof a, lb = sizeof b;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &la) != 0) continue;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&b), &lb) != 0) continue;
    if (socket_port(a) == local_port && socket_port(b) == remote_port) {
      found = fd;
      break;
    }
  }
  closedir(d);
  return found;
}

std::vector<std::string> allowed_fields(const ResourceInfo& ri) {
  std::vector<std::string> f = {"metadata.name", "metadata.namespace"};
  if (ri.plural == "pods")
    f.insert(f.end(), {"spec.nodeName", "status.phase", "spec.restartPolicy", "spec.schedulerName",
                       "spec.serviceAccountName", "status.podIP", "status.nominatedNodeName",
                       "spec.hostNetwork"});
  if (ri.plural == "nodes") f.push_back("spec.unschedulable");
  if (ri.plural == "namespaces") f.push_back("status.phase");
  if (ri.plural == "events")
    f.insert(f.end(),
             {"involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
              "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
              "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"});
  return f;
}

ListOptions list_options(const httplib::Request& req, const ResourceInfo& ri,
                         const std::string& ns) {
  ListOptions o;
  o.ns = ns;
  try {
    o.labels = LabelSelector::parse(req.get_param_value("labelSelector"));
  } catch (const std::invalid_argument& e) {
    throw err_bad_request(e.what());
  }
  try {
    o.fields = FieldSelector::parse(req.get_param_value("fieldSelector"), allowed_fields(ri));
  } catch (const std::invalid_argument& e) {
    throw err_bad_request(e.what());
  }
  std::string limit = req.get_param_value("limit");
  if (!limit.empty()) {
    char* end = nullptr;
    long v = std::strtol(limit.c_str(), &end, 10);
    if (!end || *end || v < 0) throw err_bad_request("invalid limit: " + limit);
    o.limit = v;
  }
  o.cont = req.get_param_value("continue");
  return o;
}

DeleteOptions delete_options(const httplib::Request& req) {
  DeleteOptions o;
  if (!req.body.empty()) {
    json b;
    try {
      b = json::parse(req.body);
    } catch (const std::exception& e) {
      throw err_bad_request(std::string("error decoding DeleteOptions: ") + e.what());
    }
    if (b.is_object()) {
      if (const json* p = jptr(b, {"preconditions", "resourceVersion"}); p && p->is_string())
        o.precondition_rv = p->get<std::string>();
      if (const json* p = jptr(b, {"preconditions", "uid"}); p && p->is_string())
        o.precondition_uid = p->get<std::string>();
      if (const json* g = jptr(b, {"gracePeriodSeconds"}); g && g->is_number_integer())
        o.grace_seconds = g->get<long>();
    }
  }
  std::string g = req.get_param_value("gracePeriodSeconds");
  if (!g.empty()) o.grace_seconds = std::atol(g.c_str());
  return o;
}

std::string list_body(const ResourceInfo& ri, const ListResult& lr) {
  json md{{"resourceVersion", lr.resource_version}};
  if (!lr.cont.empty()) md["continue"] = lr.cont;
  if (lr.remaining >= 0 && !lr.cont.empty()) md["remainingItemCount"] = lr.remaining;
  std::string out;
  out.reserve(64 + lr.items.size() * 1024);
  out += "{\"apiVersion\":\"" + ri.api_version() + "\",\"items\":[";
  for (size_t i = 0; i < lr.items.size(); ++i) {
    if (i) out += ',';
    out += lr.items[i]->dump();
  }
  out += "],\"kind\":\"" + ri.list_kind() + "\",\"metadata\":" + md.dump() + "}";
  return out;
}

// Go's %q-style quoting of a warning text inside the Warning header value.
std::string json_escape_quotes(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

bool wants_table(const httplib::Request& req) {
  return req.get_header_value("Accept").find("as=Table") != std::string::npos;
}

void send(httplib::Response& res, int code, const std::string& body) {
  res.status = code;
  res.set_header("Cache-Control", "no-cache, private");
  res.set_content(body, "application/json");
}

}  // namespace

void drop_connection(const httplib::Request& req) {
  int fd = -1;
  if (req.ssl) fd = SSL_get_fd(const_cast<SSL*>(req.ssl));
  if (fd < 0) fd = find_socket_fd(req.local_port, req.remote_port);
  if (fd < 0) return;
  linger lg{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull >= 0) {
    ::dup2(devnull,
           fd);  // closes the socket (RST because of SO_LINGER 0); the server keeps a harmless fd
    ::close(devnull);
  } else {
    ::shutdown(fd, SHUT_RDWR);
  }
}

KubeApiServer::KubeApiServer(SimContext& ctx, ClusterId cluster, const TlsFiles* tls)
    : ctx_(ctx), cluster_(cluster) {
  if (tls) {
    tls_ = true;
    srv_ = std::make_unique<httplib::SSLServer>(tls->server_cert.c_str(), tls->server_key.c_str());
  } else {
    srv_ = std::make_unique<httplib::Server>();
  }
  srv_->new_task_queue = [] { return new httplib::ThreadPool(128); };
  srv_->set_keep_alive_max_count(1000000);
  srv_->set_keep_alive_timeout(30);
  srv_->set_read_timeout(30);
  srv_->set_write_timeout(30);
  srv_->set_tcp_nodelay(true);
  srv_->set_payload_max_length(32 * 1024 * 1024);
  auto h = [this](const httplib::Request& req, httplib::Response& res) { handle(req, res); };
  srv_->Get(".*", h);
  srv_->Post(".*", h);
  srv_->Put(".*", h);
  srv_->Patch(".*", h);
  srv_->Delete(".*", h);
}

KubeApiServer::~KubeApiServer() {
  stop();
}

int KubeApiServer::bind(const std::string& host, int port) {
  if (!srv_->is_valid()) return -1;
  int p = port == 0 ? srv_->bind_to_any_port(host) : (srv_->bind_to_port(host, port) ? port : -1);
  if (p < 0) return -1;
  std::string h = host;
  if (h == "0.0.0.0" || h == "::" || h.empty()) h = "127.0.0.1";
  std::string hostpart = h.find(':') != std::string::npos ? "[" + h + "]" : h;
  address_ = hostpart + ":" + std::to_string(p);
  url_ = std::string(tls_ ? "https://" : "http://") + address_;
  return p;
}

void KubeApiServer::start() {
  thread_ = std::thread([this] { srv_->listen_after_bind(); });
}

void KubeApiServer::stop() {
  if (srv_) srv_->stop();
  if (thread_.joinable()) thread_.join();
}

KubeApiServer::Target KubeApiServer::classify(const std::string& path) const {
  Target t;
  if (path == "/healthz" || path == "/livez" || path == "/readyz" ||
      starts_with(path, "/healthz/") || starts_with(path, "/livez/") ||
      starts_with(path, "/readyz/")) {
    t.kind = Target::Health;
    return t;
  }
  if (starts_with(path, "/openapi")) {
    t.kind = Target::OpenApi;
    return t;
  }
  if (auto d = discovery_document(cluster_, path, address_)) {
    t.kind = Target::Discovery;
    t.doc = *d;
    return t;
  }
  std::vector<std::string> segs;
  for (auto& s : split(path, '/'))
    if (!s.empty()) segs.push_back(s);
  std::string group, version;
  size_t i = 0;
  if (segs.size() >= 3 && segs[0] == "api") {
    version = segs[1];
    i = 2;
  } else if (segs.size() >= 4 && segs[0] == "apis") {
    group = segs[1];
    version = segs[2];
    i = 3;
  } else {
    return t;
  }
  std::vector<std::string> rest(segs.begin() + static_cast<long>(i), segs.end());
  if (rest.size() >= 3 && rest[0] == "namespaces") {
    const ResourceInfo* ri = find_resource(cluster_, group, version, rest[2]);
    if (ri && ri->namespaced) {
      if (rest.size() > 5) return t;
      t.ri = ri;
      t.ns = rest[1];
      if (rest.size() >= 4) t.name = rest[3];
      if (rest.size() == 5) t.sub = rest[4];
    }
  }
  if (!t.ri) {
    if (rest.empty() || rest.size() > 3) return t;
    const ResourceInfo* ri = find_resource(cluster_, group, version, rest[0]);
    if (!ri) return t;
    if (ri->namespaced && rest.size() > 1) return t;
    t.ri = ri;
    if (rest.size() >= 2) t.name = rest[1];
    if (rest.size() == 3) t.sub = rest[2];
  }
  if (!t.sub.empty() && !(t.sub == "status" && t.ri->has_status)) {
    t.ri = nullptr;
    return t;
  }
  t.kind = Target::Resource;
  return t;
}

void KubeApiServer::handle(const httplib::Request& req, httplib::Response& res) {
  auto t0 = SteadyClock::now();
  const std::string cname = cluster_name(cluster_);
  Target t = classify(req.path);
  std::string verb = req.method;
  if (t.kind == Target::Resource && req.method == "GET") {
    std::string w = req.get_param_value("watch");
    verb = t.collection() ? ((w == "true" || w == "1") ? "WATCH" : "LIST") : "GET";
  }
  ctx_.reqlog.count(cname, verb + " " + t.resource_label());

  RequestRecord rec;
  rec.seq = ctx_.reqlog.next_seq();
  rec.time = rfc3339_now();
  rec.cluster = cname;
  rec.method = req.method;
  rec.verb = verb;
  rec.resource = t.resource_label();
  rec.path = req.path;
  auto q = req.target.find('?');
  if (q != std::string::npos) rec.query = req.target.substr(q + 1);
  rec.content_type = req.get_header_value("Content-Type");
  if (req.method != "GET")
    rec.body = req.body.size() > 65536 ? req.body.substr(0, 65536) : req.body;

  auto finish = [&](int status) {
    rec.status = status;
    auto us =
        std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - t0).count();
    spdlog::debug("{} {} {} -> {} ({} us){}", cname, req.method, req.target.substr(0, 512), status,
                  us, rec.fault.empty() ? "" : " fault=" + rec.fault);
    ctx_.reqlog.record(std::move(rec));
  };

  // Unreachable DPU cluster.
  if (cluster_ == ClusterId::Dpu && !ctx_.dpu_reachable.load()) {
    rec.fault = "unreachable";
    if (ctx_.dpu_unreachable_mode.load() == 1) {
      ApiError e = err_injected(503, -1, "the DPU cluster is unreachable");
      send(res, e.code, e.body);
      finish(503);
    } else {
      drop_connection(req);
      finish(0);
    }
    return;
  }

  if (t.kind != Target::Health && !ctx_.auth.check(req.get_header_value("Authorization"))) {
    ApiError e = err_unauthorized();
    send(res, e.code, e.body);
    finish(401);
    return;
  }

  if (auto f = ctx_.faults.match(cname, verb == "DELETE" ? "DELETE" : verb, req.path)) {
    rec.fault = f->action + "#" + std::to_string(f->id);
    if (f->action == "latency") {
      auto until = SteadyClock::now() + std::chrono::milliseconds(f->latency_ms);
      while (SteadyClock::now() < until && !ctx_.stopping)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    } else if (f->action == "hang") {
      uint64_t epoch = ctx_.faults.epoch();
      auto until = SteadyClock::now() + std::chrono::milliseconds(f->latency_ms);
      while (SteadyClock::now() < until && !ctx_.stopping && ctx_.faults.epoch() == epoch)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      drop_connection(req);
      finish(0);
      return;
    } else if (f->action == "reset") {
      drop_connection(req);
      finish(0);
      return;
    } else if (f->action == "conflict") {
      ApiError e = t.kind == Target::Resource ? err_conflict(*t.ri, t.name.empty() ? "" : t.name)
                                              : make_error(409, "Conflict", "injected conflict");
      send(res, e.code, e.body);
      finish(e.code);
      return;
    } else {
      ApiError e = err_injected(f->status, f->retry_after, f->message);
      for (const auto& [k, v] : e.headers) res.set_header(k, v);
      send(res, e.code, e.body);
      finish(e.code);
      return;
    }
  }

  try {
    dispatch(req, res, t, verb);
  } catch (const ApiError& e) {
    for (const auto& [k, v] : e.headers) res.set_header(k, v);
    send(res, e.code, e.body);
  } catch (const std::exception& e) {
    ApiError ie =
        make_error(500, "InternalError", std::string("Internal error occurred: ") + e.what());
    send(res, ie.code, ie.body);
  }
  finish(res.status);
}

void KubeApiServer::dispatch(const httplib::Request& req, httplib::Response& res, const Target& t,
                             const std::string& verb) {
  switch (t.kind) {
    case Target::Health:
      res.status = 200;
      res.set_content("ok", "text/plain; charset=utf-8");
      return;
    case Target::Discovery:
      if (req.method != "GET")
        throw err_method_not_allowed(
            "the server does not allow this method on the requested resource");
      send(res, 200, t.doc);
      return;
    case Target::OpenApi: {
      if (req.method != "GET")
        throw err_method_not_allowed("the server does not allow this method");
      std::string doc;
      if (req.path == "/openapi/v2") {
        std::string accept = req.get_header_value("Accept");
        if (!accept.empty() && accept.find("json") == std::string::npos &&
            accept.find("*/*") == std::string::npos)
          throw make_error(406, "NotAcceptable", "only application/json is served");
        doc = openapi_v2(cluster_);
      } else if (req.path == "/openapi/v3" || req.path == "/openapi/v3/") {
        doc = openapi_v3_root(cluster_);
      } else if (starts_with(req.path, "/openapi/v3/")) {
        doc = openapi_v3_group_version(cluster_, req.path.substr(12));
      }
      if (doc.empty()) throw err_unknown_path();
      send(res, 200, doc);
      return;
    }
    case Target::Unknown:
      throw err_unknown_path();
    case Target::Resource:
      break;
  }
  const ResourceInfo& ri = *t.ri;
  bool status_sub = t.sub == "status";
  if (verb == "LIST") {
    ListOptions opts = list_options(req, ri, t.ns);
    ListResult lr = ctx_.store.list(ri, opts);
    if (wants_table(req)) {
      std::string inc = req.get_param_value("includeObject");
      send(
          res, 200,
          render_table(ri, lr.items, lr.resource_version, lr.cont, inc.empty() ? "Metadata" : inc));
    } else {
      send(res, 200, list_body(ri, lr));
    }
    return;
  }
  if (verb == "WATCH") {
    serve_watch(req, res, t);
    return;
  }
  if (verb == "GET") {
    ObjPtr o = ctx_.store.get(ri, t.ns, t.name);
    if (wants_table(req) && !status_sub) {
      std::string inc = req.get_param_value("includeObject");
      send(res, 200, render_table(ri, {o}, "", "", inc.empty() ? "Metadata" : inc));
    } else {
      send(res, 200, o->dump());
    }
    return;
  }
  FieldValidation fv = FieldValidation::Warn;
  if (req.method == "POST" || req.method == "PUT" || req.method == "PATCH") {
    std::string v = req.get_param_value("fieldValidation");
    if (v == "Strict")
      fv = FieldValidation::Strict;
    else if (v == "Ignore")
      fv = FieldValidation::Ignore;
    else if (!v.empty() && v != "Warn")
      throw err_bad_request("fieldValidation must be one of \"Ignore\", \"Warn\", or \"Strict\"");
  }
  FieldValidationScope fv_scope(fv);
  auto reply = [&](const WriteResult& w) {
    for (const auto& warning : fv_scope.warnings)
      res.set_header("Warning", "299 - \"" + json_escape_quotes(warning) + "\"");
    send(res, w.code, w.obj ? w.obj->dump() : w.text);
  };
  if (req.method == "POST") {
    if (!t.collection() || status_sub)
      throw err_method_not_allowed(
          "the server does not allow this method on the requested resource");
    json body;
    try {
      body = json::parse(req.body);
    } catch (const std::exception& e) {
      throw err_bad_request(std::string("error decoding request body: ") + e.what());
    }
    if (ri.namespaced && t.ns.empty()) {
      std::string bns = jstr(body, {"metadata", "namespace"});
      if (bns.empty())
        throw err_bad_request(
            "the server could not find the requested resource: namespace is required");
      reply(ctx_.store.create(ri, bns, std::move(body)));
      return;
    }
    reply(ctx_.store.create(ri, t.ns, std::move(body)));
    return;
  }
  if (req.method == "PUT") {
    if (t.collection())
      throw err_method_not_allowed(
          "the server does not allow this method on the requested resource");
    json body;
    try {
      body = json::parse(req.body);
    } catch (const std::exception& e) {
      throw err_bad_request(std::string("error decoding request body: ") + e.what());
    }
    reply(ctx_.store.update(ri, t.ns, t.name, std::move(body), status_sub));
    return;
  }
  if (req.method == "PATCH") {
    if (t.collection())
      throw err_method_not_allowed(
          "the server does not allow this method on the requested resource");
    PatchType pt = patch_type_from_content_type(req.get_header_value("Content-Type"));
    reply(ctx_.store.patch(ri, t.ns, t.name, pt, req.body, status_sub));
    return;
  }
  if (req.method == "DELETE") {
    if (status_sub)
      throw err_method_not_allowed(
          "the server does not allow this method on the requested resource");
    DeleteOptions dopts = delete_options(req);
    if (t.collection()) {
      ListOptions opts = list_options(req, ri, t.ns);
      auto results = ctx_.store.remove_collection(ri, opts, dopts);
      ListResult lr;
      lr.resource_version = std::to_string(0);
      for (const auto& r : results) lr.items.push_back(r.obj);
      {
        std::lock_guard<std::mutex> l(ctx_.store.mutex());
        lr.resource_version = std::to_string(ctx_.store.rv_l());
      }
      send(res, 200, list_body(ri, lr));
      return;
    }
    reply(ctx_.store.remove(ri, t.ns, t.name, dopts));
    return;
  }
  throw err_method_not_allowed("the server does not allow this method on the requested resource");
}

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
