#include "controller_manager.h"

#include <spdlog/spdlog.h>

namespace dpfsim {

bool is_terminating(const json& obj) {
  const json* d = jptr(obj, {"metadata", "deletionTimestamp"});
  return d && !d->is_null();
}

bool has_finalizer(const json& obj, const std::string& f) {
  const json* fs = jptr(obj, {"metadata", "finalizers"});
  if (!fs || !fs->is_array()) return false;
  for (const auto& x : *fs)
    if (x.is_string() && x.get<std::string>() == f) return true;
  return false;
}

json string_map(const json* j) {
  json out = json::object();
  if (j && j->is_object())
    for (auto& [k, v] : j->items())
      if (v.is_string()) out[k] = v;
  return out;
}

void ControllerManager::start() {
  stop_ = false;
  thread_ = std::thread([this] { run(); });
}

void ControllerManager::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void ControllerManager::run() {
  while (!stop_) {
    try {
      tick();
    } catch (const std::exception& e) {
      spdlog::error("controller tick failed: {}", e.what());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(tick_ms_));
  }
}

bool ControllerManager::due(const std::string& key, int delay_ms) {
  auto it = timers_.find(key);
  if (it == timers_.end()) it = timers_.emplace(key, Timer{now_, tick_no_}).first;
  it->second.touched = tick_no_;
  return now_ - it->second.start >= std::chrono::milliseconds(delay_ms);
}

std::string ControllerManager::next_pod_ip() {
  uint32_t n = ++pod_ip_counter_;
  return "10.244." + std::to_string((n / 250) % 256) + "." + std::to_string(n % 250 + 2);
}

void ControllerManager::tick() {
  uint64_t epoch = ctx_.reset_epoch.load();
  std::lock_guard<std::mutex> l(ctx_.store.mutex());
  if (epoch != last_reset_epoch_) {
    timers_.clear();
    last_reset_epoch_ = epoch;
  }
  dpu_reachable_ = ctx_.dpu_reachable.load();
  uint64_t seq = ctx_.store.change_seq() + ctx_.knobs.seq.load();
  if (seq == last_seq_ && timers_.empty() && dpu_reachable_ == last_reachable_) return;
  last_reachable_ = dpu_reachable_;
  ++tick_no_;
  auto started = SteadyClock::now();
  int passes = 0;
  for (int pass = 0; pass < 8; ++pass) {
    ++passes;
    uint64_t before = ctx_.store.change_seq();
    now_ = SteadyClock::now();
    auto timed = [&](const char* name, void (*fn)(ControllerManager&)) {
      auto t0 = SteadyClock::now();
      fn(*this);
      auto us =
          std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - t0).count();
      if (us > 5000) spdlog::debug("controller {} took {} us", name, us);
    };
    timed("placement", reconcile_placement);
    timed("dpuservice", reconcile_dpuservices);
    timed("argo", reconcile_applications);
    timed("daemonset", reconcile_daemonsets);
    timed("kubelet", reconcile_kubelet);
    if (ctx_.store.change_seq() == before) break;
  }
  for (auto it = timers_.begin(); it != timers_.end();) {
    if (it->second.touched != tick_no_)
      it = timers_.erase(it);
    else
      ++it;
  }
  last_seq_ = ctx_.store.change_seq() + ctx_.knobs.seq.load();
  auto took =
      std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - started).count();
  if (took > 20000) spdlog::debug("controller tick took {} us ({} passes)", took, passes);
}

}  // namespace dpfsim
