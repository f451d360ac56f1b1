// SQL-callable wrappers over the pure C++ core. Each converts arguments to
// plain C++ values, runs the core inside cpp_call(), and converts back.
#include "pg_prelude.hpp"

#include <string>
#include <string_view>
#include <utility>

#include "core/dpuservice_render.hpp"
#include "core/helm_chart_data.hpp"
#include "core/identity.hpp"
#include "core/merge_patch.hpp"
#include "core/url.hpp"
#include "guard.hpp"
#include "sql_values.hpp"
#include "wake.hpp"

using extsvc::pg::cpp_call;
using extsvc::pg::PendingError;
using extsvc::pg::raise_if;

extern "C" {
PG_FUNCTION_INFO_V1(nico_extsvc_validate_helm_chart_data);
PG_FUNCTION_INFO_V1(nico_extsvc_dpf_service_name);
PG_FUNCTION_INFO_V1(nico_extsvc_placement_label_key);
PG_FUNCTION_INFO_V1(nico_extsvc_render_dpuservice);
PG_FUNCTION_INFO_V1(nico_extsvc_repo_url_matches);
PG_FUNCTION_INFO_V1(nico_extsvc_mutable_patch);
PG_FUNCTION_INFO_V1(nico_extsvc_identity_mismatch);
PG_FUNCTION_INFO_V1(nico_extsvc_wake);
}

namespace {

using extsvc::pg::jsonb_from_cstring;
using extsvc::pg::jsonb_to_cstring;
using extsvc::pg::text_view;
using extsvc::pg::uuid_to_string;

// Identity functions share their shape: (uuid, version) -> text.
template <class F>
Datum identity_text(FunctionCallInfo fcinfo, F&& fn) {
  const auto uuid = uuid_to_string(PG_GETARG_UUID_P(0));
  const std::string_view version = text_view(PG_GETARG_TEXT_PP(1));
  if (version.empty())
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("version must not be empty"),
                    errhint("Pass the attachable version string, e.g. V1-T1700000000000000.")));
  PendingError err;
  char* out = nullptr;
  cpp_call(err, [&] {
    const std::string s = fn(uuid.view(), version);
    out = pnstrdup(s.data(), s.size());
  });
  raise_if(err);
  PG_RETURN_TEXT_P(cstring_to_text(out));
}

}  // namespace

extern "C" Datum nico_extsvc_validate_helm_chart_data(PG_FUNCTION_ARGS) {
  const std::string_view data = text_view(PG_GETARG_TEXT_PP(0));
  PendingError err;
  char* normalized = nullptr;
  cpp_call(err, [&] {
    const std::string s = extsvc::core::validate_helm_chart_data(data).dump();
    normalized = pnstrdup(s.data(), s.size());
  });
  raise_if(err);
  PG_RETURN_DATUM(jsonb_from_cstring(normalized));
}

extern "C" Datum nico_extsvc_dpf_service_name(PG_FUNCTION_ARGS) {
  return identity_text(fcinfo, [](std::string_view u, std::string_view v) {
    return extsvc::core::dpf_service_name(u, v);
  });
}

extern "C" Datum nico_extsvc_placement_label_key(PG_FUNCTION_ARGS) {
  return identity_text(fcinfo, [](std::string_view u, std::string_view v) {
    return extsvc::core::placement_label_key(u, v);
  });
}

// (service_id uuid, version text, revision integer, normalized data jsonb,
//  namespace text) -> jsonb
// The 0.1.0 install script declares the same symbol with four arguments
// (service_id, version, data, namespace) and no revision; a database still at
// 0.1.0 (before ALTER EXTENSION UPDATE) calls it that way and gets the 0.1.0
// rendering, without the pods' service label and revision annotation.
extern "C" Datum nico_extsvc_render_dpuservice(PG_FUNCTION_ARGS) {
  const bool v010 = PG_NARGS() == 4;
  const int a = v010 ? -1 : 0;  // argument offset after the version
  const auto uuid = uuid_to_string(PG_GETARG_UUID_P(0));
  const std::string_view version = text_view(PG_GETARG_TEXT_PP(1));
  const int revision = v010 ? 1 : PG_GETARG_INT32(2);
  const char* data = jsonb_to_cstring(PG_GETARG_JSONB_P(3 + a));
  const std::string_view ns = text_view(PG_GETARG_TEXT_PP(4 + a));
  PendingError err;
  char* rendered = nullptr;
  cpp_call(err, [&] {
    const auto parsed = nlohmann::json::parse(data);
    auto doc = extsvc::core::render_dpuservice(uuid.view(), version, revision, parsed, ns);
    if (v010) {
      // 0.1.0 rendered neither; keep a tenant's own (possibly empty) maps.
      auto& ds = doc["spec"]["serviceDaemonSet"];
      const auto tenant = parsed.find("serviceDaemonSet");
      const std::pair<const char*, std::string_view> injected[] = {
          {"labels", extsvc::core::kOwnerIdLabel},
          {"annotations", extsvc::core::kRevisionAnnotation}};
      for (const auto& [key, name] : injected) {
        ds[key].erase(std::string(name));
        if (ds[key].empty() && (tenant == parsed.end() || !tenant->contains(key))) ds.erase(key);
      }
    }
    const std::string s = doc.dump();
    rendered = pnstrdup(s.data(), s.size());
  });
  raise_if(err);
  PG_RETURN_DATUM(jsonb_from_cstring(rendered));
}

// (allow-list entry url, repo url) -> boolean
extern "C" Datum nico_extsvc_repo_url_matches(PG_FUNCTION_ARGS) {
  const std::string_view entry = text_view(PG_GETARG_TEXT_PP(0));
  const std::string_view url = text_view(PG_GETARG_TEXT_PP(1));
  PendingError err;
  bool matches = false;
  cpp_call(err, [&] { matches = extsvc::core::allowlist_matches(entry, url); });
  raise_if(err);
  PG_RETURN_BOOL(matches);
}

// (live jsonb, desired jsonb) -> the minimal merge patch of NICo-owned fields
extern "C" Datum nico_extsvc_mutable_patch(PG_FUNCTION_ARGS) {
  const char* live = jsonb_to_cstring(PG_GETARG_JSONB_P(0));
  const char* desired = jsonb_to_cstring(PG_GETARG_JSONB_P(1));
  PendingError err;
  char* patch = nullptr;
  cpp_call(err, [&] {
    const std::string s = extsvc::core::dpuservice_mutable_patch(nlohmann::json::parse(live),
                                                                 nlohmann::json::parse(desired))
                              .dump();
    patch = pnstrdup(s.data(), s.size());
  });
  raise_if(err);
  PG_RETURN_DATUM(jsonb_from_cstring(patch));
}

// (live jsonb, service_id, version, namespace) -> path of the first identity
// field that differs, or NULL when the live object is ours.
extern "C" Datum nico_extsvc_identity_mismatch(PG_FUNCTION_ARGS) {
  const char* live = jsonb_to_cstring(PG_GETARG_JSONB_P(0));
  const auto uuid = uuid_to_string(PG_GETARG_UUID_P(1));
  const std::string_view version = text_view(PG_GETARG_TEXT_PP(2));
  const std::string_view ns = text_view(PG_GETARG_TEXT_PP(3));
  PendingError err;
  char* path = nullptr;
  cpp_call(err, [&] {
    const auto m =
        extsvc::core::identity_mismatch(nlohmann::json::parse(live), uuid.view(), version, ns);
    if (m) path = pnstrdup(m->data(), m->size());
  });
  raise_if(err);
  if (path == nullptr) PG_RETURN_NULL();
  PG_RETURN_TEXT_P(cstring_to_text(path));
}

extern "C" Datum nico_extsvc_wake(PG_FUNCTION_ARGS) {
  (void)fcinfo;
  extsvc::pg::wake_workers_at_commit();
  PG_RETURN_VOID();
}
