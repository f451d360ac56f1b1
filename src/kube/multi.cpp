#include "kube/multi.hpp"

#include <curl/curl.h>
#include <poll.h>

#include <algorithm>
#include <mutex>

#include "kube/detail/callback_probe.hpp"

namespace extsvc::kube {

struct MultiCallbacks {
  static int socket_cb(CURL*, curl_socket_t fd, int what, void* userp, void*) {
    auto* self = static_cast<Multi*>(userp);
    try {
      detail::probe("socket");
      if (what == CURL_POLL_REMOVE) {
        if (self->sockets_.erase(fd) > 0) ++self->generation_;
        return 0;
      }
      Multi::Socket s{fd, what == CURL_POLL_IN || what == CURL_POLL_INOUT,
                      what == CURL_POLL_OUT || what == CURL_POLL_INOUT};
      auto it = self->sockets_.find(fd);
      if (it == self->sockets_.end() || it->second.read != s.read || it->second.write != s.write) {
        self->sockets_[fd] = s;
        ++self->generation_;
      }
    } catch (...) {
      // The socket set no longer says what curl waits for, and curl cannot list it again:
      // pump() ends every transfer with an error (their owners start again).
      self->lost_sockets_ = true;
    }
    return 0;
  }
  static int timer_cb(CURLM*, long timeout_ms, void* userp) {
    auto* self = static_cast<Multi*>(userp);
    if (timeout_ms < 0)
      self->timer_.reset();
    else
      self->timer_ = Multi::Clock::now() + std::chrono::milliseconds(timeout_ms);
    return 0;
  }
};

namespace {
CURLM* handle(void* m) {
  return static_cast<CURLM*>(m);
}
}  // namespace

long wait_ms_until(std::chrono::steady_clock::time_point due,
                   std::chrono::steady_clock::time_point now) {
  // rounded up: 0.9 ms left is 1, not 0. Truncated, a caller waited 0 ms, found the timer not
  // yet due, and spun until it was (a worker was seen making a dozen empty waits in 1.3 ms each
  // time curl's timer came due, issue 26, part 4)
  if (due <= now) return 0;
  return static_cast<long>(std::chrono::ceil<std::chrono::milliseconds>(due - now).count());
}

Multi::Multi() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  CURLM* m = curl_multi_init();
  multi_ = m;
  if (m != nullptr) {
    curl_multi_setopt(m, CURLMOPT_SOCKETFUNCTION, &MultiCallbacks::socket_cb);
    curl_multi_setopt(m, CURLMOPT_SOCKETDATA, this);
    curl_multi_setopt(m, CURLMOPT_TIMERFUNCTION, &MultiCallbacks::timer_cb);
    curl_multi_setopt(m, CURLMOPT_TIMERDATA, this);
  }
}

Multi::~Multi() {
  for (auto& [easy, owner] : owners_)
    curl_multi_remove_handle(handle(multi_), static_cast<CURL*>(easy));
  owners_.clear();
  if (multi_ != nullptr) curl_multi_cleanup(handle(multi_));
}

std::vector<Multi::Socket> Multi::sockets() const {
  std::vector<Socket> out;
  out.reserve(sockets_.size());
  for (const auto& [fd, s] : sockets_) out.push_back(s);
  return out;
}

long Multi::timeout_ms() const {
  if (!timer_) return -1;
  return wait_ms_until(*timer_, Clock::now());
}

void Multi::poll_wait(long timeout_ms) const {
  const long timer = this->timeout_ms();
  if (timer >= 0) timeout_ms = std::min(timeout_ms, timer);
  timeout_ms = std::max(0L, timeout_ms);
  std::vector<pollfd> fds;
  fds.reserve(sockets_.size());
  for (const auto& [fd, s] : sockets_)
    fds.push_back({fd, static_cast<short>((s.read ? POLLIN : 0) | (s.write ? POLLOUT : 0)), 0});
  // an interrupted poll (EINTR) returns early: the caller pumps and waits again
  (void)::poll(fds.data(), fds.size(), static_cast<int>(std::min(timeout_ms, 60000L)));
}

void Multi::action(int fd, int mask) {
  int running = 0;
  curl_multi_socket_action(handle(multi_), fd, mask, &running);
}

void Multi::pump() {
  if (multi_ == nullptr) return;
  if (!sockets_.empty()) {
    std::vector<pollfd> fds;
    fds.reserve(sockets_.size());
    for (const auto& [fd, s] : sockets_)
      fds.push_back({fd, static_cast<short>((s.read ? POLLIN : 0) | (s.write ? POLLOUT : 0)), 0});
    if (::poll(fds.data(), fds.size(), 0) > 0) {
      for (const auto& p : fds) {
        if (p.revents == 0) continue;
        int mask = 0;
        if (p.revents & (POLLIN | POLLHUP)) mask |= CURL_CSELECT_IN;
        if (p.revents & POLLOUT) mask |= CURL_CSELECT_OUT;
        if (p.revents & (POLLERR | POLLNVAL)) mask |= CURL_CSELECT_ERR;
        action(p.fd, mask);
      }
    }
  }
  if (timer_ && Clock::now() >= *timer_) {
    timer_.reset();
    action(CURL_SOCKET_TIMEOUT, 0);
  }
  collect_done();
  if (lost_sockets_) abort_all();
}

void Multi::abort_all() {
  std::vector<std::pair<void*, Owner*>> all(owners_.begin(), owners_.end());
  for (auto [easy, owner] : all) {
    curl_multi_remove_handle(handle(multi_), static_cast<CURL*>(easy));
    owners_.erase(easy);
    owner->on_transfer_done(CURLE_OUT_OF_MEMORY);
  }
  // removing the handles closed or released their sockets (a callback that failed meanwhile
  // changes nothing): the set starts empty again
  sockets_.clear();
  lost_sockets_ = false;
  ++generation_;
}

void Multi::collect_done() {
  int left = 0;
  std::vector<std::pair<void*, int>> done;
  while (CURLMsg* msg = curl_multi_info_read(handle(multi_), &left))
    if (msg->msg == CURLMSG_DONE) done.emplace_back(msg->easy_handle, msg->data.result);
  for (auto [easy, code] : done) {
    auto it = owners_.find(easy);
    if (it == owners_.end()) continue;
    Owner* owner = it->second;
    curl_multi_remove_handle(handle(multi_), static_cast<CURL*>(easy));
    owners_.erase(it);
    owner->on_transfer_done(code);
  }
}

bool Multi::add(void* easy, Owner* owner) {
  if (multi_ == nullptr) return false;
  if (curl_multi_add_handle(handle(multi_), static_cast<CURL*>(easy)) != CURLM_OK) return false;
  owners_[easy] = owner;
  return true;
}

void Multi::remove(void* easy) {
  auto it = owners_.find(easy);
  if (it == owners_.end()) return;
  curl_multi_remove_handle(handle(multi_), static_cast<CURL*>(easy));
  owners_.erase(it);
}

}  // namespace extsvc::kube

namespace extsvc::kube::detail {
CallbackProbe callback_probe = nullptr;
}  // namespace extsvc::kube::detail
