// The clients a reconcile test points at a dpfsim process, configured as the worker configures
// them (the simulator's CA, a short timeout), and the DPUService a placement test starts from.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/dpuservice_render.hpp"
#include "core/helm_chart_data.hpp"
#include "core/identity.hpp"
#include "dpu_fixture.hpp"
#include "kube/client.hpp"
#include "reconcile/service_reconciler.hpp"
#include "reconcile/service_work.hpp"
#include "sim_harness.h"

namespace extsvc::testfixture {

// The management cluster's settings (dpu: the DPU cluster's instead).
inline kube::ClusterConfig sim_cluster(const simtest::SimProcess& sim, bool dpu = false) {
  kube::ClusterConfig c;
  c.server = dpu ? sim.dpu : sim.mgmt;
  c.ca_file = sim.ca_file;
  c.timeout_ms = 3000;
  return c;
}

struct SimClients {
  std::unique_ptr<kube::Client> mgmt;
  std::unique_ptr<kube::Client> dpu;
};

inline SimClients sim_clients(const simtest::SimProcess& sim) {
  return {std::make_unique<kube::Client>(sim_cluster(sim)),
          std::make_unique<kube::Client>(sim_cluster(sim, true))};
}

// The demo chart's service `id` created by the service reconciler at revision 1, as the worker
// creates it; returns the outcome's reason ("dpuservice_created" when it was).
inline std::string create_demo_service(kube::Client& mgmt, const std::string& id) {
  const nlohmann::json data = nlohmann::json::parse(
      core::validate_helm_chart_data(R"({"repoURL":"https://charts.example.com/stable",)"
                                     R"("chartName":"demo-agent","chartVersion":"1.2.3",)"
                                     R"("security":{"privileged":false}})")
          .dump());
  reconcile::ServiceWork s;
  s.service_id = id;
  s.lifecycle_state = "CREATING";
  s.attachable_version = kVersion;
  s.dpf_service_name = core::dpf_service_name(id, kVersion);
  s.desired_revision = 1;
  s.desired = core::render_dpuservice(id, kVersion, 1, data, kNs);
  reconcile::ServiceReconciler svc(mgmt, kNs);
  return svc.reconcile(s).reason;
}

}  // namespace extsvc::testfixture
