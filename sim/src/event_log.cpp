#include "event_log.h"

#include <algorithm>
#include <stdexcept>

namespace dpfsim {

namespace {

struct ConfigField {
  const char* name;
  std::atomic<long> WatchConfig::*field;
  long min, max, def;
};

const ConfigField kConfigFields[] = {
    {"window_events", &WatchConfig::window_events, 1, 10000000, WatchConfig::kDefaultWindowEvents},
    {"window_ms", &WatchConfig::window_ms, 1, 86400000, WatchConfig::kDefaultWindowMs},
    {"bookmark_ms", &WatchConfig::bookmark_ms, 10, 86400000, WatchConfig::kDefaultBookmarkMs},
    {"continue_ttl_ms", &WatchConfig::continue_ttl_ms, 1, 86400000,
     WatchConfig::kDefaultContinueTtlMs},
};

}  // namespace

json WatchConfig::to_json() const {
  json j = json::object();
  for (const auto& f : kConfigFields) j[f.name] = (this->*f.field).load();
  return j;
}

void WatchConfig::apply(const json& j) {
  if (!j.is_object()) throw std::invalid_argument("watch config must be a JSON object");
  for (auto& [k, v] : j.items()) {
    const ConfigField* f = nullptr;
    for (const auto& c : kConfigFields)
      if (k == c.name) f = &c;
    if (!f) throw std::invalid_argument("unknown watch config key " + k);
    if (!v.is_number_integer() || v.get<long long>() < f->min || v.get<long long>() > f->max)
      throw std::invalid_argument(k + " must be an integer from " + std::to_string(f->min) +
                                  " to " + std::to_string(f->max));
  }
  for (auto& [k, v] : j.items())
    for (const auto& c : kConfigFields)
      if (k == c.name) (this->*c.field).store(v.get<long>());
}

void WatchConfig::restore_defaults() {
  for (const auto& c : kConfigFields) (this->*c.field).store(c.def);
}

const std::string& LogEntry::obj_json() const {
  std::call_once(obj_once_, [this] { obj_json_ = obj->dump(); });
  return obj_json_;
}

const std::string& LogEntry::prev_as_deleted_json() const {
  std::call_once(prev_once_, [this] {
    if (!prev) {
      prev_json_ = obj_json();
      return;
    }
    json copy = *prev;
    copy["metadata"]["resourceVersion"] = std::to_string(rv);
    prev_json_ = copy.dump();
  });
  return prev_json_;
}

void EventLog::evict_l(const WatchConfig& cfg, SteadyClock::time_point now) {
  const size_t max_events = static_cast<size_t>(std::max(1L, cfg.window_events.load()));
  const auto max_age = std::chrono::milliseconds(cfg.window_ms.load());
  while (!events_.empty() && (events_.size() > max_events || now - events_.front()->at > max_age)) {
    last_evicted_rv_ = events_.front()->rv;
    evicted_ = true;
    events_.pop_front();
  }
}

uint64_t EventLog::oldest_valid_l() const {
  if (!evicted_) return list_rv_;
  return events_.empty() ? last_evicted_rv_ : events_.front()->rv - 1;
}

void EventLog::push(EntryPtr e, const WatchConfig& cfg) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto now = e->at;
    events_.push_back(std::move(e));
    evict_l(cfg, now);
  }
  cv_.notify_all();
}

void EventLog::reset(uint64_t rv) {
  {
    std::lock_guard<std::mutex> l(mu_);
    events_.clear();
    list_rv_ = rv;
    evicted_ = false;
    last_evicted_rv_ = rv;
  }
  cv_.notify_all();
}

uint64_t EventLog::oldest_valid(const WatchConfig& cfg) {
  std::lock_guard<std::mutex> l(mu_);
  evict_l(cfg, SteadyClock::now());
  return oldest_valid_l();
}

bool EventLog::since(uint64_t after, size_t max, std::vector<EntryPtr>& out,
                     const WatchConfig& cfg) {
  std::lock_guard<std::mutex> l(mu_);
  evict_l(cfg, SteadyClock::now());
  if (after < oldest_valid_l()) return false;
  auto it = std::upper_bound(events_.begin(), events_.end(), after,
                             [](uint64_t v, const EntryPtr& e) { return v < e->rv; });
  for (; it != events_.end() && out.size() < max; ++it) out.push_back(*it);
  return true;
}

size_t EventLog::size() {
  std::lock_guard<std::mutex> l(mu_);
  return events_.size();
}

}  // namespace dpfsim
