// Configuration parameters (GUCs) of nico_extsvc. Names are part of the
// operator contract (SPEC section 3); docs/worker.md ("GUCs") documents each.
#pragma once

namespace extsvc::pg {

struct ClusterGucs {
  char* kubeconfig;
  char* server;
  char* ca_file;
  char* token_file;
};

struct Gucs {
  char* database;
  int workers;
  bool enabled;
  ClusterGucs management;
  ClusterGucs dpu;
  bool insecure_skip_verify;
  char* ns;
  int resync_interval_s;
  int retry_base_ms;
  int retry_cap_s;
  int lease_time_s;
  int batch_size;
  double kube_qps;
  int kube_burst;
  int connect_timeout_ms;
  int http_timeout_ms;
  int log_level;  // spdlog::level::level_enum value
  bool enforce_chart_allowlist;
  bool refuse_pod_services_on_dpf_hosts;  // read by SQL through extsvc._setting()
  bool allow_privileged;                  // extsvc.allow_privileged, read by SQL the same way
  int observation_max_age_s;
  int kube_max_response_kb;         // extsvc.kube_max_response_size
  int kube_max_list_kb;             // extsvc.kube_max_list_size
  bool kube_allow_insecure_http;    // extsvc.kube_allow_insecure_http
  int lease_margin_ms;              // extsvc.lease_margin (added to the call timeouts)
  int worker_lock_timeout_ms;       // extsvc.worker_lock_timeout
  int worker_statement_timeout_ms;  // extsvc.worker_statement_timeout
  bool watch;                       // extsvc.watch: observe through LIST+WATCH caches
  int watch_timeout_s;              // extsvc.watch_timeout
};

extern Gucs gucs;

// Defines every GUC; called once from _PG_init.
void define_gucs();

}  // namespace extsvc::pg
