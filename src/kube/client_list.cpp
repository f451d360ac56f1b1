// list(): follows continue pages under one byte budget for all of them.
#include <algorithm>

#include "kube/detail/client_impl.hpp"
#include "kube/detail/internal.hpp"

namespace extsvc::kube {

namespace {

using detail::body_limit;
using detail::kMaxMessageBytes;
using detail::make_error;
using nlohmann::json;

constexpr int kMaxListPages = 100000;

}  // namespace

Result Client::Impl::list(const std::string& collection_path, const std::string& label_selector,
                          const std::string& field_selector, int limit) {
  struct Listing {
    bool& flag;
    explicit Listing(bool& f) : flag(f) { flag = true; }
    ~Listing() { flag = false; }
    Listing(const Listing&) = delete;
    Listing& operator=(const Listing&) = delete;
  } listing_scope(listing);
  const char sep = collection_path.find('?') == std::string::npos ? '?' : '&';
  std::string base = collection_path;
  std::string params;
  auto add = [&](const char* k, const std::string& v) {
    params += params.empty() ? sep : '&';
    params += k;
    params += '=';
    params += url_encode(v);
  };
  if (limit > 0) add("limit", std::to_string(limit));
  if (!label_selector.empty()) add("labelSelector", label_selector);
  if (!field_selector.empty()) add("fieldSelector", field_selector);

  json items = json::array();
  json out = json::object();
  std::vector<std::string> warnings;
  auto add_warnings = [&](std::vector<std::string>& more) {
    for (auto& w : more) {
      if (warnings.size() >= kMaxWarnings) break;
      if (std::find(warnings.begin(), warnings.end(), w) == warnings.end())
        warnings.push_back(std::move(w));
    }
  };
  // One budget for the bodies of all pages, so a server cannot grow the result without bound
  // by paginating.
  const size_t budget = body_limit(cfg.max_list_bytes);
  size_t used = 0;
  std::string cont;
  bool restarted = false;
  int pages = 0;
  int last_status = 200;
  while (true) {
    std::string p = base + params;
    if (!cont.empty()) {
      p += params.empty() ? sep : '&';
      p += "continue=" + url_encode(cont);
    }
    if (used >= budget) {
      ++stats.errors;
      Error e = make_error(ErrorKind::kOther, last_status, "ResponseTooLarge",
                           "list response exceeds the client limit of " + std::to_string(budget) +
                               " bytes over all pages");
      e.warnings = std::move(warnings);
      return e;
    }
    Result r = request("GET", p, nullptr, nullptr, budget - used);
    if (!r.ok()) {
      if (r.error().http_status == 410 && !cont.empty() && !restarted) {
        // Continue token expired: restart the list once from a fresh snapshot.
        restarted = true;
        cont.clear();
        items = json::array();
        out = json::object();
        pages = 0;
        used = 0;
        continue;
      }
      if (r.error().reason == "ResponseTooLarge" && pages > 0) {
        r.error().message =
            detail::sanitize_utf8("list response exceeds the client limit of " +
                                      std::to_string(budget) + " bytes over all pages",
                                  kMaxMessageBytes);
      }
      add_warnings(r.error().warnings);
      r.error().warnings = std::move(warnings);
      return r;
    }
    used += last_body_bytes;
    Response& resp = r.value();
    add_warnings(resp.warnings);
    last_status = resp.http_status;
    if (!resp.body.is_object()) {
      ++stats.errors;
      return make_error(ErrorKind::kOther, resp.http_status, "InvalidResponse",
                        "list response is not an object");
    }
    auto it = resp.body.find("items");
    if (it != resp.body.end() && !it->is_null() && !it->is_array()) {
      ++stats.errors;
      return make_error(ErrorKind::kOther, resp.http_status, "InvalidResponse",
                        "list response has a malformed items field");
    }
    if (pages == 0) {
      for (const char* k : {"apiVersion", "kind"}) {
        auto f = resp.body.find(k);
        if (f != resp.body.end()) out[k] = *f;
      }
      json meta = json::object();
      auto m = resp.body.find("metadata");
      if (m != resp.body.end() && m->is_object()) {
        auto rv = m->find("resourceVersion");
        if (rv != m->end()) meta["resourceVersion"] = *rv;
      }
      out["metadata"] = std::move(meta);
    }
    if (it != resp.body.end() && it->is_array()) {
      for (auto& item : *it) items.push_back(std::move(item));
    }
    ++pages;
    std::string next;
    auto m = resp.body.find("metadata");
    if (m != resp.body.end() && m->is_object()) {
      auto c = m->find("continue");
      if (c != m->end() && c->is_string()) next = c->get<std::string>();
    }
    if (next.empty()) break;
    if (next == cont || pages >= kMaxListPages) {
      ++stats.errors;
      return make_error(ErrorKind::kOther, resp.http_status, "InvalidResponse",
                        "list pagination does not make progress");
    }
    cont = std::move(next);
  }
  out["items"] = std::move(items);
  Response resp;
  resp.http_status = last_status;
  resp.body = std::move(out);
  resp.warnings = std::move(warnings);
  return resp;
}

}  // namespace extsvc::kube
