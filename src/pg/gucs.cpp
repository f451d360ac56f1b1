#include "pg_prelude.hpp"

#include "gucs.hpp"

namespace extsvc::pg {

Gucs gucs{};

namespace {

const struct config_enum_entry kLogLevels[] = {
    {"debug", 1, false}, {"info", 2, false}, {"warning", 3, false},
    {"error", 4, false}, {"off", 6, false},  {nullptr, 0, false},
};

// The kernel takes a slice of 0.1-100 ms; 0 leaves its default.
bool check_sched_slice(int* newval, void**, GucSource) {
  if (*newval == 0 || *newval >= 100) return true;
  GUC_check_errdetail("extsvc.worker_sched_slice: %d microseconds is below the kernel's 100.",
                      *newval);
  GUC_check_errhint("Use 0 (the kernel's default) or 100 to 100000 microseconds.");
  return false;
}

void define_string(const char* name, const char* desc, char** var, const char* def, GucContext ctx,
                   GucStringCheckHook check = nullptr) {
  DefineCustomStringVariable(name, desc, nullptr, var, def, ctx, 0, check, nullptr, nullptr);
}

void define_int(const char* name, const char* desc, int* var, int def, int min, int max,
                GucContext ctx, int flags = 0, GucIntCheckHook check = nullptr) {
  DefineCustomIntVariable(name, desc, nullptr, var, def, min, max, ctx, flags, check, nullptr,
                          nullptr);
}

void define_bool(const char* name, const char* desc, bool* var, bool def, GucContext ctx) {
  DefineCustomBoolVariable(name, desc, nullptr, var, def, ctx, 0, nullptr, nullptr, nullptr);
}

// The GUC machinery copies a variable's name but keeps the pointer to its
// description: both must outlive the postmaster context of _PG_init, which a
// backend deletes after fork.
char* lasting(const char* s) {
  return MemoryContextStrdup(TopMemoryContext, s);
}

void define_cluster(const char* prefix, const char* what, ClusterGucs* c) {
  char name[64];
  char desc[160];
  snprintf(name, sizeof name, "extsvc.%skubeconfig", prefix);
  snprintf(desc, sizeof desc, "Path of a kubeconfig file for the %s.", what);
  define_string(lasting(name), lasting(desc), &c->kubeconfig, "", PGC_SIGHUP);
  snprintf(name, sizeof name, "extsvc.%skube_server", prefix);
  snprintf(desc, sizeof desc, "API server URL of the %s (used when no kubeconfig is set).", what);
  define_string(lasting(name), lasting(desc), &c->server, "", PGC_SIGHUP);
  snprintf(name, sizeof name, "extsvc.%skube_ca_file", prefix);
  snprintf(desc, sizeof desc, "PEM CA bundle that signs the %s API server certificate.", what);
  define_string(lasting(name), lasting(desc), &c->ca_file, "", PGC_SIGHUP);
  snprintf(name, sizeof name, "extsvc.%skube_token_file", prefix);
  snprintf(desc, sizeof desc, "File holding the bearer token for the %s; re-read on rotation.",
           what);
  define_string(lasting(name), lasting(desc), &c->token_file, "", PGC_SIGHUP);
}

}  // namespace

void define_gucs() {
  // PostgreSQL refuses PGC_POSTMASTER variables after startup with FATAL, so
  // the worker-only ones exist only when the library is preloaded; a plain
  // CREATE EXTENSION or LOAD gets the SQL API without them.
  if (process_shared_preload_libraries_in_progress) {
    define_string("extsvc.database", "Database the nico_extsvc workers connect to.", &gucs.database,
                  "postgres", PGC_POSTMASTER);
    define_int("extsvc.workers", "Number of nico_extsvc background workers.", &gucs.workers, 2, 0,
               16, PGC_POSTMASTER);
  }
  define_bool("extsvc.enabled", "Master switch: workers make Kubernetes calls only while on.",
              &gucs.enabled, true, PGC_SIGHUP);
  define_cluster("", "DPF management cluster", &gucs.management);
  define_cluster("dpu_", "DPU cluster", &gucs.dpu);
  define_bool("extsvc.kube_insecure_skip_verify",
              "Skip TLS verification of API servers (testing only; refused with a CA file).",
              &gucs.insecure_skip_verify, false, PGC_SIGHUP);
  define_string("extsvc.namespace", "Management-cluster namespace of the DPUService objects.",
                &gucs.ns, "dpf-operator-system", PGC_SIGHUP);
  define_int("extsvc.resync_interval", "Interval of the drift-detecting resync pass.",
             &gucs.resync_interval_s, 300, 1, 86400, PGC_SIGHUP, GUC_UNIT_S);
  define_int("extsvc.relist_interval",
             "Least time between two re-lists of every watch cache at a resync (0 = at every "
             "resync); in between, the resync compares the caches the watch keeps current.",
             &gucs.relist_interval_s, 3600, 0, 604800, PGC_SIGHUP, GUC_UNIT_S);
  define_int("extsvc.retry_base", "First retry delay after a transient failure.",
             &gucs.retry_base_ms, 500, 1, 3600000, PGC_SIGHUP, GUC_UNIT_MS);
  define_int("extsvc.retry_cap", "Upper bound of the exponential retry delay.", &gucs.retry_cap_s,
             300, 1, 86400, PGC_SIGHUP, GUC_UNIT_S);
  define_int("extsvc.lease_time", "How long a claimed work row stays leased to one worker.",
             &gucs.lease_time_s, 60, 5, 3600, PGC_SIGHUP, GUC_UNIT_S, check_lease_time);
  define_int("extsvc.worker_sched_slice",
             "Scheduling slice the workers ask Linux for, in microseconds (0 = the kernel's "
             "default): a short one lets a woken worker run before the backends of a burst.",
             &gucs.worker_sched_slice_us, 300, 0, 100000, PGC_SIGHUP, 0, check_sched_slice);
  define_int("extsvc.batch_size", "Work rows claimed per worker iteration.", &gucs.batch_size, 32,
             1, 1000, PGC_SIGHUP);
  DefineCustomRealVariable(
      "extsvc.kube_qps", "Client-side request rate limit per worker and cluster (0 = none).",
      nullptr, &gucs.kube_qps, 50.0, 0.0, 100000.0, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
  define_int("extsvc.kube_burst", "Client-side request burst per worker and cluster.",
             &gucs.kube_burst, 100, 1, 100000, PGC_SIGHUP);
  define_int("extsvc.connect_timeout", "TCP/TLS connect timeout of Kubernetes calls.",
             &gucs.connect_timeout_ms, 5000, 100, 600000, PGC_SIGHUP, GUC_UNIT_MS);
  define_int("extsvc.http_timeout", "Total timeout of one Kubernetes call.", &gucs.http_timeout_ms,
             10000, 100, 3600000, PGC_SIGHUP, GUC_UNIT_MS, check_http_timeout);
  DefineCustomEnumVariable("extsvc.log_level", "Verbosity of the worker's log lines.", nullptr,
                           &gucs.log_level, 2, kLogLevels, PGC_SIGHUP, 0, nullptr, nullptr,
                           nullptr);
  define_bool("extsvc.refuse_pod_services_on_dpf_hosts",
              "Refuse new KUBERNETES_POD attachments on DPF-managed instances (NICo's rule).",
              &gucs.refuse_pod_services_on_dpf_hosts, false, PGC_SUSET);
  define_bool(
      "extsvc.allow_privileged",
      "Accept security.privileged: true from tenants (callers without extsvc_admin rights).",
      &gucs.allow_privileged, true, PGC_SUSET);
  define_bool("extsvc.enforce_chart_allowlist",
              "Refuse Helm chart repositories that are not on extsvc.chart_allowlist.",
              &gucs.enforce_chart_allowlist, true, PGC_SUSET);
  define_int("extsvc.observation_max_age",
             "Age after which a per-DPU observation is stale and reads as UNKNOWN.",
             &gucs.observation_max_age_s, 900, 1, 604800, PGC_SUSET, GUC_UNIT_S);
  define_int("extsvc.kube_max_response_size",
             "Largest Kubernetes response body accepted for a single object.",
             &gucs.kube_max_response_kb, 4096, 64, 524288, PGC_SIGHUP, GUC_UNIT_KB);
  define_int("extsvc.kube_max_list_size",
             "Largest total of Kubernetes response bodies accepted for one paginated LIST.",
             &gucs.kube_max_list_kb, 65536, 64, 524288, PGC_SIGHUP, GUC_UNIT_KB);
  define_bool("extsvc.kube_allow_insecure_http",
              "Allow sending bearer tokens to http:// API servers (test clusters only).",
              &gucs.kube_allow_insecure_http, false, PGC_SIGHUP);
  define_int("extsvc.lease_margin",
             "Safety added to http_timeout: a Kubernetes call starts only while that much of the "
             "claim's lease remains.",
             &gucs.lease_margin_ms, 2000, 0, 600000, PGC_SIGHUP, GUC_UNIT_MS, check_lease_margin);
  define_int("extsvc.worker_lock_timeout",
             "lock_timeout of the workers' own transactions (0 = none).",
             &gucs.worker_lock_timeout_ms, 5000, 0, 3600000, PGC_SIGHUP, GUC_UNIT_MS);
  define_int("extsvc.worker_statement_timeout",
             "statement_timeout of the workers' own transactions (0 = none).",
             &gucs.worker_statement_timeout_ms, 30000, 0, 3600000, PGC_SIGHUP, GUC_UNIT_MS);
  define_bool("extsvc.watch",
              "Observe the clusters through LIST+WATCH caches held by worker 0, which then does "
              "every placement pass (off: every worker polls with GETs).",
              &gucs.watch, true, PGC_SIGHUP);
  define_bool("extsvc.hand_over",
              "Hand the rows of the services a transaction creates to a worker when it commits "
              "(leased in that transaction), so the first request needs no claim.",
              &gucs.hand_over, true, PGC_SIGHUP);
  define_int("extsvc.watch_timeout",
             "timeoutSeconds of a watch request (each asks for between this and twice this).",
             &gucs.watch_timeout_s, 300, 5, 3600, PGC_SIGHUP, GUC_UNIT_S);
  // issue 25: one writer per site (docs/worker.md, docs/operator-guide.md "High availability")
  define_string("extsvc.site_id",
                "This site's id: the nico/site label of its DPUServices and the name of its Lease "
                "nico-extsvc-<site_id>; the worker writes nothing while it is unset.",
                &gucs.site_id, "", PGC_SIGHUP, check_site_id);
  define_int("extsvc.lease_duration",
             "How long a candidate waits for the site Lease's holder to renew before taking it.",
             &gucs.lease_duration_ms, 15000, 1000, 3600000, PGC_SIGHUP, GUC_UNIT_MS,
             check_lease_duration);
  define_int("extsvc.lease_renew_deadline",
             "How long the site Lease's holder keeps writing without a successful renewal.",
             &gucs.lease_renew_deadline_ms, 10000, 500, 3600000, PGC_SIGHUP, GUC_UNIT_MS,
             check_lease_renew_deadline);
  define_int("extsvc.lease_retry_period",
             "Interval of the site Lease's acquire and renew attempts.",
             &gucs.lease_retry_period_ms, 2000, 100, 3600000, PGC_SIGHUP, GUC_UNIT_MS,
             check_lease_retry_period);
  define_int("extsvc.orphan_cleanup_max",
             "Most orphaned DPUServices one resync deletes, and most DPUs whose labels it may "
             "strip, without an admin's confirmation (-1: 10, or 10 % of what the site owns).",
             &gucs.orphan_cleanup_max, -1, -1, 1000000, PGC_SIGHUP);
  gucs_defined();
  MarkGUCPrefixReserved("extsvc");
}

}  // namespace extsvc::pg

extern "C" {
PG_FUNCTION_INFO_V1(nico_extsvc_setting);
}

// extsvc._setting(name text) -> text: the SQL's only way to read an extsvc.*
// setting (issue 29). Being a C function of this library, its first call in
// a session loads the library, and loading defines the settings: PostgreSQL
// then re-applies any placeholder value a session set before with the
// privileges of the role that set it (a non-superuser's SET of a
// superuser-only rule is dropped with a WARNING), and MarkGUCPrefixReserved
// refuses new placeholders. current_setting() in SQL, called before anything
// loaded the library, would have read the placeholder instead.
extern "C" Datum nico_extsvc_setting(PG_FUNCTION_ARGS) {
  const char* name = text_to_cstring(PG_GETARG_TEXT_PP(0));
  if (strncmp(name, "extsvc.", 7) != 0)
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("extsvc._setting reads extsvc.* settings only"),
                    errdetail("name: %.64s", name)));
  // as current_setting() shows it (units included), for the SQL's casts
  const char* value = GetConfigOptionByName(name, nullptr, true);
  if (value == nullptr)
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                    errmsg("unrecognized configuration parameter \"%.64s\"", name)));
  PG_RETURN_TEXT_P(cstring_to_text(value));
}
