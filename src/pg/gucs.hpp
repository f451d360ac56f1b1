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
  int relist_interval_s;
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
  bool hand_over;                   // extsvc.hand_over: creates handed to a worker at commit
  int watch_timeout_s;              // extsvc.watch_timeout
  int worker_sched_slice_us;        // extsvc.worker_sched_slice (0 = the kernel's default)
  // issue 25: one writer per site
  char* site_id;                // extsvc.site_id ('' = unset: the worker writes nothing)
  int lease_duration_ms;        // extsvc.lease_duration
  int lease_renew_deadline_ms;  // extsvc.lease_renew_deadline
  int lease_retry_period_ms;    // extsvc.lease_retry_period
  int orphan_cleanup_max;       // extsvc.orphan_cleanup_max (-1: 10 or 10 %)
};

extern Gucs gucs;

// Defines every GUC; called once from _PG_init.
void define_gucs();

// The check hooks of issue 25 (gucs_site.cpp): extsvc.site_id must be usable, and the timing
// settings must work together (core/site_timing.hpp). The cross check runs where a value is set
// by a statement (ALTER SYSTEM, SET): there the other settings are the ones in force. A reload
// sets the file's values one at a time, so the check there is the processes' own
// (site_timing_in_force()): a set that does not work together is refused as a whole.
bool check_site_id(char** newval, void** extra, GucSource source);
bool check_http_timeout(int* newval, void** extra, GucSource source);
bool check_lease_margin(int* newval, void** extra, GucSource source);
bool check_lease_time(int* newval, void** extra, GucSource source);
bool check_lease_duration(int* newval, void** extra, GucSource source);
bool check_lease_renew_deadline(int* newval, void** extra, GucSource source);
bool check_lease_retry_period(int* newval, void** extra, GucSource source);
// Set once every GUC is defined (the cross checks read the others).
void gucs_defined();

}  // namespace extsvc::pg
