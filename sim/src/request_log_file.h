// dpfsim --request-log FILE: every request as one JSON line, appended and flushed as it is
// answered, so a long run can prove who wrote what and when (issue 25: no write after a lost
// Lease). Fields: seq, time (RFC 3339, UTC, microseconds: when the request arrived), cluster,
// method, verb, resource, path, query, status, user_agent, fault (when one was injected).
#pragma once

#include <cstdio>
#include <mutex>
#include <string>

#include "request_log.h"

namespace dpfsim {

class RequestLogFile {
 public:
  RequestLogFile() = default;
  ~RequestLogFile();
  RequestLogFile(const RequestLogFile&) = delete;
  RequestLogFile& operator=(const RequestLogFile&) = delete;

  // Opens FILE for appending; false (and *error) when it cannot.
  bool open(const std::string& path, std::string* error);
  void append(const RequestRecord& r);
  static json line_of(const RequestRecord& r);

 private:
  std::mutex mu_;
  FILE* file_ = nullptr;
};

// RFC 3339 in UTC with microseconds.
std::string rfc3339_micros(std::chrono::system_clock::time_point t);

}  // namespace dpfsim
