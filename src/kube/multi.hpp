// libcurl's multi interface driven by the host's event loop: the PostgreSQL worker waits on its
// latch and on the sockets listed here (a WaitEventSet), then calls pump(). No threads: every
// transfer makes progress only inside pump(), on the caller's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace extsvc::kube {

// Whole milliseconds from `now` until `due`, rounded up (0 once due): what an event loop may wait
// for a timer without waking before it and spinning until it comes due.
long wait_ms_until(std::chrono::steady_clock::time_point due,
                   std::chrono::steady_clock::time_point now);

class Multi {
 public:
  struct Socket {
    int fd = -1;
    bool read = false;
    bool write = false;
  };
  using Clock = std::chrono::steady_clock;

  Multi();
  ~Multi();
  Multi(const Multi&) = delete;
  Multi& operator=(const Multi&) = delete;

  // The sockets curl wants watched and their interest. generation() changes whenever this set
  // changes, so a caller can keep its wait set until then.
  std::vector<Socket> sockets() const;
  uint64_t generation() const { return generation_; }
  // Milliseconds until curl's next timer, rounded up (0: due now), or -1 when it has none.
  long timeout_ms() const;
  // Blocks in poll(2) until one of sockets() is ready, curl's timer is due or `timeout_ms` passed
  // (whichever comes first); the caller then pumps. The wait of a request outside PostgreSQL
  // (tests, tools); the worker waits on its latch too (Budget::with_multi_wait).
  void poll_wait(long timeout_ms) const;

  // Non-blocking: handles every socket that is ready (poll(2) with timeout 0) and every expired
  // timer, then collects the transfers that ended (their on_done runs here, outside any curl
  // callback, so it may start or end transfers).
  void pump();

  // For AsyncGet (client_async.cpp): the easy handle joins or leaves the multi handle; `done`
  // is called from pump() when the transfer ends, with its CURLcode.
  class Owner {
   public:
    virtual ~Owner() = default;
    virtual void on_transfer_done(int curl_code) = 0;
  };
  // `easy` is a CURL* (kept opaque here so this header does not need curl.h).
  bool add(void* easy, Owner* owner);
  void remove(void* easy);
  size_t transfers() const { return owners_.size(); }

 private:
  friend struct MultiCallbacks;
  void action(int fd, int mask);
  void collect_done();
  void abort_all();  // a socket callback failed: end every transfer with an error

  void* multi_ = nullptr;  // CURLM*
  std::map<int, Socket> sockets_;
  uint64_t generation_ = 0;
  std::optional<Clock::time_point> timer_;
  std::map<void*, Owner*> owners_;
  bool lost_sockets_ = false;
};

}  // namespace extsvc::kube
