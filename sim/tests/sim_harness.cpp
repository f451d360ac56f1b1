#include "sim_harness.h"

#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace simtest {

std::string Resp::header(const std::string& k) const {
  for (const auto& [hk, hv] : headers)
    if (strcasecmp(hk.c_str(), k.c_str()) == 0) return hv;
  return "";
}

Resp http(const std::string& base, const std::string& method, const std::string& path,
          const std::string& body, const std::string& content_type, const HttpOpts& opts) {
  std::unique_ptr<httplib::Client> cli;
  cli = std::make_unique<httplib::Client>(base);
  cli->set_tcp_nodelay(true);
  if (!opts.ca_file.empty()) {
    cli->set_ca_cert_path(opts.ca_file.c_str());
    cli->enable_server_certificate_verification(true);
  }
  auto ms = std::chrono::milliseconds(opts.timeout_ms);
  cli->set_connection_timeout(std::chrono::duration_cast<std::chrono::seconds>(ms).count(), 0);
  cli->set_read_timeout(opts.timeout_ms / 1000, (opts.timeout_ms % 1000) * 1000);
  cli->set_write_timeout(opts.timeout_ms / 1000, (opts.timeout_ms % 1000) * 1000);
  httplib::Headers h;
  if (!opts.token.empty()) h.emplace("Authorization", "Bearer " + opts.token);
  if (!opts.accept.empty()) h.emplace("Accept", opts.accept);
  auto call = [&]() -> httplib::Result {
    if (method == "GET") return cli->Get(path.c_str(), h);
    if (method == "POST") return cli->Post(path.c_str(), h, body, content_type.c_str());
    if (method == "PUT") return cli->Put(path.c_str(), h, body, content_type.c_str());
    if (method == "PATCH") return cli->Patch(path.c_str(), h, body, content_type.c_str());
    if (method == "DELETE") return cli->Delete(path.c_str(), h, body, content_type.c_str());
    throw std::invalid_argument("method " + method);
  };
  httplib::Result r = call();
  Resp out;
  if (!r) {
    out.error = httplib::to_string(r.error());
    return out;
  }
  out.ok = true;
  out.status = r->status;
  out.body = r->body;
  out.content_type = r->get_header_value("Content-Type");
  for (const auto& [k, v] : r->headers) out.headers.emplace_back(k, v);
  return out;
}

std::unique_ptr<SimProcess> SimProcess::start(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {DPFSIM_BINARY,  "--listen",    "127.0.0.1:0",
                                   "--dpu-listen", "127.0.0.1:0", "--control-listen",
                                   "127.0.0.1:0",  "--log-level", "warn"};
  args.insert(args.end(), extra.begin(), extra.end());
  int out_pipe[2];
  if (pipe(out_pipe) != 0) throw std::runtime_error("pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  posix_spawn_file_actions_addclose(&fa, out_pipe[0]);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  auto sp = std::unique_ptr<SimProcess>(new SimProcess());
  if (posix_spawn(&sp->pid, argv[0], &fa, nullptr, argv.data(), environ) != 0)
    throw std::runtime_error("spawn failed");
  posix_spawn_file_actions_destroy(&fa);
  close(out_pipe[1]);
  std::string line;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (line.find('\n') == std::string::npos) {
    pollfd p{out_pipe[0], POLLIN, 0};
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now())
                                    .count());
    if (left <= 0 || poll(&p, 1, left) <= 0)
      throw std::runtime_error("dpfsim did not print its ready line");
    char buf[512];
    ssize_t n = read(out_pipe[0], buf, sizeof buf);
    if (n <= 0) throw std::runtime_error("dpfsim exited before it was ready");
    line.append(buf, static_cast<size_t>(n));
  }
  close(out_pipe[0]);
  sp->ready = json::parse(line.substr(0, line.find('\n')));
  sp->mgmt = sp->ready["management"];
  sp->dpu = sp->ready["dpu"];
  sp->control = sp->ready["control"];
  if (sp->ready.contains("ca_file")) sp->ca_file = sp->ready["ca_file"];
  return sp;
}

SimProcess::~SimProcess() {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  for (int i = 0; i < 300; ++i) {
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

Resp SimProcess::ctl(const std::string& method, const std::string& path, const json& body) {
  return http(control, method, path, body.is_null() ? "" : body.dump());
}

void SimProcess::reset(int dpus, int delay_ms) {
  Resp r = ctl("POST", "/reset", json{{"dpus", dpus}});
  if (r.status != 200) throw std::runtime_error("reset failed: " + r.body);
  r = ctl("POST", "/delays", json{{"all_ms", delay_ms}});
  if (r.status != 200) throw std::runtime_error("delays failed: " + r.body);
}

bool wait_until(const std::function<bool()>& cond, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

SimProcess& shared_sim() {
  static std::unique_ptr<SimProcess> sim = SimProcess::start({"--dpus", "4", "--seed", "42"});
  return *sim;
}

std::string dpuservice_path(const std::string& name) {
  std::string p = "/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/" + kNs + "/dpuservices";
  return name.empty() ? p : p + "/" + name;
}

json make_dpuservice(const std::string& name, const json& spec_overrides) {
  json svc{{"apiVersion", "svc.dpu.nvidia.com/v1alpha1"},
           {"kind", "DPUService"},
           {"metadata", {{"name", name}, {"namespace", kNs}}},
           {"spec",
            {{"helmChart",
              {{"source",
                {{"repoURL", "oci://registry.example.com/charts"},
                 {"chart", "demo"},
                 {"version", "1.0.0"}}},
               {"values", {{"replicaHint", 1}}}}},
             {"security", {{"privileged", false}}}}}};
  svc["spec"].merge_patch(spec_overrides);
  return svc;
}

}  // namespace simtest
