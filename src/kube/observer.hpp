// What the Kubernetes client reports about every HTTP attempt, for metrics.
// The client knows nothing of where the numbers go: the worker (src/pg)
// implements RequestObserver over shared memory.
#pragma once

#include <cstdint>
#include <string_view>

namespace extsvc::kube {

struct RequestEvent {
  std::string_view cluster;  // the label given to Client::set_observer ("management", "dpu")
  std::string_view verb;     // GET, LIST (each page of a list), POST, PUT, PATCH, DELETE
  int http_status = 0;       // 0: no HTTP response (transport error, timeout, TLS, interrupted)
  double seconds = 0;        // wall time of the attempt (connect, TLS, transfer)
  // The server's clock (issue 28, part 3): the response's Date header in seconds since the Unix
  // epoch (0: no response, no Date header or not an IMF-fixdate) and our wall clock, in seconds
  // since the Unix epoch, when the response's headers arrived (core::clock_skew_seconds).
  int64_t server_date = 0;
  double received_at = 0;
  // Our wall clock, in seconds since the Unix epoch, when the request was handed to curl to be
  // sent (on a kept connection curl writes it before that call returns): where the time from a
  // claim to the server's receipt goes (issue 26, part 4). curl's pretransfer time is no good
  // for this: measured, it came after dpfsim had received the request.
  double sent_at = 0;
};

class RequestObserver {
 public:
  RequestObserver() = default;
  virtual ~RequestObserver() = default;
  RequestObserver(const RequestObserver&) = delete;
  RequestObserver& operator=(const RequestObserver&) = delete;
  // Called once per HTTP attempt (a 401 retry and every list page are
  // attempts of their own), on the calling thread, after the attempt ended.
  // Must not throw and should not block.
  virtual void on_request(const RequestEvent& event) noexcept = 0;
};

}  // namespace extsvc::kube
