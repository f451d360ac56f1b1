// Per-verb/resource request counters and a ring buffer of recent requests (for tests).
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "util.h"

namespace dpfsim {

struct RequestRecord {
  uint64_t seq = 0;
  std::string time;
  std::string cluster;
  std::string method;
  std::string verb;      // GET LIST WATCH POST PUT PATCH DELETE
  std::string resource;  // plural[/subresource] or "discovery"
  std::string path;
  std::string query;
  std::string content_type;
  std::string body;  // writes only
  int status = 0;    // 0 when the connection was dropped
  std::string fault;
  int remote_port = 0;     // the client's source port: which connection it came on
  std::string user_agent;  // the client's User-Agent header
  std::chrono::system_clock::time_point at{};  // when the request arrived
};

class RequestLogFile;

class RequestLog {
 public:
  explicit RequestLog(size_t capacity = 2000);
  ~RequestLog();
  // --request-log FILE: every recorded request is also appended there (request_log_file.h).
  void set_file(std::unique_ptr<RequestLogFile> file);
  void count(const std::string& cluster, const std::string& key);
  void record(RequestRecord r);
  json counts() const;
  void reset_counts();
  json recent(size_t limit) const;
  void clear_recent();
  uint64_t next_seq();

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::map<std::string, uint64_t>> counts_;
  uint64_t total_ = 0;
  std::deque<RequestRecord> recent_;
  size_t capacity_;
  uint64_t seq_ = 0;
  std::unique_ptr<RequestLogFile> file_;
};

}  // namespace dpfsim
