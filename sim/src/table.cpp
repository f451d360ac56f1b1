#include "table.h"

#include <cstring>

namespace dpfsim {

namespace {

struct Column {
  std::string name;
  std::string type;
  std::string format;
  int priority;
};

std::string age_of(const json& obj) {
  std::chrono::system_clock::time_point tp;
  if (!parse_rfc3339(jstr(obj, {"metadata", "creationTimestamp"}), tp)) return "<unknown>";
  auto d = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now() - tp);
  return human_duration(d);
}

const json* condition(const json& obj, const std::string& type) {
  const json* conds = jptr(obj, {"status", "conditions"});
  if (!conds || !conds->is_array()) return nullptr;
  for (const auto& c : *conds)
    if (c.value("type", "") == type) return &c;
  return nullptr;
}

std::string or_none(const std::string& s) {
  return s.empty() ? "<none>" : s;
}

std::string node_status(const json& n) {
  const json* c = condition(n, "Ready");
  std::string s = "Unknown";
  if (c) s = c->value("status", "") == "True" ? "Ready" : "NotReady";
  if (jbool(n, {"spec", "unschedulable"})) s += ",SchedulingDisabled";
  return s;
}

std::string node_roles(const json& n) {
  std::string roles;
  const json* labels = jptr(n, {"metadata", "labels"});
  if (labels && labels->is_object())
    for (auto& [k, v] : labels->items())
      if (starts_with(k, "node-role.kubernetes.io/")) {
        if (!roles.empty()) roles += ",";
        roles += k.substr(strlen("node-role.kubernetes.io/"));
      }
  return or_none(roles);
}

std::string node_address(const json& n, const std::string& type) {
  const json* addrs = jptr(n, {"status", "addresses"});
  if (addrs && addrs->is_array())
    for (const auto& a : *addrs)
      if (a.value("type", "") == type) return a.value("address", "");
  return "<none>";
}

std::string pod_status(const json& p) {
  if (jptr(p, {"metadata", "deletionTimestamp"})) return "Terminating";
  std::string phase = jstr(p, {"status", "phase"}, "Pending");
  if (phase == "Pending" && !jstr(p, {"spec", "nodeName"}).empty()) return "ContainerCreating";
  return phase;
}

std::string pod_ready(const json& p) {
  int total = 0, ready = 0;
  const json* cs = jptr(p, {"spec", "containers"});
  if (cs && cs->is_array()) total = static_cast<int>(cs->size());
  const json* st = jptr(p, {"status", "containerStatuses"});
  if (st && st->is_array())
    for (const auto& c : *st)
      if (c.value("ready", false)) ++ready;
  return std::to_string(ready) + "/" + std::to_string(total);
}

long long restarts(const json& p) {
  long long n = 0;
  const json* st = jptr(p, {"status", "containerStatuses"});
  if (st && st->is_array())
    for (const auto& c : *st) n += c.value("restartCount", 0LL);
  return n;
}

json int_field(const json& obj, std::initializer_list<const char*> path) {
  const json* v = jptr(obj, path);
  return v && v->is_number() ? *v : json(0);
}

std::string selector_string(const json& m) {
  if (!m.is_object() || m.empty()) return "<none>";
  std::string out;
  for (auto& [k, v] : m.items()) {
    if (!out.empty()) out += ",";
    out += k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
  }
  return out;
}

std::string containers_field(const json& ds, const char* field) {
  std::string out;
  const json* cs = jptr(ds, {"spec", "template", "spec", "containers"});
  if (cs && cs->is_array())
    for (const auto& c : *cs) {
      if (!out.empty()) out += ",";
      out += c.value(field, "");
    }
  return or_none(out);
}

void columns_and_cells(const ResourceInfo& ri, std::vector<Column>& cols,
                       const std::vector<ObjPtr>& items, std::vector<json>& rows) {
  const std::string& k = ri.plural;
  cols.push_back({"Name", "string", "name", 0});
  if (k == "nodes") {
    cols.insert(cols.end(), {{"Status", "string", "", 0},
                             {"Roles", "string", "", 0},
                             {"Age", "string", "", 0},
                             {"Version", "string", "", 0},
                             {"Internal-IP", "string", "", 1},
                             {"External-IP", "string", "", 1},
                             {"OS-Image", "string", "", 1},
                             {"Kernel-Version", "string", "", 1},
                             {"Container-Runtime", "string", "", 1}});
    for (const auto& o : items) {
      const json& n = *o;
      rows.push_back(json::array(
          {jstr(n, {"metadata", "name"}), node_status(n), node_roles(n), age_of(n),
           jstr(n, {"status", "nodeInfo", "kubeletVersion"}), node_address(n, "InternalIP"),
           node_address(n, "ExternalIP"), or_none(jstr(n, {"status", "nodeInfo", "osImage"})),
           or_none(jstr(n, {"status", "nodeInfo", "kernelVersion"})),
           or_none(jstr(n, {"status", "nodeInfo", "containerRuntimeVersion"}))}));
    }
  } else if (k == "pods") {
    cols.insert(cols.end(), {{"Ready", "string", "", 0},
                             {"Status", "string", "", 0},
                             {"Restarts", "string", "", 0},
                             {"Age", "string", "", 0},
                             {"IP", "string", "", 1},
                             {"Node", "string", "", 1},
                             {"Nominated Node", "string", "", 1},
                             {"Readiness Gates", "string", "", 1}});
    for (const auto& o : items) {
      const json& p = *o;
      rows.push_back(json::array({jstr(p, {"metadata", "name"}), pod_ready(p), pod_status(p),
                                  std::to_string(restarts(p)), age_of(p),
                                  or_none(jstr(p, {"status", "podIP"})),
                                  or_none(jstr(p, {"spec", "nodeName"})), "<none>", "<none>"}));
    }
  } else if (k == "daemonsets") {
    cols.insert(cols.end(), {{"Desired", "integer", "", 0},
                             {"Current", "integer", "", 0},
                             {"Ready", "integer", "", 0},
                             {"Up-to-date", "integer", "", 0},
                             {"Available", "integer", "", 0},
                             {"Node Selector", "string", "", 0},
                             {"Age", "string", "", 0},
                             {"Containers", "string", "", 1},
                             {"Images", "string", "", 1},
                             {"Selector", "string", "", 1}});
    for (const auto& o : items) {
      const json& d = *o;
      const json* nsel = jptr(d, {"spec", "template", "spec", "nodeSelector"});
      const json* msel = jptr(d, {"spec", "selector", "matchLabels"});
      rows.push_back(json::array(
          {jstr(d, {"metadata", "name"}), int_field(d, {"status", "desiredNumberScheduled"}),
           int_field(d, {"status", "currentNumberScheduled"}),
           int_field(d, {"status", "numberReady"}),
           int_field(d, {"status", "updatedNumberScheduled"}),
           int_field(d, {"status", "numberAvailable"}), selector_string(nsel ? *nsel : json()),
           age_of(d), containers_field(d, "name"), containers_field(d, "image"),
           selector_string(msel ? *msel : json())}));
    }
  } else if (k == "controllerrevisions") {
    cols.insert(cols.end(), {{"Controller", "string", "", 0},
                             {"Revision", "integer", "", 0},
                             {"Age", "string", "", 0}});
    for (const auto& o : items) {
      const json& c = *o;
      std::string ctrl = "<none>";
      const json* refs = jptr(c, {"metadata", "ownerReferences"});
      if (refs && refs->is_array() && !refs->empty())
        ctrl = "daemonset.apps/" + (*refs)[0].value("name", "");
      rows.push_back(json::array(
          {jstr(c, {"metadata", "name"}), ctrl, int_field(c, {"revision"}), age_of(c)}));
    }
  } else if (k == "namespaces") {
    cols.insert(cols.end(), {{"Status", "string", "", 0}, {"Age", "string", "", 0}});
    for (const auto& o : items)
      rows.push_back(json::array(
          {jstr(*o, {"metadata", "name"}), jstr(*o, {"status", "phase"}, "Active"), age_of(*o)}));
  } else if (k == "dpuservices" || k == "dpus" || k == "dpudevices") {
    bool with_phase = k != "dpudevices";
    cols.push_back({"Ready", "string", "", 0});
    if (with_phase) cols.push_back({"Phase", "string", "", 0});
    cols.push_back({"Age", "string", "", 0});
    for (const auto& o : items) {
      const json& x = *o;
      const json* c = condition(x, "Ready");
      std::string ready = c ? c->value("status", "") : "";
      json row = json::array({jstr(x, {"metadata", "name"}), ready});
      if (with_phase) {
        std::string phase =
            k == "dpus" ? jstr(x, {"status", "phase"}) : (c ? c->value("reason", "") : "");
        if (k == "dpuservices" && jptr(x, {"metadata", "deletionTimestamp"}))
          phase = c ? c->value("reason", "") : "";
        row.push_back(phase);
      }
      row.push_back(age_of(x));
      rows.push_back(row);
    }
  } else if (k == "leases") {
    // kube-apiserver's printer for Lease (pkg/printers/internalversion): Name, Holder, Age
    cols.insert(cols.end(), {{"Holder", "string", "", 0}, {"Age", "string", "", 0}});
    for (const auto& o : items)
      rows.push_back(json::array(
          {jstr(*o, {"metadata", "name"}), jstr(*o, {"spec", "holderIdentity"}), age_of(*o)}));
  } else if (k == "applications") {
    // Argo CD's CRD printer columns.
    cols.insert(cols.end(), {{"Sync Status", "string", "", 0},
                             {"Health Status", "string", "", 0},
                             {"Revision", "string", "", 1},
                             {"Project", "string", "", 1}});
    for (const auto& o : items)
      rows.push_back(
          json::array({jstr(*o, {"metadata", "name"}), jstr(*o, {"status", "sync", "status"}),
                       jstr(*o, {"status", "health", "status"}),
                       jstr(*o, {"status", "sync", "revision"}), jstr(*o, {"spec", "project"})}));
  } else {
    cols.push_back({"Age", "string", "", 0});
    for (const auto& o : items)
      rows.push_back(json::array({jstr(*o, {"metadata", "name"}), age_of(*o)}));
  }
}

}  // namespace

std::string render_table(const ResourceInfo& ri, const std::vector<ObjPtr>& items,
                         const std::string& rv, const std::string& cont,
                         const std::string& include_object) {
  std::vector<Column> cols;
  std::vector<json> cells;
  columns_and_cells(ri, cols, items, cells);
  ojson t;
  t["kind"] = "Table";
  t["apiVersion"] = "meta.k8s.io/v1";
  ojson md = ojson::object();
  if (!rv.empty()) md["resourceVersion"] = rv;
  if (!cont.empty()) md["continue"] = cont;
  t["metadata"] = md;
  ojson cd = ojson::array();
  for (const auto& c : cols) {
    ojson o;
    o["name"] = c.name;
    o["type"] = c.type;
    o["format"] = c.format;
    o["description"] = c.name == "Name" ? "Name must be unique within a namespace." : c.name;
    o["priority"] = c.priority;
    cd.push_back(o);
  }
  t["columnDefinitions"] = cd;
  ojson rows = ojson::array();
  for (size_t i = 0; i < items.size(); ++i) {
    ojson r;
    r["cells"] = ojson::parse(cells[i].dump());
    if (include_object == "Object") {
      r["object"] = ojson::parse(items[i]->dump());
    } else if (include_object != "None") {
      ojson o;
      o["kind"] = "PartialObjectMetadata";
      o["apiVersion"] = "meta.k8s.io/v1";
      o["metadata"] = ojson::parse((*items[i])["metadata"].dump());
      r["object"] = o;
    }
    rows.push_back(r);
  }
  t["rows"] = rows;
  return t.dump();
}

}  // namespace dpfsim
