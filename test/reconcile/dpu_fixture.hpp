// What the placement tests against dpfsim share: the names of seeded DPU i and the claimed work
// of a DPU with one attachment of a service.
#pragma once

#include <string>

#include "core/identity.hpp"
#include "reconcile/dpu_work.hpp"

namespace extsvc::testfixture {

inline constexpr const char* kNs = "dpf-operator-system";
inline constexpr const char* kVersion = "V1-T1700000000000000";

inline std::string device(int i) {
  return "dpu-device-000" + std::to_string(i);
}
inline std::string node(int i) {
  return "host-000" + std::to_string(i) + "-dpu-device-000" + std::to_string(i);
}

// The claimed work of DPU i with service `id` attached (wanted) or removed, revision 1 applied.
inline reconcile::DpuWork dpu_work(int i, bool wanted, const std::string& id,
                                   const std::string& version = kVersion) {
  reconcile::DpuWork w;
  // a NICo MachineId (SPEC 7): fm100 + d (DPU) + s (serial) + 52 base32 characters
  w.dpu_machine_id = "fm100ds" + std::string(48, '0') + std::to_string(100 + i % 100) + "0";
  w.device_name = device(i);
  w.node_name = node(i);
  if (wanted) w.wanted_keys.insert(core::placement_label_key(id, version));
  reconcile::DpuItem item;
  item.kind = "attachment";
  item.instance_id = "inst-1";
  item.service_id = id;
  item.version = version;
  item.label_key = core::placement_label_key(id, version);
  item.dpf_service_name = core::dpf_service_name(id, version);
  item.applied_revision = 1;
  item.wanted = wanted;
  w.items.push_back(item);
  return w;
}

}  // namespace extsvc::testfixture
