// dpfsim: a simulator of the DPF management cluster and the DPU cluster speaking the Kubernetes
// REST API.
//
//   dpfsim --listen HOST:PORT --dpu-listen HOST:PORT --control-listen HOST:PORT --dpus N
//          [--tls-dir DIR --token-file FILE] [--seed S]
//
// Prints one JSON line on stdout when ready:
//   {"management":"http://127.0.0.1:P","dpu":"...","control":"...","ca_file":"..."(TLS only)}
#include <pthread.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>

#include "api_server.h"
#include "control_api.h"
#include "controllers/controller_manager.h"
#include "profile.h"
#include "request_log_file.h"
#include "seeding.h"
#include "sim_context.h"
#include "tls_certs.h"

using namespace dpfsim;

namespace {

const char* kUsage = R"(Usage: dpfsim [options]

Simulates the DPF management cluster and the DPU cluster as two Kubernetes API endpoints.

Required (fixed command line):
  --listen HOST:PORT          management-cluster Kubernetes API (port 0 = free port)
  --dpu-listen HOST:PORT      DPU-cluster Kubernetes API
  --control-listen HOST:PORT  control API (plain HTTP JSON)
  --dpus N                    seed N DPUDevices, DPUs and DPU-cluster Nodes

Optional:
  --tls-dir DIR               generate ca.crt/server.crt/server.key in DIR and serve both Kubernetes
                              endpoints over HTTPS (control API stays HTTP)
  --token-file FILE           require "Authorization: Bearer <token>"; each non-empty line of FILE is a
                              valid token; the file is re-read when it changes (rotation)
  --seed S                    PRNG seed for names, uids and fault probabilities (default 1)
  --seed-file FILE            extra objects: {"dpus":N,"objects":[{...},...]}
  --log-level LEVEL           trace|debug|info|warn|error|off (default info; debug logs every request)
  --all-delays-ms MS          set every controller delay
  --delay NAME=MS             set one delay (label_propagation_ms, node_provisioning_ms, dpuservice_sync_ms,
                              pod_ready_ms, pod_termination_ms, dpuservice_ready_ms, finalizer_ms,
                              argo_refresh_ms)
  --dpf-version vYY.MM        DPF release profile: v24.10, v25.7 or v26.10 (default, newest)
  --tick-ms MS                controller tick (default 20)
  --kubeconfig-dir DIR        write management.kubeconfig and dpu.kubeconfig into DIR
  --request-log FILE          append every request to FILE as one JSON line (seq, time with
                              microseconds, cluster, method, verb, resource, path, query, status,
                              user_agent; a POST's object name), flushed as it is answered
  --help                      this text
)";

bool split_hostport(const std::string& s, std::string& host, int& port) {
  auto pos = s.rfind(':');
  if (pos == std::string::npos) return false;
  host = s.substr(0, pos);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  try {
    port = std::stoi(s.substr(pos + 1));
  } catch (...) {
    return false;
  }
  return port >= 0 && port <= 65535;
}

void write_kubeconfig(const std::string& path, const std::string& name, const std::string& server,
                      const std::string& ca, const std::string& token_file) {
  std::ofstream out(path);
  out << "apiVersion: v1\nkind: Config\nclusters:\n- name: " << name
      << "\n  cluster:\n    server: " << server << "\n";
  if (!ca.empty()) out << "    certificate-authority: " << ca << "\n";
  out << "users:\n- name: " << name << "-user\n  user:\n";
  if (!token_file.empty())
    out << "    tokenFile: " << token_file << "\n";
  else
    out << "    {}\n";
  out << "contexts:\n- name: " << name << "\n  context:\n    cluster: " << name
      << "\n    user: " << name << "-user\ncurrent-context: " << name << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen = "127.0.0.1:0", dpu_listen = "127.0.0.1:0", control_listen = "127.0.0.1:0";
  std::string tls_dir, token_file, seed_file, log_level = "info", kubeconfig_dir, request_log;
  int dpus = 0, tick_ms = 20;
  uint64_t seed = 1;
  json delay_overrides = json::object();
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto need = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "dpfsim: " << flag << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    try {
      if (a == "--help" || a == "-h") {
        std::cout << kUsage;
        return 0;
      } else if (a == "--listen")
        listen = need("--listen");
      else if (a == "--dpu-listen")
        dpu_listen = need("--dpu-listen");
      else if (a == "--control-listen")
        control_listen = need("--control-listen");
      else if (a == "--dpus")
        dpus = std::stoi(need("--dpus"));
      else if (a == "--tls-dir")
        tls_dir = need("--tls-dir");
      else if (a == "--token-file")
        token_file = need("--token-file");
      else if (a == "--seed")
        seed = std::stoull(need("--seed"));
      else if (a == "--seed-file")
        seed_file = need("--seed-file");
      else if (a == "--log-level")
        log_level = need("--log-level");
      else if (a == "--all-delays-ms")
        delay_overrides["all_ms"] = std::stoi(need("--all-delays-ms"));
      else if (a == "--tick-ms")
        tick_ms = std::max(1, std::stoi(need("--tick-ms")));
      else if (a == "--dpf-version")
        set_profile(need("--dpf-version"));
      else if (a == "--kubeconfig-dir")
        kubeconfig_dir = need("--kubeconfig-dir");
      else if (a == "--request-log")
        request_log = need("--request-log");
      else if (a == "--delay") {
        std::string kv = need("--delay");
        auto eq = kv.find('=');
        if (eq == std::string::npos) throw std::invalid_argument("--delay expects NAME=MS");
        delay_overrides[kv.substr(0, eq)] = std::stoi(kv.substr(eq + 1));
      } else {
        std::cerr << "dpfsim: unknown argument " << a << "\n" << kUsage;
        return 2;
      }
    } catch (const std::exception& e) {
      std::cerr << "dpfsim: bad value for " << a << ": " << e.what() << "\n";
      return 2;
    }
  }
  if (dpus < 0) {
    std::cerr << "dpfsim: --dpus must be >= 0\n";
    return 2;
  }

  auto logger = spdlog::stderr_color_mt("dpfsim");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");

  // Signals are handled by sigwait() in this thread only.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  SimContext ctx(seed);
  if (!request_log.empty()) {
    auto file = std::make_unique<RequestLogFile>();
    std::string error;
    if (!file->open(request_log, &error)) {
      std::cerr << "dpfsim: cannot open --request-log " << error << "\n";
      return 2;
    }
    ctx.reqlog.set_file(std::move(file));
  }
  try {
    ctx.delays.apply(delay_overrides);
  } catch (const std::exception& e) {
    std::cerr << "dpfsim: " << e.what() << "\n";
    return 2;
  }
  ctx.initial_delays = ctx.delays.to_json();
  ctx.initial_dpus = dpus;
  ctx.initial_profile = profile().name;
  if (!token_file.empty()) {
    token_file = std::filesystem::absolute(token_file).string();
    ctx.auth.set_path(token_file);
  }
  if (!seed_file.empty()) {
    std::ifstream in(seed_file);
    if (!in) {
      std::cerr << "dpfsim: cannot read --seed-file " << seed_file << "\n";
      return 2;
    }
    try {
      ctx.seed_file = json::parse(in);
    } catch (const std::exception& e) {
      std::cerr << "dpfsim: bad --seed-file: " << e.what() << "\n";
      return 2;
    }
  }
  try {
    ctx.reset(-1);
  } catch (const std::exception& e) {
    std::cerr << "dpfsim: seeding failed: " << e.what() << "\n";
    return 2;
  }

  TlsFiles tls;
  bool use_tls = !tls_dir.empty();
  if (use_tls) {
    try {
      tls = generate_tls_files(tls_dir);
    } catch (const std::exception& e) {
      std::cerr << "dpfsim: " << e.what() << "\n";
      return 1;
    }
  }

  KubeApiServer mgmt(ctx, ClusterId::Management, use_tls ? &tls : nullptr);
  KubeApiServer dpu(ctx, ClusterId::Dpu, use_tls ? &tls : nullptr);
  ControlApi control(ctx);
  std::string host;
  int port = 0;
  struct Bind {
    const char* flag;
    std::string value;
    std::function<int(const std::string&, int)> fn;
  };
  std::vector<Bind> binds = {
      {"--listen", listen, [&](const std::string& h, int p) { return mgmt.bind(h, p); }},
      {"--dpu-listen", dpu_listen, [&](const std::string& h, int p) { return dpu.bind(h, p); }},
      {"--control-listen", control_listen,
       [&](const std::string& h, int p) { return control.bind(h, p); }},
  };
  for (auto& b : binds) {
    if (!split_hostport(b.value, host, port)) {
      std::cerr << "dpfsim: " << b.flag << " expects HOST:PORT, got " << b.value << "\n";
      return 2;
    }
    if (b.fn(host, port) < 0) {
      std::cerr << "dpfsim: cannot listen on " << b.value << " (" << b.flag << ")\n";
      return 1;
    }
  }

  ControllerManager controllers(ctx, tick_ms);
  controllers.start();
  ctx.controllers = &controllers;
  mgmt.start();
  dpu.start();
  control.start();
  ctx.request_shutdown = [] { kill(getpid(), SIGTERM); };

  if (!kubeconfig_dir.empty()) {
    std::filesystem::create_directories(kubeconfig_dir);
    write_kubeconfig(kubeconfig_dir + "/management.kubeconfig", "dpf-management", mgmt.url(),
                     use_tls ? tls.ca_cert : "", token_file);
    write_kubeconfig(kubeconfig_dir + "/dpu.kubeconfig", "dpu-cluster", dpu.url(),
                     use_tls ? tls.ca_cert : "", token_file);
  }

  ojson ready;
  ready["management"] = mgmt.url();
  ready["dpu"] = dpu.url();
  ready["control"] = control.url();
  if (use_tls) ready["ca_file"] = tls.ca_cert;
  std::string line = ready.dump() + "\n";
  fwrite(line.data(), 1, line.size(), stdout);
  fflush(stdout);
  spdlog::info("dpfsim ready: management={} dpu={} control={} dpus={} tls={} auth={}", mgmt.url(),
               dpu.url(), control.url(), dpus, use_tls, ctx.auth.enabled());

  int sig = 0;
  sigwait(&sigs, &sig);
  spdlog::info("dpfsim shutting down (signal {})", sig);
  ctx.stopping = true;
  ctx.watches.cut(std::nullopt, WatchStream::kDrop, ctx.store);
  controllers.stop();
  spdlog::debug("controllers stopped");
  control.stop();
  spdlog::debug("control API stopped");
  mgmt.stop();
  spdlog::debug("management API stopped");
  dpu.stop();
  spdlog::debug("DPU API stopped");
  spdlog::shutdown();
  return 0;
}
