// SQL-callable wrappers over the pure C++ core, each declared with
// EXTSVC_SQL_FUNCTION (guard.hpp): read the arguments, compute in C++ under
// the guard, emit the result.
#include "pg_prelude.hpp"

#include <optional>
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
#include "hand_over.hpp"
#include "shared_memory.hpp"

namespace {

using extsvc::pg::jsonb_from_cstring;
using extsvc::pg::jsonb_to_cstring;
using extsvc::pg::text_view;
using extsvc::pg::uuid_to_string;
using extsvc::pg::UuidText;

// Arguments as trivially destructible views: they stay valid when an
// argument conversion below raises.
struct IdentityArgs {
  UuidText uuid;
  std::string_view version;
};

IdentityArgs read_identity(FunctionCallInfo fcinfo) {
  IdentityArgs a{uuid_to_string(PG_GETARG_UUID_P(0)), text_view(PG_GETARG_TEXT_PP(1))};
  if (a.version.empty())
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("version must not be empty"),
                    errhint("Pass the attachable version string, e.g. V1-T1700000000000000.")));
  return a;
}

Datum emit_text(FunctionCallInfo fcinfo, char* out) {
  if (out == nullptr) PG_RETURN_NULL();
  PG_RETURN_TEXT_P(cstring_to_text(out));
}

Datum emit_jsonb(FunctionCallInfo fcinfo, char* out) {
  (void)fcinfo;
  return jsonb_from_cstring(out);
}

Datum emit_bool(FunctionCallInfo fcinfo, bool out) {
  (void)fcinfo;
  PG_RETURN_BOOL(out);
}

struct OneText {
  std::string_view a;
};
struct TwoTexts {
  std::string_view a, b;
};
struct TwoJsons {
  const char* live;
  const char* desired;
};
struct RenderArgs {
  UuidText uuid;
  std::string_view version;
  int revision;
  const char* data;
  std::string_view ns;
  bool v010;                 // called through the 0.1.0 declaration (four arguments)
  std::string_view site_id;  // 0.3.0 (six arguments): nico/site on the metadata
};
struct MismatchArgs {
  const char* live;
  UuidText uuid;
  std::string_view version, ns;
};

}  // namespace

EXTSVC_SQL_FUNCTION(
    nico_extsvc_validate_helm_chart_data,
    [](FunctionCallInfo fcinfo) { return OneText{text_view(PG_GETARG_TEXT_PP(0))}; },
    [](const OneText& in) { return extsvc::core::validate_helm_chart_data(in.a).dump(); },
    emit_jsonb)

EXTSVC_SQL_FUNCTION(
    nico_extsvc_dpf_service_name, read_identity,
    [](const IdentityArgs& in) {
      return extsvc::core::dpf_service_name(in.uuid.view(), in.version);
    },
    emit_text)

EXTSVC_SQL_FUNCTION(
    nico_extsvc_placement_label_key, read_identity,
    [](const IdentityArgs& in) {
      return extsvc::core::placement_label_key(in.uuid.view(), in.version);
    },
    emit_text)

// (service_id uuid, version text, revision integer, normalized data jsonb,
//  namespace text[, site_id text]) -> jsonb
// 0.3.0 declares it with the site id (issue 25: nico/site on the metadata); the 0.2.0 install
// script with five arguments, rendering as 0.2.0 did (no site label).
// The 0.1.0 install script declares the same symbol with four arguments
// (service_id, version, data, namespace) and no revision; a database still at
// 0.1.0 (before ALTER EXTENSION UPDATE) calls it that way and gets the 0.1.0
// rendering, without the pods' service label and revision annotation.
EXTSVC_SQL_FUNCTION(
    nico_extsvc_render_dpuservice,
    [](FunctionCallInfo fcinfo) {
      const bool v010 = PG_NARGS() == 4;
      const int a = v010 ? -1 : 0;  // argument offset after the version
      return RenderArgs{uuid_to_string(PG_GETARG_UUID_P(0)),
                        text_view(PG_GETARG_TEXT_PP(1)),
                        v010 ? 1 : PG_GETARG_INT32(2),
                        jsonb_to_cstring(PG_GETARG_JSONB_P(3 + a)),
                        text_view(PG_GETARG_TEXT_PP(4 + a)),
                        v010,
                        PG_NARGS() >= 6 ? text_view(PG_GETARG_TEXT_PP(5)) : std::string_view()};
    },
    [](const RenderArgs& in) {
      const auto parsed = nlohmann::json::parse(in.data);
      auto doc = extsvc::core::render_dpuservice(in.uuid.view(), in.version, in.revision, parsed,
                                                 in.ns, in.site_id);
      if (in.v010) {
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
      return doc.dump();
    },
    emit_jsonb)

// (allow-list entry url, repo url) -> boolean
EXTSVC_SQL_FUNCTION(
    nico_extsvc_repo_url_matches,
    [](FunctionCallInfo fcinfo) {
      return TwoTexts{text_view(PG_GETARG_TEXT_PP(0)), text_view(PG_GETARG_TEXT_PP(1))};
    },
    [](const TwoTexts& in) { return extsvc::core::allowlist_matches(in.a, in.b); }, emit_bool)

// (live jsonb, desired jsonb) -> the minimal merge patch of NICo-owned fields
EXTSVC_SQL_FUNCTION(
    nico_extsvc_mutable_patch,
    [](FunctionCallInfo fcinfo) {
      return TwoJsons{jsonb_to_cstring(PG_GETARG_JSONB_P(0)),
                      jsonb_to_cstring(PG_GETARG_JSONB_P(1))};
    },
    [](const TwoJsons& in) {
      return extsvc::core::dpuservice_mutable_patch(nlohmann::json::parse(in.live),
                                                    nlohmann::json::parse(in.desired))
          .dump();
    },
    emit_jsonb)

// (live jsonb, service_id, version, namespace) -> path of the first identity
// field that differs, or NULL when the live object is ours.
EXTSVC_SQL_FUNCTION(
    nico_extsvc_identity_mismatch,
    [](FunctionCallInfo fcinfo) {
      return MismatchArgs{jsonb_to_cstring(PG_GETARG_JSONB_P(0)),
                          uuid_to_string(PG_GETARG_UUID_P(1)), text_view(PG_GETARG_TEXT_PP(2)),
                          text_view(PG_GETARG_TEXT_PP(3))};
    },
    [](const MismatchArgs& in) {
      return extsvc::core::identity_mismatch(nlohmann::json::parse(in.live), in.uuid.view(),
                                             in.version, in.ns);
    },
    emit_text)

extern "C" {
PG_FUNCTION_INFO_V1(nico_extsvc_wake);
}
// No C++ at all: a plain PostgreSQL function.
extern "C" Datum nico_extsvc_wake(PG_FUNCTION_ARGS) {
  (void)fcinfo;
  extsvc::pg::wake_workers_at_commit();
  PG_RETURN_VOID();
}

extern "C" {
PG_FUNCTION_INFO_V1(nico_extsvc_hand_over);
}
// No C++ at all: a plain PostgreSQL function (STRICT: the id is never NULL).
extern "C" Datum nico_extsvc_hand_over(PG_FUNCTION_ARGS) {
  extsvc::pg::hand_over_at_commit(PG_GETARG_UUID_P(0));
  PG_RETURN_VOID();
}
