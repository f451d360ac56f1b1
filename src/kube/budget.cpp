#include "kube/budget.hpp"

#include <thread>
#include <utility>

#include "kube/multi.hpp"

namespace extsvc::kube {

Budget Budget::with_deadline(Clock::time_point last_start) const {
  Budget b = *this;
  b.deadline_ = last_start;
  return b;
}

Budget Budget::with_fence(Check fence) const {
  Budget b = *this;
  b.fence_ = std::move(fence);
  return b;
}

Budget Budget::with_stop(Check stop) const {
  Budget b = *this;
  b.stop_ = std::move(stop);
  return b;
}

Budget Budget::with_wait(Wait wait) const {
  Budget b = *this;
  b.wait_ = std::move(wait);
  return b;
}

Budget Budget::with_multi_wait(MultiWait wait) const {
  Budget b = *this;
  b.multi_wait_ = std::move(wait);
  return b;
}

bool Budget::may_write() const {
  if (deadline_ && Clock::now() > *deadline_) return false;
  if (!fence_) return true;
  try {
    return fence_();
  } catch (...) {
    return false;
  }
}

bool Budget::stop() const {
  if (!stop_) return false;
  try {
    return stop_();
  } catch (...) {
    return false;
  }
}

void Budget::wait(Clock::duration d) const {
  if (d <= Clock::duration::zero()) return;
  if (wait_) {
    try {
      wait_(d);
      return;
    } catch (...) {
      // a wait that failed still waits: a throttled caller must not spin
    }
  }
  std::this_thread::sleep_for(d);
}

void Budget::wait_on(Multi& multi, Clock::duration d) const {
  if (d < Clock::duration::zero()) d = Clock::duration::zero();
  if (multi_wait_) {
    try {
      multi_wait_(multi, d);
      return;
    } catch (...) {
      // as wait(): a failed wait still waits, on the sockets themselves
    }
  }
  multi.poll_wait(std::chrono::ceil<std::chrono::milliseconds>(d).count());
}

}  // namespace extsvc::kube
