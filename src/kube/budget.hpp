// What the calls of one pass (or of a process between passes) may spend (issue 24): until when a
// call may start (the row lease's deadline), whether a write may leave now (the lease fence),
// whether to stop at once (a shutdown), and how to wait (in the worker: on the process latch, so
// that SIGTERM and postmaster death end a throttled burst or a slow request at once). One value,
// handed to the client and the reconcilers, instead of a fence and an interrupt hook on each of
// them.
#pragma once

#include <chrono>
#include <functional>
#include <optional>

namespace extsvc::kube {

class Multi;

class Budget {
 public:
  using Clock = std::chrono::steady_clock;
  using Check = std::function<bool()>;
  using Wait = std::function<void(Clock::duration)>;
  // Waits until a socket of the multi is ready, its timer is due or the duration passed; may
  // return early (a latch set). The caller pumps the multi afterwards.
  using MultiWait = std::function<void(Multi&, Clock::duration)>;

  // Unbounded, unfenced, never stops, waits with std::this_thread::sleep_for (and on a multi's
  // sockets with poll(2)).
  Budget() = default;

  // Copies with one part replaced.
  // The last moment a call may start (a row lease's expiry less one call's budget).
  Budget with_deadline(Clock::time_point last_start) const;
  // Whatever else must allow a write (the site Lease); empty = nothing else.
  Budget with_fence(Check fence) const;
  // A pending shutdown; empty = never.
  Budget with_stop(Check stop) const;
  // Waits up to the duration and may return early (a latch set); empty = sleep_for.
  Budget with_wait(Wait wait) const;
  // How a request waits for its transfer (in the worker: the latch, postmaster death and the
  // multi's sockets in one WaitEventSet); empty = Multi::poll_wait.
  Budget with_multi_wait(MultiWait wait) const;

  // A deadline bounds the calls: they run under a lease.
  bool bounded() const { return deadline_.has_value(); }
  const std::optional<Clock::time_point>& deadline() const { return deadline_; }

  // The lease fence: a call may start now (the deadline is not past, the fence says yes). A
  // throwing fence answers no: nothing is sent on doubt.
  bool may_write() const;
  // Stop now. A throwing check answers no (the call goes on and meets the fence or its timeout).
  bool stop() const;
  // Waits up to `d` through the wait function (a throwing one falls back to sleep_for).
  void wait(Clock::duration d) const;
  // Waits on `multi` up to `d` through the multi wait function (a throwing one falls back to
  // Multi::poll_wait).
  void wait_on(Multi& multi, Clock::duration d) const;

 private:
  std::optional<Clock::time_point> deadline_;
  Check fence_;
  Check stop_;
  Wait wait_;
  MultiWait multi_wait_;
};

}  // namespace extsvc::kube
