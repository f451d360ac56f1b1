#include "controller/runtime.hpp"

#include <spdlog/spdlog.h>

#include <variant>

#include "controller/cache_observer.hpp"
#include "kube/error.hpp"

namespace extsvc::controller {

Runtime::Runtime(const Settings& s, const Hooks& hooks)
    : ns_(s.ns), site_id_(s.site_id), watch_timeout_s_(s.watch_timeout_s) {
  auto wire = [&](kube::Client& c, const char* cluster) {
    c.budget = hooks.budget;
    if (hooks.observer != nullptr) c.set_observer(hooks.observer, cluster);
  };
  if (auto cfg = cluster_config(s, s.management)) {
    management_ = std::make_unique<kube::Client>(*cfg);
    wire(*management_, "management");
    reconciler_ = std::make_unique<reconcile::ServiceReconciler>(*management_, ns_, site_id_);
    reconciler_->set_dpf_api(&dpf_api_);
    spdlog::info("management cluster configured: {}", cfg->server);
  }
  const std::string management_error = config_error_;
  if (!s.dpu.empty()) {
    if (auto dcfg = cluster_config(s, s.dpu)) {
      dpu_ = std::make_unique<kube::Client>(*dcfg);
      wire(*dpu_, "dpu");
      spdlog::info("DPU cluster configured: {}", dcfg->server);
    } else {
      dpu_config_error_ = config_error_;
      spdlog::warn("DPU cluster not usable ({}); DPU states will be UNKNOWN", config_error_);
    }
  } else {
    spdlog::info("no DPU cluster configured; DPU states will be UNKNOWN");
  }
  config_error_ = management_error;
}

Runtime::~Runtime() {
  // the cache and its multi go first
  if (management_) management_->use_multi(nullptr);
  if (dpu_) dpu_->use_multi(nullptr);
}

std::unique_ptr<reconcile::DpuReconciler> Runtime::dpu_reconciler() {
  auto r = cache_ ? std::make_unique<reconcile::DpuReconciler>(
                        *management_, ns_, std::make_unique<CacheObserver>(*cache_))
                  : std::make_unique<reconcile::DpuReconciler>(*management_, dpu_.get(), ns_);
  r->set_dpf_api(&dpf_api_);
  return r;
}

bool Runtime::check_dpf_api() {
  if (!management_) return false;
  const auto now = std::chrono::steady_clock::now();
  const uint64_t connects = management_->stats().connects;
  if (dpf_api_.known && connects == connects_at_check_) return false;
  if (now < next_api_check_) return false;
  next_api_check_ = now + std::chrono::seconds(5);
  // The apiserver's OpenAPI v3 document per group-version (404: the group-version is not served)
  auto read = [&](const char* gv, nlohmann::json& doc) {
    auto got = management_->get(std::string("/openapi/v3/apis/") + gv);
    if (got.ok()) {
      doc = got.value().body;
      return true;
    }
    if (got.kind() == kube::ErrorKind::kNotFound) return true;  // doc stays null
    if (api_check_warned_) {
      spdlog::debug("reading the DPF API ({}): {}", gv, kube::describe(got.error()));
    } else {
      spdlog::warn("reading the DPF API ({}): {}; retried every 5 s", gv,
                   kube::describe(got.error()));
      api_check_warned_ = true;
    }
    return false;
  };
  nlohmann::json svc, provisioning;
  if (!read("svc.dpu.nvidia.com/v1alpha1", svc) ||
      !read("provisioning.dpu.nvidia.com/v1alpha1", provisioning))
    return false;  // keeps what it knew; tried again in 5 s
  if (api_check_warned_) spdlog::info("reading the DPF API works again");
  api_check_warned_ = false;
  const core::DpfApiLevel level = core::dpf_api_level(svc, provisioning);
  if (!dpf_api_.known || level.missing() != dpf_api_.missing()) {
    if (level.sufficient())
      spdlog::info("DPF API: {} (DPUService.spec.security, DPUDevice.spec.cluster served)",
                   level.level());
    else
      spdlog::warn("DPF API: {}", core::DpfApiLevel::message(level.missing()));
  }
  dpf_api_ = level;
  connects_at_check_ = management_->stats().connects;
  return true;
}

void Runtime::start_watching() {
  if (cache_ || !management_) return;
  CacheSettings cs;
  cs.ns = ns_;
  cs.watch_timeout_s = watch_timeout_s_;
  cache_ = std::make_unique<ClusterCache>(*management_, dpu_.get(), cs);
  // the writes (and reads) of the watcher run on the watches' multi: the streams keep flowing
  // while one is in flight (issue 24, part 4.3)
  management_->use_multi(&cache_->multi());
  if (dpu_) dpu_->use_multi(&cache_->multi());
  spdlog::info("watching the clusters: LIST then WATCH of DPUServices, DPUDevices{}",
               dpu_ ? ", Nodes, pods and FailedCreate events" : "");
}

uint64_t Runtime::fenced_writes() const {
  return (management_ ? management_->stats().fenced : 0) + (dpu_ ? dpu_->stats().fenced : 0);
}

uint64_t Runtime::requests() const {
  return (management_ ? management_->stats().requests : 0) + (dpu_ ? dpu_->stats().requests : 0);
}

uint64_t Runtime::errors() const {
  return (management_ ? management_->stats().errors : 0) + (dpu_ ? dpu_->stats().errors : 0);
}

std::optional<kube::ClusterConfig> Runtime::cluster_config(const Settings& s,
                                                           const ClusterSettings& c) {
  // Every message names the setting to fix (issue 28): the settings of this cluster are
  // extsvc.<prefix>kubeconfig, extsvc.<prefix>kube_server, ...
  const std::string p = &c == &s.dpu ? "extsvc.dpu_" : "extsvc.";
  kube::ConfigNames names;
  names.insecure = "extsvc.kube_insecure_skip_verify";
  names.allow_insecure_http = "set extsvc.kube_allow_insecure_http";
  names.qps = "extsvc.kube_qps";
  names.burst = "extsvc.kube_burst";
  names.timeouts = "extsvc.connect_timeout and extsvc.http_timeout";
  kube::ClusterConfig cfg;
  if (!c.kubeconfig.empty()) {
    auto loaded = kube::load_kubeconfig(c.kubeconfig);
    if (auto* err = std::get_if<std::string>(&loaded)) {
      config_error_ = p + "kubeconfig: " + *err;
      return std::nullopt;
    }
    cfg = std::get<kube::ClusterConfig>(loaded);
    names.server = "the server of " + p + "kubeconfig (" + c.kubeconfig + ")";
    names.ca_file = "a certificate-authority (" + p + "kubeconfig)";
    names.token_file = "the bearer token of " + p + "kubeconfig";
  } else if (!c.server.empty()) {
    cfg.server = c.server;
    cfg.ca_file = c.ca_file;
    cfg.token_file = c.token_file;
    names.server = p + "kube_server";
    names.ca_file = p + "kube_ca_file";
    names.token_file = "a bearer token (" + p + "kube_token_file)";
  } else {
    config_error_ = "no cluster configured (set " + p + "kubeconfig or " + p + "kube_server)";
    return std::nullopt;
  }
  cfg.insecure_skip_verify = s.insecure;
  cfg.qps = s.qps;
  cfg.burst = s.burst;
  cfg.connect_timeout_ms = s.connect_timeout_ms;
  cfg.timeout_ms = s.timeout_ms;
  cfg.max_response_bytes = s.max_response_bytes;
  cfg.max_list_bytes = s.max_list_bytes;
  cfg.allow_insecure_http = s.allow_insecure_http;
  if (!s.user_agent.empty()) cfg.user_agent = s.user_agent;
  if (auto err = kube::validate(cfg, names)) {
    config_error_ = *err;
    return std::nullopt;
  }
  return cfg;
}

}  // namespace extsvc::controller
