#include "seeding.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "profile.h"
#include "resources.h"

namespace dpfsim {

namespace {

std::string pad4(int i) {
  char buf[16];
  snprintf(buf, sizeof buf, "%04d", i);
  return buf;
}

const ResourceInfo& res(ClusterId c, const char* plural) {
  return *find_resource_by_plural(c, plural);
}

// A UUID-shaped id derived from a name (stable across restarts of the simulator).
std::string uuid_of(const std::string& seed) {
  std::string h = sha256_hex(seed);
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) +
         "-" + h.substr(20, 12);
}

json node_condition(const char* type, const char* status, const char* reason, const char* message,
                    const std::string& now) {
  return {{"type", type},       {"status", status},         {"reason", reason},
          {"message", message}, {"lastHeartbeatTime", now}, {"lastTransitionTime", now}};
}

}  // namespace

int index_from_name(const std::string& name) {
  size_t e = name.size();
  size_t b = e;
  while (b > 0 && std::isdigit(static_cast<unsigned char>(name[b - 1]))) --b;
  if (b == e) return 0;
  return std::atoi(name.substr(b, std::min<size_t>(e - b, 6)).c_str());
}

std::string dpu_object_name(const std::string& dpu_node, const std::string& dpu_device) {
  std::string node = dpu_node;
  // GenerateDPUName: node part truncated so the whole name fits 63 characters.
  if (node.size() + 1 + dpu_device.size() > 63 && dpu_device.size() < 62)
    node = node.substr(0, 62 - dpu_device.size());
  return node + "-" + dpu_device;
}

json dpf_system_node_labels(const std::string& dpu_node, const std::string& ns) {
  return json{{names::kDpuNodeNameLabel, dpu_node},
              {names::kDpuNodeNamespaceLabel, ns},
              {names::kDpfVersionLabel, names::kDpfVersion}};
}

json make_dpudevice(const std::string& ns, const std::string& name, const std::string& dpu_node,
                    int index) {
  std::string serial = "MT2" + pad4(index) + "X0" + pad4(index);
  std::string now = rfc3339_now();
  return json{
      {"apiVersion", "provisioning.dpu.nvidia.com/v1alpha1"},
      {"kind", "DPUDevice"},
      {"metadata",
       {{"name", name}, {"namespace", ns}, {"labels", {{names::kDpuNodeNameLabel, dpu_node}}}}},
      {"spec",
       {{"serialNumber", serial},
        {"bmcIp",
         "10.1." + std::to_string((index / 250) % 250) + "." + std::to_string(index % 250 + 1)},
        {"bmcPort", 443},
        {"numberOfPFs", 1}}},
      {"status",
       {{"serialNumber", serial},
        {"psid", "MT_0000000884"},
        {"opn", "900-9D3B6-00CV-AA0"},
        {"pciAddress", "0000:3b:00.0"},
        {"pf0Name", "ens1f0np0"},
        {"dpuType", "BlueField3"},
        {"dpuMode", "dpu"},
        {"observedGeneration", 1},
        {"conditions", json::array({{{"type", "Ready"},
                                     {"status", "True"},
                                     {"reason", "Success"},
                                     {"message", ""},
                                     {"observedGeneration", 1},
                                     {"lastTransitionTime", now}},
                                    {{"type", "Discovered"},
                                     {"status", "True"},
                                     {"reason", "Success"},
                                     {"message", ""},
                                     {"observedGeneration", 1},
                                     {"lastTransitionTime", now}}})}}}};
}

json make_dpu(const std::string& ns, const json& device, const json& user_labels) {
  std::string dev_name = jstr(device, {"metadata", "name"});
  std::string node = jstr(device, {"metadata", "labels", names::kDpuNodeNameLabel});
  json node_labels = dpf_system_node_labels(node, ns);
  for (auto& [k, v] : user_labels.items()) node_labels[k] = v;
  json labels = json::object();
  if (const json* dl = jptr(device, {"metadata", "labels"}); dl && dl->is_object()) labels = *dl;
  std::string now = rfc3339_now();
  return json{{"apiVersion", "provisioning.dpu.nvidia.com/v1alpha1"},
              {"kind", "DPU"},
              {"metadata",
               {{"name", dpu_object_name(node, dev_name)},
                {"namespace", ns},
                {"labels", labels},
                {"annotations", {{names::kLastAppliedLabels, user_labels.dump()}}}}},
              {"spec",
               {{"dpuNodeName", node},
                {"dpuDeviceName", dev_name},
                {"serialNumber", jstr(device, {"spec", "serialNumber"})},
                {"pciAddress", "0000:3b:00.0"},
                {"bfb", {{"name", "bf-bundle"}}},
                {"nodeEffect", {{"noEffect", true}}},
                {"cluster",
                 {{"name", "dpu-cplane-tenant1"},
                  {"namespace", "dpu-cplane-tenant1"},
                  {"nodeLabels", node_labels}}}}},
              {"status",
               {{"phase", "Ready"},
                {"conditions", json::array({{{"type", "Ready"},
                                             {"status", "True"},
                                             {"reason", "DPUReady"},
                                             {"message", ""},
                                             {"lastTransitionTime", now}}})}}}};
}

json make_node(const json& dpu, int index) {
  std::string name = jstr(dpu, {"metadata", "name"});
  json desired = json::object();
  if (const json* nl = jptr(dpu, {"spec", "cluster", "nodeLabels"}); nl && nl->is_object())
    desired = *nl;
  json labels{{"kubernetes.io/hostname", name},
              {"kubernetes.io/os", "linux"},
              {"kubernetes.io/arch", "arm64"},
              {"beta.kubernetes.io/os", "linux"},
              {"beta.kubernetes.io/arch", "arm64"}};
  for (auto& [k, v] : desired.items()) labels[k] = v;
  std::string now = rfc3339_now();
  int a = (index / 250) % 250, b = index % 250 + 1;
  std::string ip = "10.0." + std::to_string(a) + "." + std::to_string(b);
  return json{
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata",
       {{"name", name},
        {"labels", labels},
        {"annotations", {{names::kLastAppliedLabels, desired.dump()}}}}},
      {"spec",
       {{"podCIDR", "10.244." + std::to_string(index % 256) + ".0/24"},
        {"podCIDRs", json::array({"10.244." + std::to_string(index % 256) + ".0/24"})}}},
      {"status",
       {{"conditions",
         json::array({node_condition("MemoryPressure", "False", "KubeletHasSufficientMemory",
                                     "kubelet has sufficient memory available", now),
                      node_condition("DiskPressure", "False", "KubeletHasNoDiskPressure",
                                     "kubelet has no disk pressure", now),
                      node_condition("PIDPressure", "False", "KubeletHasSufficientPID",
                                     "kubelet has sufficient PID available", now),
                      node_condition("Ready", "True", "KubeletReady",
                                     "kubelet is posting ready status", now)})},
        {"addresses", json::array({{{"type", "InternalIP"}, {"address", ip}},
                                   {{"type", "Hostname"}, {"address", name}}})},
        {"capacity",
         {{"cpu", "16"},
          {"memory", "32Gi"},
          {"pods", "110"},
          {"ephemeral-storage", "123Gi"},
          {"hugepages-2Mi", "0"}}},
        {"allocatable",
         {{"cpu", "16"},
          {"memory", "31Gi"},
          {"pods", "110"},
          {"ephemeral-storage", "113Gi"},
          {"hugepages-2Mi", "0"}}},
        {"daemonEndpoints", {{"kubeletEndpoint", {{"Port", 10250}}}}},
        // every field of NodeSystemInfo is required in the API (a typed client refuses a
        // Node without them); the ids are stable per Node name, as a machine's are
        {"nodeInfo",
         {{"machineID", sha256_hex("machine/" + name).substr(0, 32)},
          {"systemUUID", uuid_of("system/" + name)},
          {"bootID", uuid_of("boot/" + name)},
          {"architecture", "arm64"},
          {"operatingSystem", "linux"},
          {"osImage", "Ubuntu 22.04.5 LTS"},
          {"kernelVersion", "5.15.0-1060-bluefield"},
          {"containerRuntimeVersion", "containerd://1.7.22"},
          {"kubeletVersion", "v1.32.0"},
          {"kubeProxyVersion", "v1.32.0"}}}}}};
}

json make_namespace(const std::string& name) {
  return json{{"apiVersion", "v1"},
              {"kind", "Namespace"},
              {"metadata", {{"name", name}, {"labels", {{"kubernetes.io/metadata.name", name}}}}},
              {"spec", {{"finalizers", json::array({"kubernetes"})}}},
              {"status", {{"phase", "Active"}}}};
}

void seed_baseline_l(Store& store) {
  for (ClusterId c : {ClusterId::Management, ClusterId::Dpu}) {
    const ResourceInfo& nsri = res(c, "namespaces");
    for (const char* n : {"default", "kube-system", names::kDpfNamespace})
      if (!store.find_l(nsri, "", n)) store.create_l(nsri, make_namespace(n));
  }
}

void seed_dpus_l(Store& store, int n) {
  const ResourceInfo& dev_ri = res(ClusterId::Management, "dpudevices");
  const ResourceInfo& dpu_ri = res(ClusterId::Management, "dpus");
  const ResourceInfo& node_ri = res(ClusterId::Dpu, "nodes");
  const std::string ns = names::kDpfNamespace;
  for (int i = 0; i < n; ++i) {
    std::string dev_name = "dpu-device-" + pad4(i);
    std::string dpu_node = "host-" + pad4(i);
    // v24.10 has no DPUDevice CRD: its DPUs come from DPUSets selecting Nodes
    ObjPtr dev = served(dev_ri) ? store.find_l(dev_ri, ns, dev_name) : nullptr;
    if (!dev) {
      json d = make_dpudevice(ns, dev_name, dpu_node, i);
      dev = served(dev_ri) ? store.create_l(dev_ri, d) : std::make_shared<const json>(d);
    }
    std::string dpu_name = dpu_object_name(dpu_node, dev_name);
    ObjPtr dpu = store.find_l(dpu_ri, ns, dpu_name);
    if (!dpu) dpu = store.create_l(dpu_ri, make_dpu(ns, *dev, json::object()));
    if (!store.find_l(node_ri, "", dpu_name)) store.create_l(node_ri, make_node(*dpu, i));
  }
}

void seed_from_json_l(Store& store, const json& spec) {
  if (!spec.is_object()) throw std::invalid_argument("seed must be a JSON object");
  seed_baseline_l(store);
  if (spec.contains("dpus")) {
    if (!spec["dpus"].is_number_integer() || spec["dpus"].get<int>() < 0)
      throw std::invalid_argument("dpus must be a non-negative integer");
    seed_dpus_l(store, spec["dpus"].get<int>());
  }
  if (spec.contains("objects")) {
    if (!spec["objects"].is_array()) throw std::invalid_argument("objects must be an array");
    for (const auto& entry : spec["objects"]) {
      json obj = entry.contains("object") ? entry["object"] : entry;
      std::string api = obj.value("apiVersion", "");
      std::string kind = obj.value("kind", "");
      const ResourceInfo* ri = nullptr;
      std::string cl = entry.value("cluster", "");
      if (cl == "management" || cl.empty())
        ri = find_resource_by_kind(ClusterId::Management, api, kind);
      if (!ri && (cl == "dpu" || cl.empty())) ri = find_resource_by_kind(ClusterId::Dpu, api, kind);
      if (!ri || !served(*ri))
        throw std::invalid_argument("unknown object kind " + api + "/" + kind);
      obj.erase("cluster");
      if (ri->namespaced && jstr(obj, {"metadata", "namespace"}).empty())
        obj["metadata"]["namespace"] = "default";
      std::string name = jstr(obj, {"metadata", "name"});
      if (ObjPtr old = store.find_l(*ri, jstr(obj, {"metadata", "namespace"}), name)) {
        json next = obj;
        next["metadata"]["uid"] = (*old)["metadata"]["uid"];
        next["metadata"]["creationTimestamp"] = (*old)["metadata"]["creationTimestamp"];
        store.commit_l(*ri, next);
      } else {
        store.create_l(*ri, obj);
      }
    }
  }
}

}  // namespace dpfsim
