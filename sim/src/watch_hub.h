// The open watch streams of both clusters: counters (GET /watches), and the cut that ends
// streams mid-flight (POST /watch-cut, a partition of the DPU cluster, shutdown).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "resources.h"
#include "util.h"

namespace dpfsim {

class Store;

struct WatchStream {
  enum Cut { kNone = 0, kDrop = 1, kEnd = 2 };
  ClusterId cluster = ClusterId::Management;
  const ResourceInfo* ri = nullptr;
  std::string ns, label_selector, field_selector;
  bool bookmarks = false;
  std::string started;  // RFC 3339
  int remote_port = 0;
  std::atomic<int> cut{kNone};
  std::atomic<uint64_t> rv{0};  // last resourceVersion sent (or the start)
  std::atomic<uint64_t> events{0}, bookmarks_sent{0};
};

class WatchHub {
 public:
  std::shared_ptr<WatchStream> open(std::shared_ptr<WatchStream> w);
  void close(const std::shared_ptr<WatchStream>& w);
  // Ends every open stream of the cluster (both when unset): kDrop breaks the connection
  // without the closing chunk, kEnd ends the response cleanly. Returns how many.
  size_t cut(std::optional<ClusterId> cluster, WatchStream::Cut how, Store& store,
             bool partition = false);
  json stats(const Store& store) const;
  void reset_counters();

  std::atomic<uint64_t> started{0}, events_sent{0}, bookmarks_sent{0}, expired{0}, fell_behind{0},
      timeouts{0}, cuts{0}, partition_cuts{0}, client_gone{0};

 private:
  mutable std::mutex mu_;
  std::set<std::shared_ptr<WatchStream>> open_;
};

}  // namespace dpfsim
