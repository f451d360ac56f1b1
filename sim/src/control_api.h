// Control API (plain HTTP JSON) for tests and demos: reset, seed, delays, faults, reachability,
// request counters, state dump and recent requests.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "sim_context.h"

namespace httplib {
class Server;
}

namespace dpfsim {

class ControlApi {
 public:
  explicit ControlApi(SimContext& ctx);
  ~ControlApi();
  int bind(const std::string& host, int port);
  void start();
  void stop();
  std::string url() const { return url_; }

 private:
  SimContext& ctx_;
  std::unique_ptr<httplib::Server> srv_;
  std::thread thread_;
  std::string url_;
};

}  // namespace dpfsim
