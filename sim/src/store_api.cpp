// The Store's API operations (GET, LIST with selectors and pages, CREATE, UPDATE and PATCH with
// their preconditions, DELETE with finalizers and grace), over the locked helpers of store.cpp.
#include <algorithm>

#include "node_selector.h"
#include "store.h"
#include "store_detail.h"
#include "validation.h"

namespace dpfsim {

using namespace store_detail;

// ---------------- API operations ----------------

ObjPtr Store::get(const ResourceInfo& ri, const std::string& ns, const std::string& name) {
  std::lock_guard<std::mutex> l(mu_);
  ObjPtr p = find_l(ri, ns, name);
  if (!p) throw err_not_found(ri, name);
  return p;
}

ListResult Store::list(const ResourceInfo& ri, const ListOptions& opts) {
  std::string start_after;
  std::string token_rv;
  int64_t token_ms = 0;
  if (!opts.cont.empty()) {
    std::string raw;
    json tok;
    if (!base64url_decode(opts.cont, raw))
      throw err_bad_request("continue key is not valid: illegal base64 data");
    try {
      tok = json::parse(raw);
    } catch (...) {
      throw err_bad_request("continue key is not valid: invalid JSON");
    }
    if (!tok.is_object()) throw err_bad_request("continue key is not valid: invalid JSON");
    start_after = tok.value("start", "");
    token_rv = tok.value("rv", "");
    token_ms = tok.value("ts", static_cast<int64_t>(0));
    if (start_after.empty()) throw err_bad_request("continue key is not valid: missing start key");
  }
  std::string prefix = (ri.namespaced && !opts.ns.empty()) ? opts.ns + "/" : "";
  auto expired = [&]() {
    // As etcd3's store after compaction: 410 Expired with a token that continues from the same
    // key at the latest resourceVersion ("inconsistent continue").
    continue_expired_.fetch_add(1);
    json tok{{"rv", ""}, {"start", start_after}, {"ts", wall_ms()}};
    return err_continue_expired(base64url_encode(tok.dump()));
  };
  std::lock_guard<std::mutex> l(mu_);
  ListResult res;
  // The state at the token's resourceVersion: the current objects, with every object that changed
  // since replaced by its state before the first change (absent if it was created since).
  std::map<std::string, ObjPtr> past;
  uint64_t list_rv = rv_;
  if (!opts.cont.empty()) {
    if (wall_ms() - token_ms > watch_cfg_.continue_ttl_ms.load()) throw expired();
    if (!token_rv.empty()) {
      char* end = nullptr;
      list_rv = std::strtoull(token_rv.c_str(), &end, 10);
      if (!end || *end)
        throw err_bad_request("continue key is not valid: invalid resource version");
      std::vector<EntryPtr> changes;
      if (!logs_.at(&ri)->since_all(list_rv, changes, watch_cfg_)) throw expired();
      for (const auto& e : changes) {
        std::string k = key_of(ri, *e->obj);
        if (k <= start_after || !starts_with(k, prefix)) continue;
        past.emplace(k, e->prev);  // the first change after the token wins
      }
    }
  }
  res.resource_version = std::to_string(list_rv);
  static const std::map<std::string, ObjPtr> kEmpty;
  auto b = data_.find(&ri);
  const auto& m = b == data_.end() ? kEmpty : b->second;
  auto it = start_after.empty() ? m.lower_bound(prefix) : m.upper_bound(start_after);
  auto pt = past.begin();
  std::string last_key;
  long remaining = 0;
  bool more = false;
  while (true) {
    bool cur_ok = it != m.end() && (prefix.empty() || starts_with(it->first, prefix));
    bool past_ok = pt != past.end();
    if (!cur_ok && !past_ok) break;
    std::string key;
    ObjPtr obj;
    if (past_ok && (!cur_ok || pt->first <= it->first)) {
      key = pt->first;
      obj = pt->second;
      if (cur_ok && it->first == pt->first) ++it;
      ++pt;
    } else {
      key = it->first;
      obj = it->second;
      ++it;
    }
    if (!obj) continue;
    if (!opts.labels.empty()) {
      const json* labels = jptr(*obj, {"metadata", "labels"});
      if (!opts.labels.matches(labels ? *labels : json())) continue;
    }
    if (!opts.fields.empty() && !opts.fields.matches(*obj)) continue;
    if (opts.limit > 0 && static_cast<long>(res.items.size()) >= opts.limit) {
      more = true;
      ++remaining;
      continue;
    }
    res.items.push_back(obj);
    last_key = key;
  }
  if (more) {
    json tok{{"rv", res.resource_version}, {"start", last_key}, {"ts", wall_ms()}};
    if (!opts.cont.empty()) tok["ts"] = token_ms;  // a list's pages share the first page's age
    res.cont = base64url_encode(tok.dump());
    if (opts.labels.empty() && opts.fields.empty()) res.remaining = remaining;
  }
  return res;
}

WriteResult Store::create(const ResourceInfo& ri, const std::string& ns, json body) {
  if (!body.is_object()) throw err_bad_request("the body of the request must be a JSON object");
  if (body.contains("kind") && body["kind"].is_string() && body["kind"] != ri.kind)
    throw err_bad_request("the kind in the data (" + body["kind"].get<std::string>() +
                          ") does not match the expected kind (" + ri.kind + ")");
  if (body.contains("apiVersion") && body["apiVersion"].is_string() &&
      body["apiVersion"] != ri.api_version())
    throw err_bad_request("the API version in the data (" + body["apiVersion"].get<std::string>() +
                          ") does not match the expected API version (" + ri.api_version() + ")");
  json& md = body["metadata"];
  if (!md.is_object()) md = json::object();
  if (ri.namespaced) {
    std::string bns = jstr(md, {"namespace"});
    if (!bns.empty() && bns != ns)
      throw err_bad_request(
          "the namespace of the provided object does not match the namespace sent on the request");
    md["namespace"] = ns;
  }
  std::lock_guard<std::mutex> l(mu_);
  return WriteResult{201, create_l(ri, std::move(body), true), ""};
}

WriteResult Store::update_l(const ResourceInfo& ri, const ObjPtr& old, json incoming,
                            bool status_sub, bool is_put) {
  if (!incoming.is_object()) throw err_bad_request("the body of the request must be a JSON object");
  const json& omd = (*old)["metadata"];
  std::string name = omd["name"].get<std::string>();
  json inmd = incoming.contains("metadata") && incoming["metadata"].is_object()
                  ? incoming["metadata"]
                  : json::object();
  if (is_put) {
    std::string bname = jstr(inmd, {"name"});
    if (!bname.empty() && bname != name)
      throw err_bad_request("the name of the object (" + bname +
                            ") does not match the name on the URL (" + name + ")");
    std::string bns = jstr(inmd, {"namespace"});
    if (ri.namespaced && !bns.empty() && bns != jstr(omd, {"namespace"}))
      throw err_bad_request(
          "the namespace of the provided object does not match the namespace sent on the request");
  }
  // Optimistic concurrency precondition.
  std::string brv = jstr(inmd, {"resourceVersion"});
  if (brv.empty()) {
    if (is_put && (ri.custom || !ri.allow_unconditional_update))
      throw err_invalid(ri, name,
                        {cause_invalid("metadata.resourceVersion", json{{"$raw", "0x0"}},
                                       "must be specified for an update")});
  } else if (brv != omd["resourceVersion"].get<std::string>()) {
    throw err_conflict(ri, name);
  }

  json next;
  if (status_sub) {
    next = *old;
    if (incoming.contains("status"))
      next["status"] = incoming["status"];
    else
      next.erase("status");
    prune_for_request(ri, next);
  } else {
    next = std::move(incoming);
    next["apiVersion"] = ri.api_version();
    next["kind"] = ri.kind;
    json& md = next["metadata"];
    if (!md.is_object()) md = json::object();
    for (const char* k : {"name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
                          "deletionGracePeriodSeconds", "generation"}) {
      if (omd.contains(k))
        md[k] = omd[k];
      else
        md.erase(k);
    }
    md.erase("managedFields");
    md.erase("selfLink");
    if (ri.has_status) {
      if (old->contains("status"))
        next["status"] = (*old)["status"];
      else
        next.erase("status");
    }
    prune_for_request(ri, next);
    validate_or_throw(ri, next, old.get());
    if (admission_) admission_(*this, ri, next);
    if (is_terminating(*old)) {
      auto oldf = finalizers_of(*old);
      std::vector<std::string> added;
      for (const auto& f : finalizers_of(next))
        if (std::find(oldf.begin(), oldf.end(), f) == oldf.end()) added.push_back(f);
      if (!added.empty()) {
        std::string list = "[]string{";
        for (size_t i = 0; i < added.size(); ++i) list += (i ? ", \"" : "\"") + added[i] + "\"";
        list += "}";
        throw err_invalid(
            ri, name,
            {cause_forbidden(
                "metadata.finalizers",
                "no new finalizers can be added if the object is being deleted, found new "
                "finalizers " +
                    list)});
      }
    }
  }
  json final_copy;
  bool removing = is_terminating(next) && finalizers_of(next).empty();
  if (removing) final_copy = next;
  ObjPtr p = commit_l(ri, std::move(next));
  if (!p) {
    final_copy["metadata"]["resourceVersion"] = std::to_string(rv_);
    return WriteResult{200, std::make_shared<const json>(std::move(final_copy)), ""};
  }
  return WriteResult{200, p, ""};
}

WriteResult Store::update(const ResourceInfo& ri, const std::string& ns, const std::string& name,
                          json body, bool status_sub) {
  std::lock_guard<std::mutex> l(mu_);
  ObjPtr old = find_l(ri, ns, name);
  if (!old && ri.allow_create_on_update && !status_sub && body.is_object() &&
      jstr(body, {"metadata", "resourceVersion"}).empty()) {
    // AllowCreateOnUpdate: a PUT of a missing object without a resourceVersion creates it
    const std::string bname = jstr(body, {"metadata", "name"});
    if (!bname.empty() && bname != name)
      throw err_bad_request("the name of the object (" + bname +
                            ") does not match the name on the URL (" + name + ")");
    body["metadata"]["name"] = name;
    if (ri.namespaced) body["metadata"]["namespace"] = ns;
    return WriteResult{201, create_l(ri, std::move(body), true), ""};
  }
  if (!old) throw err_not_found(ri, name);
  return update_l(ri, old, std::move(body), status_sub, true);
}

WriteResult Store::patch(const ResourceInfo& ri, const std::string& ns, const std::string& name,
                         PatchType type, const std::string& body, bool status_sub) {
  if (type == PatchType::Unknown || type == PatchType::Apply ||
      (type == PatchType::Strategic && ri.custom))
    throw err_unsupported_patch();
  json p = parse_body(body);
  if (type == PatchType::Strategic) strip_directives(p);
  if (type == PatchType::Json) {
    if (!p.is_array())
      throw err_bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch");
    if (p.size() > 10000)
      throw make_error(422, "Invalid", "The allowed maximum operations in a JSON patch is 10000");
  }
  std::lock_guard<std::mutex> l(mu_);
  ObjPtr old = find_l(ri, ns, name);
  if (!old) throw err_not_found(ri, name);
  json patched;
  if (type == PatchType::Json) {
    try {
      patched = old->patch(p);
    } catch (const std::exception& e) {
      ojson d;
      d["causes"] =
          ojson::array({ojson{{"reason", "UnexpectedServerResponse"}, {"message", e.what()}}});
      throw make_error(422, "Invalid",
                       "the server rejected our request due to an error in our request", d);
    }
  } else {
    patched = *old;
    patched.merge_patch(p);
  }
  if (!patched.is_object()) throw err_bad_request("the patched object is not a JSON object");
  return update_l(ri, old, std::move(patched), status_sub, false);
}

WriteResult Store::remove_l(const ResourceInfo& ri, const ObjPtr& old, const DeleteOptions& opts) {
  const json& omd = (*old)["metadata"];
  std::string name = omd["name"].get<std::string>();
  if (opts.precondition_uid && *opts.precondition_uid != jstr(omd, {"uid"}))
    throw err_conflict_msg(ri, name,
                           "Precondition failed: UID in precondition: " + *opts.precondition_uid +
                               ", UID in object meta: " + jstr(omd, {"uid"}));
  if (opts.precondition_rv && *opts.precondition_rv != jstr(omd, {"resourceVersion"}))
    throw err_conflict_msg(ri, name,
                           "the ResourceVersion in the precondition (" + *opts.precondition_rv +
                               ") does not match the ResourceVersion in record (" +
                               jstr(omd, {"resourceVersion"}) +
                               "). The object might have been modified");
  bool graceful_pod = ri.plural == "pods" && !jstr(*old, {"spec", "nodeName"}).empty() &&
                      !(opts.grace_seconds && *opts.grace_seconds == 0);
  if (!finalizers_of(*old).empty() || graceful_pod) {
    long grace = graceful_pod ? (opts.grace_seconds ? *opts.grace_seconds : 30) : 0;
    return WriteResult{200, mark_deleting_l(ri, old, grace), ""};
  }
  std::string ns = ri.namespaced ? jstr(omd, {"namespace"}) : "";
  std::string uid = jstr(omd, {"uid"});
  erase_l(ri, ns, name);
  if (ri.plural == "namespaces") {
    // Cascade: drop everything in the namespace of the same cluster.
    for (const auto& r : all_resources()) {
      if (r.cluster != ri.cluster || !r.namespaced) continue;
      for (const auto& o : list_l(r, name)) erase_l(r, name, jstr(*o, {"metadata", "name"}));
    }
  }
  if (ri.plural == "pods") return WriteResult{200, old, ""};
  return WriteResult{200, nullptr, status_success_body(ri, name, uid)};
}

WriteResult Store::remove(const ResourceInfo& ri, const std::string& ns, const std::string& name,
                          const DeleteOptions& opts) {
  std::lock_guard<std::mutex> l(mu_);
  ObjPtr old = find_l(ri, ns, name);
  if (!old) throw err_not_found(ri, name);
  return remove_l(ri, old, opts);
}

std::vector<WriteResult> Store::remove_collection(const ResourceInfo& ri, const ListOptions& opts,
                                                  const DeleteOptions& dopts) {
  ListOptions lo = opts;
  lo.limit = 0;
  lo.cont.clear();
  ListResult lr = list(ri, lo);
  std::lock_guard<std::mutex> l(mu_);
  std::vector<WriteResult> out;
  for (const auto& o : lr.items) {
    ObjPtr cur = find_l(ri, jstr(*o, {"metadata", "namespace"}), jstr(*o, {"metadata", "name"}));
    if (!cur) continue;
    WriteResult r = remove_l(ri, cur, dopts);
    if (!r.obj) r.obj = cur;
    out.push_back(r);
  }
  return out;
}

}  // namespace dpfsim
