// DPF's DPUDevice controller writes status.observedGeneration a moment after each change of a
// DPUDevice's spec, and its finalizer once the device's DPU object exists (which may come after
// the status): a pass that read the version before either write meets 409 by design (the worker
// retries it). A test that counts on one pass to write first waits until DPF is done with the
// DPUDevice: both written. (Seeded devices of the default profile all have their DPU object.)
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "dpu_fixture.hpp"
#include "sim_harness.h"

namespace extsvc::testfixture {

inline bool dpf_done_with_device(simtest::SimProcess& sim, int i, int timeout_ms = 5000) {
  const std::string path = std::string("/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/") +
                           kNs + "/dpudevices/" + device(i);
  for (int waited = 0; waited < timeout_ms; waited += 10) {
    const nlohmann::json d = sim.m("GET", path).j();
    const bool observed =
        d.is_object() && d.contains("status") && d["status"].contains("observedGeneration") &&
        d["status"]["observedGeneration"] == d["metadata"].value("generation", 1LL);
    bool protected_ = false;
    if (observed && d["metadata"].contains("finalizers"))
      for (const auto& f : d["metadata"]["finalizers"])
        protected_ = protected_ || f == "provisioning.dpu.nvidia.com/dpudevice-protection";
    if (observed && protected_) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace extsvc::testfixture
