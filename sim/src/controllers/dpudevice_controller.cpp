// DPF's DPUDevice controller (internal/provisioning/controllers/dpudevice/dpudevice_controller.go)
// as far as other writers of a DPUDevice notice it: every reconcile ends with fluxcd's patcher
// (WithStatusObservedGeneration, WithOwnedConditions), so a change of the spec (a node label
// added by NICo, say) is followed, dpudevice_status_ms later, by a status write that sets
// status.observedGeneration and the conditions' observedGeneration: a new resourceVersion that a
// write decided on the older one meets as 409 Conflict. While a DPU uses the device, it carries
// the finalizer provisioning.dpu.nvidia.com/dpudevice-protection (DPUDeviceFinalizer); a deleted
// DPUDevice stays (terminating) until its DPU is gone, then the finalizer goes and so does it.
#include <cstring>

#include "conditions.h"
#include "controller_manager.h"
#include "profile.h"
#include "resources.h"
#include "seeding.h"

namespace dpfsim {

namespace {

constexpr const char* kDeviceFinalizer = "provisioning.dpu.nvidia.com/dpudevice-protection";

// Items: DPUDevice keys "<ns>/<name>".
class DpuDeviceController : public Controller {
 public:
  const char* name() const override { return "dpudevice"; }

  void on_event(ControllerManager& cm, const ResourceInfo& ri, const char*, const std::string& key,
                const ObjPtr& obj, const ObjPtr& prev) override {
    if (&ri == dev_ri_) {
      cm.enqueue(ControllerManager::kDpuDevice, key);
    } else if (&ri == dpu_ri_) {
      // a DPU appearing or going changes whether its device is protected
      for (const ObjPtr& o : {obj, prev})
        if (o)
          cm.enqueue(ControllerManager::kDpuDevice, jstr(*o, {"metadata", "namespace"}) + "/" +
                                                        jstr(*o, {"spec", "dpuDeviceName"}));
    }
  }

  void enqueue_all(ControllerManager& cm) override {
    for (const ObjPtr& o : cm.store().list_l(*dev_ri_))
      cm.enqueue(ControllerManager::kDpuDevice, Store::key_of(*dev_ri_, *o));
  }
  void on_knobs(ControllerManager& cm) override { enqueue_all(cm); }

  void reconcile(ControllerManager& cm, const std::string& key) override {
    if (!served(*dev_ri_)) return;
    Store& st = cm.store();
    ObjPtr dev = st.find_key_l(*dev_ri_, key);
    if (!dev) return;
    const std::string ns = jstr(*dev, {"metadata", "namespace"});
    const std::string name = jstr(*dev, {"metadata", "name"});
    const std::string node = jstr(*dev, {"metadata", "labels", names::kDpuNodeNameLabel});
    const bool used = !node.empty() && st.find_l(*dpu_ri_, ns, dpu_object_name(node, name));
    const bool protected_ = has_finalizer(*dev, kDeviceFinalizer);
    if (is_terminating(*dev)) {
      if (protected_ && !used) {
        json next = *dev;
        json kept = json::array();
        for (const auto& f : next["metadata"]["finalizers"])
          if (f != kDeviceFinalizer) kept.push_back(f);
        next["metadata"]["finalizers"] = kept;
        st.commit_l(*dev_ri_, std::move(next));
      }
      return;
    }
    if (used && !protected_) {
      json next = *dev;
      json& f = next["metadata"]["finalizers"];
      if (!f.is_array()) f = json::array();
      f.push_back(kDeviceFinalizer);
      dev = st.commit_l(*dev_ri_, std::move(next));
      if (!dev) return;
    }
    const long long gen = (*dev)["metadata"].value("generation", 1LL);
    if (jptr(*dev, {"status", "observedGeneration"}) &&
        (*dev)["status"]["observedGeneration"] == gen)
      return;
    const std::string tkey =
        "dpudevice-status/" + jstr(*dev, {"metadata", "uid"}) + "/" + std::to_string(gen);
    if (!cm.due(tkey, cm.ctx().delays.dpudevice_status_ms)) return;
    cm.clear(tkey);
    json next = *dev;
    next["status"]["observedGeneration"] = gen;
    set_condition(next, "Ready", "True", "Success", "");
    set_condition(next, "Discovered", "True", "Success", "");
    for (auto& c : next["status"]["conditions"]) c["observedGeneration"] = gen;
    st.commit_l(*dev_ri_, std::move(next));
  }

 private:
  const ResourceInfo* dev_ri_ = find_resource_by_plural(ClusterId::Management, "dpudevices");
  const ResourceInfo* dpu_ri_ = find_resource_by_plural(ClusterId::Management, "dpus");
};

}  // namespace

std::unique_ptr<Controller> make_dpudevice_controller() {
  return std::make_unique<DpuDeviceController>();
}

}  // namespace dpfsim
