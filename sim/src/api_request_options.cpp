// Query parameters and bodies of list, watch and delete requests, refused as the API server
// refuses them (400 BadRequest).
#include <httplib.h>

#include "api_server_internal.h"
#include "kube_errors.h"

namespace dpfsim {

namespace {

std::vector<std::string> allowed_fields(const ResourceInfo& ri) {
  std::vector<std::string> f = {"metadata.name", "metadata.namespace"};
  if (ri.plural == "pods")
    f.insert(f.end(), {"spec.nodeName", "status.phase", "spec.restartPolicy", "spec.schedulerName",
                       "spec.serviceAccountName", "status.podIP", "status.nominatedNodeName",
                       "spec.hostNetwork"});
  if (ri.plural == "nodes") f.push_back("spec.unschedulable");
  if (ri.plural == "namespaces") f.push_back("status.phase");
  if (ri.plural == "events")
    f.insert(f.end(),
             {"involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
              "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
              "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"});
  return f;
}

}  // namespace

namespace api_detail {

ListOptions list_options(const httplib::Request& req, const ResourceInfo& ri,
                         const std::string& ns) {
  ListOptions o;
  o.ns = ns;
  try {
    o.labels = LabelSelector::parse(req.get_param_value("labelSelector"));
  } catch (const std::invalid_argument& e) {
    throw err_bad_request(e.what());
  }
  try {
    o.fields = FieldSelector::parse(req.get_param_value("fieldSelector"), allowed_fields(ri));
  } catch (const std::invalid_argument& e) {
    throw err_bad_request(e.what());
  }
  std::string limit = req.get_param_value("limit");
  if (!limit.empty()) {
    char* end = nullptr;
    long v = std::strtol(limit.c_str(), &end, 10);
    if (!end || *end || v < 0) throw err_bad_request("invalid limit: " + limit);
    o.limit = v;
  }
  o.cont = req.get_param_value("continue");
  return o;
}

DeleteOptions delete_options(const httplib::Request& req) {
  DeleteOptions o;
  if (!req.body.empty()) {
    json b;
    try {
      b = json::parse(req.body);
    } catch (const std::exception& e) {
      throw err_bad_request(std::string("error decoding DeleteOptions: ") + e.what());
    }
    if (b.is_object()) {
      if (const json* p = jptr(b, {"preconditions", "resourceVersion"}); p && p->is_string())
        o.precondition_rv = p->get<std::string>();
      if (const json* p = jptr(b, {"preconditions", "uid"}); p && p->is_string())
        o.precondition_uid = p->get<std::string>();
      if (const json* g = jptr(b, {"gracePeriodSeconds"}); g && g->is_number_integer())
        o.grace_seconds = g->get<long>();
    }
  }
  std::string g = req.get_param_value("gracePeriodSeconds");
  if (!g.empty()) o.grace_seconds = std::atol(g.c_str());
  return o;
}

}  // namespace api_detail

}  // namespace dpfsim
