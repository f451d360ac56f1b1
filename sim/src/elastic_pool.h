// The task queue of the Kubernetes endpoints. httplib runs a connection (its whole keep-alive
// life, or a watch stream) on one pool thread, so a fixed pool lets long-lived watches and idle
// keep-alive connections starve new clients. This pool starts a thread whenever no idle one is
// left, so a connection never queues behind others (up to max_threads; idle threads stay).
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dpfsim {

class ElasticPool : public httplib::TaskQueue {
 public:
  ElasticPool(size_t initial_threads, size_t max_threads) : max_(max_threads) {
    std::lock_guard<std::mutex> l(mu_);
    for (size_t i = 0; i < initial_threads; ++i) spawn_l();
  }
  ~ElasticPool() override = default;

  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      jobs_.push_back(std::move(fn));
      if (jobs_.size() > idle_ && threads_.size() < max_) spawn_l();
    }
    cv_.notify_one();
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    std::vector<std::thread> ts;
    {
      std::lock_guard<std::mutex> l(mu_);
      ts.swap(threads_);
    }
    for (auto& t : ts) t.join();
  }

  size_t threads() {
    std::lock_guard<std::mutex> l(mu_);
    return threads_.size();
  }

 private:
  // A new thread counts as idle from the start, so a burst of enqueues does not over-spawn.
  void spawn_l() {
    ++idle_;
    threads_.emplace_back([this] { work(); });
  }

  void work() {
    bool first = true;
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> l(mu_);
        if (!first) ++idle_;
        first = false;
        cv_.wait(l, [&] { return stop_ || !jobs_.empty(); });
        --idle_;
        if (stop_ && jobs_.empty()) return;
        fn = std::move(jobs_.front());
        jobs_.pop_front();
      }
      fn();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  size_t max_;
  bool stop_ = false;
};

}  // namespace dpfsim
