#include "controller_manager.h"

#include <spdlog/spdlog.h>

namespace dpfsim {

namespace {

// The store mutex is released after this much reconciling, so API requests interleave.
constexpr auto kStepBudget = std::chrono::microseconds(2000);
// Sweeps over all queues per batch (as the old tick's 8 passes): a chain of controllers that
// keeps re-queueing itself continues at the next tick instead of spinning.
constexpr int kMaxRounds = 8;
// Pause between two chunks of one batch.
constexpr auto kHandoff = std::chrono::microseconds(100);

uint64_t micros(SteadyClock::duration d) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
}

}  // namespace

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

void index_add(std::unordered_map<std::string, std::set<std::string>>& idx, const std::string& name,
               const std::string& key) {
  idx[name].insert(key);
}

void index_remove(std::unordered_map<std::string, std::set<std::string>>& idx,
                  const std::string& name, const std::string& key) {
  auto it = idx.find(name);
  if (it == idx.end()) return;
  it->second.erase(key);
  if (it->second.empty()) idx.erase(it);
}

ControllerManager::ControllerManager(SimContext& ctx, int tick_ms) : ctx_(ctx), tick_ms_(tick_ms) {
  // in the order of Kind
  ctls_.push_back(make_placement_controller());
  ctls_.push_back(make_dpudevice_controller());
  ctls_.push_back(make_dpuservice_controller());
  ctls_.push_back(make_argo_controller());
  ctls_.push_back(make_daemonset_controller());
  ctls_.push_back(make_scheduler());
  ctls_.push_back(make_kubelet());
}

ControllerManager::~ControllerManager() {
  stop();
}

void ControllerManager::start() {
  {
    std::lock_guard<std::mutex> l(ctx_.store.mutex());
    ctx_.store.set_observer(this);
    on_clear();
    // Replay what exists as ADDED events: the informers' initial list.
    for (const auto& r : all_resources())
      for (const ObjPtr& o : ctx_.store.list_l(r))
        on_event(r, "ADDED", Store::key_of(r, *o), o, nullptr);
    dpu_reachable_ = ctx_.dpu_reachable.load();
    knobs_seq_ = ctx_.knobs.seq.load();
    delays_seq_ = ctx_.delays.seq.load();
  }
  ctx_.wake_controllers = [this] { notify_work(); };
  stop_ = false;
  thread_ = std::thread([this] { run(); });
}

void ControllerManager::stop() {
  stop_ = true;
  notify_work();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> l(ctx_.store.mutex());
  ctx_.store.set_observer(nullptr);
}

void ControllerManager::notify_work() {
  {
    std::lock_guard<std::mutex> l(wake_mu_);
    if (work_) return;
    work_ = true;
  }
  wake_cv_.notify_one();
}

void ControllerManager::on_event(const ResourceInfo& ri, const char* type, const std::string& key,
                                 const ObjPtr& obj, const ObjPtr& prev) {
  ++events_seen_;
  for (auto& c : ctls_) c->on_event(*this, ri, type, key, obj, prev);
}

void ControllerManager::on_clear() {
  for (auto& q : queues_) {
    q.items.clear();
    q.queued.clear();
  }
  deferred_.clear();
  timers_.clear();
  timers_of_.clear();
  wakes_ = {};
  for (auto& c : ctls_) c->on_clear();
}

void ControllerManager::enqueue(Kind k, const std::string& item) {
  Queue& q = queues_[k];
  if (!q.queued.insert(item).second) return;
  q.items.push_back(item);
  notify_work();
}

bool ControllerManager::due(const std::string& key, int delay_ms) {
  if (!current_) return true;  // outside a reconcile (not expected)
  std::string owner = owner_key(current_->kind, current_->item);
  auto it = timers_.find(key);
  if (it == timers_.end()) {
    it = timers_.emplace(key, Timer{now_, {}, 0, owner}).first;
    timers_of_[owner].push_back(key);
  }
  Timer& t = it->second;
  t.touched = eval_no_;
  auto at = t.start + std::chrono::milliseconds(delay_ms);
  if (now_ >= at) return true;
  if (t.scheduled != at) {
    t.scheduled = at;
    wakes_.push(Wake{at, current_->kind, current_->item});
  }
  return false;
}

void ControllerManager::clear(const std::string& key) {
  timers_.erase(key);
  current_cleared_ = true;
}

std::string ControllerManager::next_pod_ip() {
  uint32_t n = ++pod_ip_counter_;
  return "10.244." + std::to_string((n / 250) % 256) + "." + std::to_string(n % 250 + 2);
}

void ControllerManager::reconcile_one(Kind k, const std::string& item) {
  Owner o{k, item};
  current_ = &o;
  current_cleared_ = false;
  ++eval_no_;
  now_ = SteadyClock::now();
  auto t0 = now_;
  try {
    ctls_[k]->reconcile(*this, item);
  } catch (const std::exception& e) {
    spdlog::error("controller {} failed on {}: {}", ctls_[k]->name(), item, e.what());
  }
  // Timers this item consulted before but not now: their condition went away.
  std::string owner = owner_key(k, item);
  if (auto it = timers_of_.find(owner); it != timers_of_.end()) {
    std::vector<std::string> keep;
    for (const auto& key : it->second) {
      auto t = timers_.find(key);
      if (t == timers_.end() || t->second.owner != owner) continue;
      if (t->second.touched != eval_no_) {
        timers_.erase(t);
        continue;
      }
      keep.push_back(key);
    }
    if (keep.empty())
      timers_of_.erase(it);
    else
      it->second = std::move(keep);
  }
  if (current_cleared_) deferred_.push_back(o);
  current_ = nullptr;
  uint64_t us = micros(SteadyClock::now() - t0);
  Stats& s = stats_[k];
  ++s.items;
  s.busy_us += us;
  s.max_item_us = std::max(s.max_item_us, us);
}

void ControllerManager::check_external_changes() {
  bool reach = ctx_.dpu_reachable.load();
  if (reach != dpu_reachable_) {
    dpu_reachable_ = reach;
    for (auto& c : ctls_) c->on_reachability(*this);
  }
  uint64_t ks = ctx_.knobs.seq.load();
  if (ks != knobs_seq_) {
    knobs_seq_ = ks;
    for (auto& c : ctls_) c->on_knobs(*this);
  }
  uint64_t ds = ctx_.delays.seq.load();
  if (ds != delays_seq_) {
    // A delay changed: every pending timer is looked at again with the new value.
    delays_seq_ = ds;
    for (const auto& [owner, keys] : timers_of_) {
      auto bar = owner.find('|');
      enqueue(static_cast<Kind>(std::stoi(owner.substr(0, bar))), owner.substr(bar + 1));
    }
  }
}

bool ControllerManager::step(SteadyClock::time_point budget_end, int& rounds) {
  now_ = SteadyClock::now();
  check_external_changes();
  while (!wakes_.empty() && wakes_.top().at <= now_) {
    enqueue(wakes_.top().kind, wakes_.top().item);
    wakes_.pop();
  }
  // A round reconciles, controller by controller, the items queued when it reached that
  // controller; it may span several chunks.
  int& kind = round_kind_;
  size_t& left = round_left_;
  bool& any = round_any_;
  for (;;) {
    Queue& q = queues_[kind];
    if (left == static_cast<size_t>(-1)) left = q.items.size();
    while (left > 0 && !q.items.empty()) {
      std::string item = std::move(q.items.front());
      q.items.pop_front();
      q.queued.erase(item);
      --left;
      any = true;
      reconcile_one(static_cast<Kind>(kind), item);
      if (SteadyClock::now() >= budget_end) return true;
    }
    left = static_cast<size_t>(-1);
    if (++kind < kKinds) continue;
    kind = 0;
    ++rounds;
    bool worked = any;
    any = false;
    bool queued = false;
    for (const auto& qq : queues_) queued = queued || !qq.items.empty();
    if (!worked || !queued || rounds >= kMaxRounds) return false;
  }
}

void ControllerManager::run() {
  SteadyClock::time_point last_batch{};
  SteadyClock::time_point next_wake = SteadyClock::time_point::max();
  const auto tick = std::chrono::milliseconds(tick_ms_);
  while (!stop_) {
    {
      std::unique_lock<std::mutex> wl(wake_mu_);
      if (next_wake == SteadyClock::time_point::max())
        wake_cv_.wait(wl, [&] { return stop_.load() || work_; });
      else
        wake_cv_.wait_until(wl, next_wake, [&] { return stop_.load() || work_; });
      work_ = false;
      // The controllers react at most once per tick.
      if (!stop_ && SteadyClock::now() < last_batch + tick)
        wake_cv_.wait_until(wl, last_batch + tick, [&] { return stop_.load(); });
    }
    if (stop_) break;
    last_batch = SteadyClock::now();
    int rounds = 0;
    bool more = true;
    bool first = true;
    while (more && !stop_) {
      std::unique_lock<std::mutex> l(ctx_.store.mutex());
      auto t0 = SteadyClock::now();
      if (first) {
        round_kind_ = 0;
        round_left_ = static_cast<size_t>(-1);
        round_any_ = false;
        first = false;
      }
      more = step(t0 + kStepBudget, rounds);
      if (!more) {
        // Items whose timer fired and was cleared are looked at again in the next batch.
        std::vector<Owner> again;
        again.swap(deferred_);
        for (const auto& o : again) enqueue(o.kind, o.item);
        bool queued = false;
        for (const auto& q : queues_) queued = queued || !q.items.empty();
        next_wake = wakes_.empty() ? SteadyClock::time_point::max() : wakes_.top().at;
        if (queued) notify_work();
        ++batches_;
      }
      uint64_t hold = micros(SteadyClock::now() - t0);
      ++chunks_;
      max_hold_us_ = std::max(max_hold_us_, hold);
      int b = hold < 500     ? 0
              : hold < 1000  ? 1
              : hold < 2000  ? 2
              : hold < 5000  ? 3
              : hold < 10000 ? 4
                             : 5;
      ++hold_hist_[b];
      if (hold >= 10000) ++long_holds_;
      l.unlock();
      // Let the API threads that queued on the mutex in the meantime go first: std::mutex is not
      // fair, and a thread woken by the unlock needs a core before it can take the lock; giving
      // up the CPU briefly (not just yielding) lets it in (measured in bench/sim_fleet.py).
      if (more) std::this_thread::sleep_for(kHandoff);
    }
  }
}

json ControllerManager::stats() {
  std::lock_guard<std::mutex> l(ctx_.store.mutex());
  json per = json::object();
  for (int k = 0; k < kKinds; ++k)
    per[ctls_[k]->name()] = {{"items", stats_[k].items},
                             {"busy_us", stats_[k].busy_us},
                             {"max_item_us", stats_[k].max_item_us},
                             {"queued", queues_[k].items.size()}};
  return json{{"max_hold_us", max_hold_us_},
              {"hold_histogram_ms",
               {{"<0.5", hold_hist_[0]},
                {"<1", hold_hist_[1]},
                {"<2", hold_hist_[2]},
                {"<5", hold_hist_[3]},
                {"<10", hold_hist_[4]},
                {">=10", hold_hist_[5]}}},
              {"chunks", chunks_},
              {"batches", batches_},
              {"events", events_seen_},
              {"timers", timers_.size()},
              {"tick_ms", tick_ms_},
              {"controllers", per}};
}

void ControllerManager::reset_stats() {
  std::lock_guard<std::mutex> l(ctx_.store.mutex());
  for (auto& s : stats_) s = Stats{};
  max_hold_us_ = chunks_ = batches_ = long_holds_ = events_seen_ = 0;
  for (auto& h : hold_hist_) h = 0;
}

void ControllerManager::resync_all() {
  std::lock_guard<std::mutex> l(ctx_.store.mutex());
  for (auto& c : ctls_) c->enqueue_all(*this);
}

bool ControllerManager::idle() {
  std::lock_guard<std::mutex> l(ctx_.store.mutex());
  if (!deferred_.empty()) return false;
  for (const auto& q : queues_)
    if (!q.items.empty()) return false;
  return true;
}

}  // namespace dpfsim
