#include "watch_hub.h"

#include "store.h"

namespace dpfsim {

std::shared_ptr<WatchStream> WatchHub::open(std::shared_ptr<WatchStream> w) {
  started.fetch_add(1);
  std::lock_guard<std::mutex> l(mu_);
  open_.insert(w);
  return w;
}

void WatchHub::close(const std::shared_ptr<WatchStream>& w) {
  std::lock_guard<std::mutex> l(mu_);
  open_.erase(w);
}

size_t WatchHub::cut(std::optional<ClusterId> cluster, WatchStream::Cut how, Store& store,
                     bool partition) {
  std::vector<std::shared_ptr<WatchStream>> hit;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& w : open_)
      if (!cluster || w->cluster == *cluster) {
        int expected = WatchStream::kNone;
        if (w->cut.compare_exchange_strong(expected, how)) hit.push_back(w);
      }
  }
  for (const auto& w : hit) {
    // Taking the log's mutex orders the flag before the wakeup: a stream cannot check the flag,
    // miss it and then sleep through the notification.
    EventLog& log = store.log(*w->ri);
    { std::lock_guard<std::mutex> l(log.mutex()); }
    log.cv().notify_all();
  }
  (partition ? partition_cuts : cuts).fetch_add(hit.size());
  return hit.size();
}

json WatchHub::stats(const Store& store) const {
  json list = json::array();
  json open_by = json{{"management", 0}, {"dpu", 0}};
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& w : open_) {
      open_by[cluster_name(w->cluster)] = open_by[cluster_name(w->cluster)].get<long>() + 1;
      json j{{"cluster", cluster_name(w->cluster)},
             {"resource", w->ri->plural},
             {"namespace", w->ns},
             {"labelSelector", w->label_selector},
             {"fieldSelector", w->field_selector},
             {"allowWatchBookmarks", w->bookmarks},
             {"started", w->started},
             {"remote_port", w->remote_port},
             {"resourceVersion", std::to_string(w->rv.load())},
             {"events", w->events.load()},
             {"bookmarks", w->bookmarks_sent.load()}};
      list.push_back(j);
    }
  }
  return json{{"open", open_by["management"].get<long>() + open_by["dpu"].get<long>()},
              {"open_by_cluster", open_by},
              {"started", started.load()},
              {"events_sent", events_sent.load()},
              {"bookmarks_sent", bookmarks_sent.load()},
              {"expired", expired.load()},
              {"continue_expired", store.continue_expired()},
              {"fell_behind", fell_behind.load()},
              {"timeouts", timeouts.load()},
              {"cuts", cuts.load()},
              {"partition_cuts", partition_cuts.load()},
              {"client_gone", client_gone.load()},
              {"streams", list}};
}

void WatchHub::reset_counters() {
  for (auto* c : {&started, &events_sent, &bookmarks_sent, &expired, &fell_behind, &timeouts, &cuts,
                  &partition_cuts, &client_gone})
    c->store(0);
}

}  // namespace dpfsim
