// From a path to a Target (classify) and from a Target and a verb to the store (dispatch).
#include <httplib.h>

#include "api_server_internal.h"
#include "discovery.h"
#include "kube_errors.h"
#include "profile.h"
#include "table.h"
#include "validation.h"

namespace dpfsim {

namespace {

using api_detail::delete_options;
using api_detail::list_options;
using api_detail::send;

std::string list_body(const ResourceInfo& ri, const ListResult& lr) {
  json md{{"resourceVersion", lr.resource_version}};
  if (!lr.cont.empty()) md["continue"] = lr.cont;
  if (lr.remaining >= 0 && !lr.cont.empty()) md["remainingItemCount"] = lr.remaining;
  std::string out;
  out.reserve(64 + lr.items.size() * 1024);
  out += "{\"apiVersion\":\"" + ri.api_version() + "\",\"items\":[";
  for (size_t i = 0; i < lr.items.size(); ++i) {
    if (i) out += ',';
    out += lr.items[i]->dump();
  }
  out += "],\"kind\":\"" + ri.list_kind() + "\",\"metadata\":" + md.dump() + "}";
  return out;
}

// Go's %q-style quoting of a warning text inside the Warning header value.
std::string json_escape_quotes(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

bool wants_table(const httplib::Request& req) {
  return req.get_header_value("Accept").find("as=Table") != std::string::npos;
}

}  // namespace

KubeApiServer::Target KubeApiServer::classify(const std::string& path) const {
  Target t;
  if (path == "/healthz" || path == "/livez" || path == "/readyz" ||
      starts_with(path, "/healthz/") || starts_with(path, "/livez/") ||
      starts_with(path, "/readyz/")) {
    t.kind = Target::Health;
    return t;
  }
  if (starts_with(path, "/openapi")) {
    t.kind = Target::OpenApi;
    return t;
  }
  if (auto d = discovery_document(cluster_, path, address_)) {
    t.kind = Target::Discovery;
    t.doc = *d;
    return t;
  }
  std::vector<std::string> segs;
  for (auto& s : split(path, '/'))
    if (!s.empty()) segs.push_back(s);
  std::string group, version;
  size_t i = 0;
  if (segs.size() >= 3 && segs[0] == "api") {
    version = segs[1];
    i = 2;
  } else if (segs.size() >= 4 && segs[0] == "apis") {
    group = segs[1];
    version = segs[2];
    i = 3;
  } else {
    return t;
  }
  std::vector<std::string> rest(segs.begin() + static_cast<long>(i), segs.end());
  if (rest.size() >= 3 && rest[0] == "namespaces") {
    const ResourceInfo* ri = find_resource(cluster_, group, version, rest[2]);
    if (ri && !served(*ri)) ri = nullptr;
    if (ri && ri->namespaced) {
      if (rest.size() > 5) return t;
      t.ri = ri;
      t.ns = rest[1];
      if (rest.size() >= 4) t.name = rest[3];
      if (rest.size() == 5) t.sub = rest[4];
    }
  }
  if (!t.ri) {
    if (rest.empty() || rest.size() > 3) return t;
    const ResourceInfo* ri = find_resource(cluster_, group, version, rest[0]);
    if (!ri || !served(*ri)) return t;
    if (ri->namespaced && rest.size() > 1) return t;
    t.ri = ri;
    if (rest.size() >= 2) t.name = rest[1];
    if (rest.size() == 3) t.sub = rest[2];
  }
  if (!t.sub.empty() && !(t.sub == "status" && t.ri->has_status)) {
    t.ri = nullptr;
    return t;
  }
  t.kind = Target::Resource;
  return t;
}

void KubeApiServer::dispatch(const httplib::Request& req, httplib::Response& res, const Target& t,
                             const std::string& verb) {
  switch (t.kind) {
    case Target::Health:
      res.status = 200;
      res.set_content("ok", "text/plain; charset=utf-8");
      return;
    case Target::Discovery:
      if (req.method != "GET")
        throw err_method_not_allowed(
            "the server does not allow this method on the requested resource");
      send(res, 200, t.doc);
      return;
    case Target::OpenApi: {
      if (req.method != "GET")
        throw err_method_not_allowed("the server does not allow this method");
      std::string doc;
      if (req.path == "/openapi/v2") {
        std::string accept = req.get_header_value("Accept");
        if (!accept.empty() && accept.find("json") == std::string::npos &&
            accept.find("*/*") == std::string::npos)
          throw make_error(406, "NotAcceptable", "only application/json is served");
        doc = openapi_v2(cluster_);
      } else if (req.path == "/openapi/v3" || req.path == "/openapi/v3/") {
        doc = openapi_v3_root(cluster_);
      } else if (starts_with(req.path, "/openapi/v3/")) {
        doc = openapi_v3_group_version(cluster_, req.path.substr(12));
      }
      if (doc.empty()) throw err_unknown_path();
      send(res, 200, doc);
      return;
    }
    case Target::Unknown:
      throw err_unknown_path();
    case Target::Resource:
      break;
  }
  const ResourceInfo& ri = *t.ri;
  bool status_sub = t.sub == "status";
  if (verb == "LIST") {
    ListOptions opts = list_options(req, ri, t.ns);
    ListResult lr = ctx_.store.list(ri, opts);
    if (wants_table(req)) {
      std::string inc = req.get_param_value("includeObject");
      send(
          res, 200,
          render_table(ri, lr.items, lr.resource_version, lr.cont, inc.empty() ? "Metadata" : inc));
    } else {
      send(res, 200, list_body(ri, lr));
    }
    return;
  }
  if (verb == "WATCH") {
    serve_watch(req, res, t);
    return;
  }
  if (verb == "GET") {
    ObjPtr o = ctx_.store.get(ri, t.ns, t.name);
    if (wants_table(req) && !status_sub) {
      std::string inc = req.get_param_value("includeObject");
      send(res, 200, render_table(ri, {o}, "", "", inc.empty() ? "Metadata" : inc));
    } else {
      send(res, 200, o->dump());
    }
    return;
  }
  FieldValidation fv = FieldValidation::Warn;
  if (req.method == "POST" || req.method == "PUT" || req.method == "PATCH") {
    std::string v = req.get_param_value("fieldValidation");
    if (v == "Strict")
      fv = FieldValidation::Strict;
    else if (v == "Ignore")
      fv = FieldValidation::Ignore;
    else if (!v.empty() && v != "Warn")
      throw err_bad_request("fieldValidation must be one of \"Ignore\", \"Warn\", or \"Strict\"");
  }
  FieldValidationScope fv_scope(fv);
  auto reply = [&](const WriteResult& w) {
    for (const auto& warning : fv_scope.warnings)
      res.set_header("Warning", "299 - \"" + json_escape_quotes(warning) + "\"");
    send(res, w.code, w.obj ? w.obj->dump() : w.text);
  };
  if (req.method == "POST") {
    if (!t.collection() || status_sub)
      throw err_method_not_allowed(
          "the server does not allow this method on the requested resource");
    json body;
    try {
      body = json::parse(req.body);
    } catch (const std::exception& e) {
      throw err_bad_request(std::string("error decoding request body: ") + e.what());
    }
    if (ri.namespaced && t.ns.empty()) {
      std::string bns = jstr(body, {"metadata", "namespace"});
      if (bns.empty())
        throw err_bad_request(
            "the server could not find the requested resource: namespace is required");
      reply(ctx_.store.create(ri, bns, std::move(body)));
      return;
    }
    reply(ctx_.store.create(ri, t.ns, std::move(body)));
    return;
  }
  if (req.method == "PUT") {
    if (t.collection())
      throw err_method_not_allowed(
          "the server does not allow this method on the requested resource");
    json body;
    try {
      body = json::parse(req.body);
    } catch (const std::exception& e) {
      throw err_bad_request(std::string("error decoding request body: ") + e.what());
    }
    reply(ctx_.store.update(ri, t.ns, t.name, std::move(body), status_sub));
    return;
  }
  if (req.method == "PATCH") {
    if (t.collection())
      throw err_method_not_allowed(
          "the server does not allow this method on the requested resource");
    PatchType pt = patch_type_from_content_type(req.get_header_value("Content-Type"));
    reply(ctx_.store.patch(ri, t.ns, t.name, pt, req.body, status_sub));
    return;
  }
  if (req.method == "DELETE") {
    if (status_sub)
      throw err_method_not_allowed(
          "the server does not allow this method on the requested resource");
    DeleteOptions dopts = delete_options(req);
    if (t.collection()) {
      ListOptions opts = list_options(req, ri, t.ns);
      auto results = ctx_.store.remove_collection(ri, opts, dopts);
      ListResult lr;
      lr.resource_version = std::to_string(0);
      for (const auto& r : results) lr.items.push_back(r.obj);
      {
        std::lock_guard<std::mutex> l(ctx_.store.mutex());
        lr.resource_version = std::to_string(ctx_.store.rv_l());
      }
      send(res, 200, list_body(ri, lr));
      return;
    }
    reply(ctx_.store.remove(ri, t.ns, t.name, dopts));
    return;
  }
  throw err_method_not_allowed("the server does not allow this method on the requested resource");
}

}  // namespace dpfsim
