// The request path every call takes: the request log, a partitioned DPU cluster, authentication,
// injected faults and kill points, then dispatch() (api_routing.cpp). Also the server's lifecycle
// and the connection drop used by faults and partitions.
#include "api_server.h"

#include <dirent.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <optional>

#include "api_server_internal.h"
#include "elastic_pool.h"
#include "kube_errors.h"

namespace dpfsim {

namespace {

int socket_port(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(ss).sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(ss).sin6_port);
  return -1;
}

}  // namespace

namespace api_detail {

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

void send(httplib::Response& res, int code, const std::string& body) {
  res.status = code;
  res.set_header("Cache-Control", "no-cache, private");
  res.set_content(body, "application/json");
}

}  // namespace api_detail

using api_detail::find_socket_fd;
using api_detail::send;

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
  // A thread per connection, started on demand: watches and idle keep-alive connections never
  // make other clients queue (elastic_pool.h).
  srv_->new_task_queue = [] { return new ElasticPool(8, 4096); };
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

void KubeApiServer::handle(const httplib::Request& req, httplib::Response& res) {
  // the arrival, stamped first (as kube-apiserver's requestReceivedTimestamp, at the top of its
  // handler chain): the request log's lock and formatting below are dpfsim's own time
  const auto arrived = std::chrono::system_clock::now();
  auto t0 = SteadyClock::now();
  // as kube-apiserver (Go's net/http) does on every response: the server's time, here moved by
  // the clock offset knob (POST /clock)
  res.set_header("Date", http_date(std::chrono::system_clock::now() +
                                   std::chrono::milliseconds(ctx_.clock_offset_ms.load())));
  const std::string cname = cluster_name(cluster_);
  Target t = classify(req.path);
  std::string verb = req.method;
  if (t.kind == Target::Resource && req.method == "GET") {
    std::string w = req.get_param_value("watch");
    verb = t.collection() ? (query_bool(w) ? "WATCH" : "LIST") : "GET";
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
  rec.remote_port = req.remote_port;
  rec.user_agent = req.get_header_value("User-Agent");
  rec.at = arrived;
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
      finish(0);  // logged before the client can notice the drop
      drop_connection(req);
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
      finish(0);  // logged before the client can notice the drop
      drop_connection(req);
      return;
    } else if (f->action == "reset") {
      finish(0);  // logged before the client can notice the drop
      drop_connection(req);
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

  // Kill points: the client is SIGKILLed and the connection dropped, before the request is
  // applied or after it was applied but before the response is sent.
  std::optional<KillPoint> kp;
  if (t.kind != Target::Health)
    kp = ctx_.kill_points.match(cname, verb, req.method, req.path, rec.seq, req.remote_port);
  if (kp && kp->when == "before") {
    rec.fault = "kill-before#" + std::to_string(kp->id);
    ctx_.kill_points.fire(*kp);
    finish(0);  // logged before the client can notice the drop
    drop_connection(req);
    return;
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
  if (kp) {  // "after": applied (res holds the answer), never sent
    rec.fault = "kill-after#" + std::to_string(kp->id) + "(" + std::to_string(res.status) + ")";
    ctx_.kill_points.fire(*kp);
    finish(0);  // logged before the client can notice the drop
    drop_connection(req);
    return;
  }
  negotiate_compression(req, res);
  finish(res.status);
}

// kube-apiserver compresses an answer only with gzip and only from 128 KiB on
// (APIResponseCompression, defaultGzipThresholdBytes in
// k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/writers.go). httplib would compress every
// JSON answer, with brotli first when the client accepts it: several times the cost of a small
// answer, which no client of a real cluster pays. The request is httplib's own (non-const) object,
// lent to the handler as const.
void KubeApiServer::negotiate_compression(const httplib::Request& req, httplib::Response& res) {
  constexpr size_t kGzipThresholdBytes = 128 * 1024;
  auto& headers = const_cast<httplib::Request&>(req).headers;
  auto it = headers.find("Accept-Encoding");
  if (it == headers.end()) return;
  const bool gzip = it->second.find("gzip") != std::string::npos;
  headers.erase("Accept-Encoding");
  if (gzip && res.body.size() >= kGzipThresholdBytes) headers.emplace("Accept-Encoding", "gzip");
}

}  // namespace dpfsim
