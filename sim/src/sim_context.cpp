#include "sim_context.h"

#include <stdexcept>

#include "admission.h"
#include "profile.h"
#include "seeding.h"

namespace dpfsim {

namespace {
struct DelayField {
  const char* name;
  std::atomic<int> Delays::*field;
};
const DelayField kFields[] = {
    {"label_propagation_ms", &Delays::label_propagation_ms},
    {"node_provisioning_ms", &Delays::node_provisioning_ms},
    {"dpuservice_sync_ms", &Delays::dpuservice_sync_ms},
    {"pod_ready_ms", &Delays::pod_ready_ms},
    {"pod_termination_ms", &Delays::pod_termination_ms},
    {"dpuservice_ready_ms", &Delays::dpuservice_ready_ms},
    {"finalizer_ms", &Delays::finalizer_ms},
    {"argo_refresh_ms", &Delays::argo_refresh_ms},
    {"node_effect_ms", &Delays::node_effect_ms},
    {"node_grace_ms", &Delays::node_grace_ms},
    {"dpudevice_status_ms", &Delays::dpudevice_status_ms},
};
}  // namespace

json Delays::to_json() const {
  json j = json::object();
  for (const auto& f : kFields) j[f.name] = (this->*f.field).load();
  return j;
}

void Delays::apply(const json& j) {
  if (!j.is_object()) throw std::invalid_argument("delays must be a JSON object");
  for (auto& [k, v] : j.items()) {
    bool known = false;
    for (const auto& f : kFields)
      if (k == f.name) known = true;
    if (!known && k != "all_ms") throw std::invalid_argument("unknown delay " + k);
    if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() > 3600000)
      throw std::invalid_argument("delay " + k + " must be an integer number of milliseconds");
  }
  if (j.contains("all_ms")) set_all(j["all_ms"].get<int>());
  for (const auto& f : kFields)
    if (j.contains(f.name)) (this->*f.field).store(j[f.name].get<int>());
  seq.fetch_add(1);
}

void Delays::set_all(int ms) {
  for (const auto& f : kFields) (this->*f.field).store(ms);
  seq.fetch_add(1);
}

SimContext::SimContext(uint64_t seed_) : seed(seed_), prng(seed_), store(prng), faults(seed_) {
  store.set_admission([this](const Store& st, const ResourceInfo& ri, const json& obj) {
    bool enforce = true;
    {
      std::lock_guard<std::mutex> l(knobs.mu);
      enforce = knobs.privileged_pod_enforcement;
    }
    if (auto denied = privileged_admission_l(st, enforce, ri, obj)) throw *denied;
  });
}

void SimContext::reset(int dpus) {
  watches.cut(std::nullopt, WatchStream::kEnd, store);
  if (!initial_profile.empty()) set_profile(initial_profile);
  {
    std::lock_guard<std::mutex> l(store.mutex());
    store.clear_l();
    seed_baseline_l(store);
    if (!seed_file.is_null()) seed_from_json_l(store, seed_file);
    seed_dpus_l(store, dpus < 0 ? initial_dpus : dpus);
  }
  faults.clear();
  kill_points.clear();
  knobs.clear();
  reqlog.reset_counts();
  reqlog.clear_recent();
  watches.reset_counters();
  if (!initial_delays.is_null()) delays.apply(initial_delays);
  store.watch_config().restore_defaults();
  dpu_reachable = true;
  dpu_unreachable_mode = 0;
  clock_offset_ms = 0;
  reset_epoch.fetch_add(1);
  poke_controllers();
}

}  // namespace dpfsim
