// The label path as DPF walks it (issue 23): three objects and two hops on their own schedules
// (DPUDevice -> DPU by the DPUSet controller, DPU -> Node through the DPU controller's phases),
// the DPUSet's ClusterMetadataConflict, the Node-Ready gate, applyOnLabelChange's Node Effect; and
// a Node whose kubelet stops reporting (the node-lifecycle controller's grace period).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "sim_harness.h"
#include "sim_paths.h"

using namespace simtest;

namespace {

std::string condition(const json& obj, const std::string& type) {
  for (const auto& c : obj["status"].value("conditions", json::array()))
    if (c.value("type", "") == type)
      return c.value("status", "") + "/" + c.value("reason", "") + "/" + c.value("message", "");
  return "";
}

class LabelPath : public ::testing::Test {
 protected:
  SimProcess& sim = shared_sim();
  void SetUp() override { sim.reset(4, 0); }

  json node(int i) { return sim.d("GET", "/api/v1/nodes/" + node_name(i)).j(); }
  json dpu(int i) { return sim.m("GET", kDpuPath + node_name(i)).j(); }
  std::string node_label(int i, const std::string& k) {
    return node(i)["metadata"]["labels"].value(k, "<absent>");
  }
  std::string dpu_label(int i, const std::string& k) {
    return dpu(i)["spec"]["cluster"]["nodeLabels"].value(k, "<absent>");
  }
  std::string phase(int i) { return dpu(i)["status"].value("phase", ""); }
  void set_device_label(int i, const std::string& k, const json& v) {
    json p{{"spec", {{"cluster", {{"nodeLabels", {{k, v}}}}}}}};
    Resp r = sim.m("PATCH", kDevPath + dev_name(i), p.dump(), "application/merge-patch+json");
    ASSERT_EQ(r.status, 200) << r.body;
  }
  // Every phase the DPU showed, sampled every 10 ms while cond is false.
  std::vector<std::string> phases_until(int i, const std::function<bool()>& cond, int ms) {
    std::vector<std::string> seen;
    wait_until(
        [&] {
          std::string p = phase(i);
          if (seen.empty() || seen.back() != p) seen.push_back(p);
          return cond();
        },
        ms);
    return seen;
  }
};

}  // namespace

// DPUDevice -> DPU -> Node, each hop later than the last; the DPU's phase walks DPU Cluster Config
// -> Node Effect Removal -> Ready.
TEST_F(LabelPath, ThreeObjectsTwoHopsAndTheDpuPhases) {
  sim.ctl("POST", "/delays", json{{"label_propagation_ms", 1000}});
  set_device_label(1, "tenant", "blue");
  ASSERT_TRUE(wait_until([&] { return dpu_label(1, "tenant") == "blue"; }, 3000));
  // the DPU object has it; the Node does not yet (the second half of the delay)
  EXPECT_EQ(node_label(1, "tenant"), "<absent>");
  EXPECT_EQ(phase(1), "DPU Cluster Config");
  EXPECT_EQ(condition(dpu(1), "Ready"), "False/RerunClusterConfig/rerun cluster config");
  auto seen = phases_until(
      1, [&] { return node_label(1, "tenant") == "blue"; }, 3000);
  ASSERT_EQ(node_label(1, "tenant"), "blue");
  ASSERT_TRUE(wait_until([&] { return phase(1) == "Ready"; }, 2000));
  EXPECT_EQ(condition(dpu(1), "Ready"), "True/DPUReady/");
  EXPECT_EQ(condition(dpu(1), "DPUClusterReady"), "True/DPUClusterReady/cluster configured");
  EXPECT_EQ(seen.front(), "DPU Cluster Config");
}

// The Node hop reads the DPU object's spec when it happens: a key the DPUDevice dropped, but the
// DPU object still has, reaches the Node after the drop.
TEST_F(LabelPath, AStaleKeyReachesTheNodeAfterTheDeviceDroppedIt) {
  // hop 1 slow, hop 2 fast relative to it: 4 s total, 2 s each
  sim.ctl("POST", "/delays", json{{"label_propagation_ms", 4000}});
  set_device_label(2, "tenant", "blue");
  ASSERT_TRUE(wait_until([&] { return dpu_label(2, "tenant") == "blue"; }, 5000));
  // DPU Cluster Config has started its 2 s; the device drops the key now
  set_device_label(2, "tenant", nullptr);
  EXPECT_EQ(dpu_label(2, "tenant"), "blue");
  // the Node gets the key although no object upstream of the DPU has it
  ASSERT_TRUE(wait_until([&] { return node_label(2, "tenant") == "blue"; }, 5000));
  EXPECT_EQ(sim.m("GET", kDevPath + dev_name(2))
                .j()["spec"]["cluster"]["nodeLabels"]
                .value("tenant", "<absent>"),
            "<absent>");
  // and then it goes, hop by hop
  ASSERT_TRUE(wait_until([&] { return dpu_label(2, "tenant") == "<absent>"; }, 5000));
  ASSERT_TRUE(wait_until([&] { return node_label(2, "tenant") == "<absent>"; }, 5000));
}

// MergeDPUClusterNodeMetadata: a key of the DPUSet template with another value on one DPUDevice
// stops the whole DPUSet; resolving it lets every DPU move again.
TEST_F(LabelPath, ClusterMetadataConflictStopsTheWholeDpuSet) {
  ASSERT_EQ(sim.ctl("POST", "/dpuset", json{{"nodeLabels", {{"zone", "a"}}}}).status, 200);
  ASSERT_TRUE(wait_until([&] { return dpu_label(0, "zone") == "a"; }, 3000));
  ASSERT_TRUE(wait_until([&] { return node_label(3, "zone") == "a"; }, 3000));
  set_device_label(3, "zone", "b");    // disagrees with the template
  set_device_label(0, "tenant", "t");  // an unrelated change on another device
  ASSERT_TRUE(wait_until(
      [&] {
        json st = sim.ctl("GET", "/dpuset").j();
        return st["conditions"][0].value("reason", "") == "ClusterMetadataConflict";
      },
      3000));
  json st = sim.ctl("GET", "/dpuset").j();
  EXPECT_NE(st["conditions"][0].value("message", "").find("dpu-device-0003"), std::string::npos)
      << st.dump();
  // nothing moves, on any DPU of the set
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(dpu_label(0, "tenant"), "<absent>");
  EXPECT_EQ(dpu_label(3, "zone"), "a");
  // resolved: the waiting change goes through
  set_device_label(3, "zone", nullptr);
  ASSERT_TRUE(wait_until([&] { return node_label(0, "tenant") == "t"; }, 3000));
  EXPECT_EQ(sim.ctl("GET", "/dpuset").j()["conditions"][0].value("status", ""), "True");
}

// applyOnLabelChange: a label change puts the DPU through Node Effect before DPU Cluster Config.
TEST_F(LabelPath, ApplyOnLabelChangeGoesThroughNodeEffect) {
  sim.ctl("POST", "/delays", json{{"node_effect_ms", 600}});
  ASSERT_EQ(sim.ctl("POST", "/dpuset", json{{"applyOnLabelChange", true}}).status, 200);
  ASSERT_TRUE(wait_until(
      [&] {
        return dpu(1)["spec"]["nodeEffect"]
            .value("upgradePolicy", json::object())
            .value("applyOnLabelChange", false);
      },
      3000));
  set_device_label(1, "tenant", "green");
  auto seen = phases_until(
      1, [&] { return node_label(1, "tenant") == "green" && phase(1) == "Ready"; }, 4000);
  ASSERT_EQ(node_label(1, "tenant"), "green");
  EXPECT_NE(std::find(seen.begin(), seen.end(), "Node Effect"), seen.end());
}

// A Node that stops reporting: after the grace period Ready=Unknown, the unreachable taints, its
// pods not Ready; DPF's DPU Cluster Config waits for it; a pod deletion on it hangs until it is
// back.
TEST_F(LabelPath, ANodeThatStopsReportingAndComesBack) {
  sim.ctl("POST", "/delays", json{{"node_grace_ms", 500}, {"pod_termination_ms", 100}});
  // a pod on node 1
  json pod{{"apiVersion", "v1"},
           {"kind", "Pod"},
           {"metadata", {{"name", "p1"}, {"namespace", "dpf-operator-system"}}},
           {"spec",
            {{"nodeName", node_name(1)},
             {"containers", {{{"name", "c"}, {"image", "registry.example.com/c:1"}}}}}}};
  ASSERT_EQ(sim.d("POST", "/api/v1/namespaces/dpf-operator-system/pods", pod.dump()).status, 201);
  auto pod_ready = [&] {
    return condition(sim.d("GET", "/api/v1/namespaces/dpf-operator-system/pods/p1").j(), "Ready");
  };
  ASSERT_TRUE(wait_until([&] { return pod_ready().rfind("True", 0) == 0; }, 3000));
  ASSERT_EQ(sim.ctl("POST", "/nodes/" + node_name(1) + "/not-ready", json::object()).status, 200);
  // within the grace period nothing shows yet
  EXPECT_EQ(condition(node(1), "Ready").substr(0, 4), "True");
  ASSERT_TRUE(
      wait_until([&] { return condition(node(1), "Ready").rfind("Unknown", 0) == 0; }, 3000));
  EXPECT_EQ(condition(node(1), "Ready"),
            "Unknown/NodeStatusUnknown/Kubelet stopped posting node status.");
  json taints = node(1)["spec"]["taints"];
  ASSERT_EQ(taints.size(), 2u) << taints.dump();
  EXPECT_EQ(taints[0]["key"], "node.kubernetes.io/unreachable");
  ASSERT_TRUE(wait_until([&] { return pod_ready().rfind("False", 0) == 0; }, 3000));
  // DPF: the label does not reach a Node that is not Ready (state/ready.go holds the DPU in
  // phase Ready with Ready=False before it compares labels)
  set_device_label(1, "tenant", "late");
  ASSERT_TRUE(wait_until([&] { return dpu_label(1, "tenant") == "late"; }, 3000));
  ASSERT_TRUE(wait_until(
      [&] {
        return condition(dpu(1), "Ready") ==
               "False/NodeNotReady/DPU's Node " + node_name(1) + " is not Ready";
      },
      3000));
  EXPECT_EQ(phase(1), "Ready");
  // a deletion on the silent Node hangs
  ASSERT_EQ(sim.d("DELETE", "/api/v1/namespaces/dpf-operator-system/pods/p1").status, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(sim.d("GET", "/api/v1/namespaces/dpf-operator-system/pods/p1").status, 200);
  EXPECT_EQ(node_label(1, "tenant"), "<absent>");
  // back: Ready, taints gone, the deletion finishes, the label arrives
  ASSERT_EQ(sim.ctl("POST", "/nodes/" + node_name(1) + "/ready", json::object()).status, 200);
  ASSERT_TRUE(wait_until([&] { return condition(node(1), "Ready").rfind("True", 0) == 0; }, 3000));
  EXPECT_FALSE(node(1)["spec"].contains("taints"));
  ASSERT_TRUE(wait_until(
      [&] { return sim.d("GET", "/api/v1/namespaces/dpf-operator-system/pods/p1").status == 404; },
      3000));
  ASSERT_TRUE(wait_until([&] { return node_label(1, "tenant") == "late"; }, 3000));
}
