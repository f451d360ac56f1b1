// One simulated Kubernetes API endpoint (management or DPU cluster) on its own port.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "resources.h"
#include "sim_context.h"
#include "tls_certs.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace dpfsim {

class KubeApiServer {
 public:
  // tls: nullptr for plain HTTP.
  KubeApiServer(SimContext& ctx, ClusterId cluster, const TlsFiles* tls);
  ~KubeApiServer();
  // Binds host:port (0 = free port); returns the bound port or -1.
  int bind(const std::string& host, int port);
  void start();
  void stop();
  std::string url() const { return url_; }

 private:
  struct Target;
  Target classify(const std::string& path) const;
  void handle(const httplib::Request& req, httplib::Response& res);
  void negotiate_compression(const httplib::Request& req, httplib::Response& res);
  void dispatch(const httplib::Request& req, httplib::Response& res, const Target& t,
                const std::string& verb);
  void serve_watch(const httplib::Request& req, httplib::Response& res, const Target& t);

  SimContext& ctx_;
  ClusterId cluster_;
  bool tls_ = false;
  std::unique_ptr<httplib::Server> srv_;
  std::thread thread_;
  std::string url_;
  std::string address_;
};

// Drops the TCP connection of a request immediately (RST), without an HTTP response.
void drop_connection(const httplib::Request& req);

}  // namespace dpfsim
