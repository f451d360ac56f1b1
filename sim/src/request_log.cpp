#include "request_log.h"

#include "request_log_file.h"

namespace dpfsim {

RequestLog::RequestLog(size_t capacity) : capacity_(capacity) {}
RequestLog::~RequestLog() = default;

void RequestLog::set_file(std::unique_ptr<RequestLogFile> file) {
  std::lock_guard<std::mutex> l(mu_);
  file_ = std::move(file);
}

void RequestLog::count(const std::string& cluster, const std::string& key) {
  std::lock_guard<std::mutex> l(mu_);
  ++counts_[cluster][key];
  ++total_;
}

uint64_t RequestLog::next_seq() {
  std::lock_guard<std::mutex> l(mu_);
  return ++seq_;
}

void RequestLog::record(RequestRecord r) {
  std::lock_guard<std::mutex> l(mu_);
  if (file_) file_->append(r);
  recent_.push_back(std::move(r));
  while (recent_.size() > capacity_) recent_.pop_front();
}

json RequestLog::counts() const {
  std::lock_guard<std::mutex> l(mu_);
  json out = json::object();
  out["management"] = json::object();
  out["dpu"] = json::object();
  for (const auto& [c, m] : counts_)
    for (const auto& [k, v] : m) out[c][k] = v;
  out["total"] = total_;
  return out;
}

void RequestLog::reset_counts() {
  std::lock_guard<std::mutex> l(mu_);
  counts_.clear();
  total_ = 0;
}

json RequestLog::recent(size_t limit) const {
  std::lock_guard<std::mutex> l(mu_);
  json arr = json::array();
  size_t start = recent_.size() > limit ? recent_.size() - limit : 0;
  for (size_t i = start; i < recent_.size(); ++i) {
    const auto& r = recent_[i];
    json j{{"seq", r.seq},
           {"time", r.time},
           {"cluster", r.cluster},
           {"method", r.method},
           {"verb", r.verb},
           {"resource", r.resource},
           {"path", r.path},
           {"query", r.query},
           {"content_type", r.content_type},
           {"status", r.status},
           {"remote_port", r.remote_port},
           {"user_agent", r.user_agent}};
    if (!r.body.empty() || r.method != "GET") j["body"] = r.body;
    if (!r.fault.empty()) j["fault"] = r.fault;
    arr.push_back(j);
  }
  return arr;
}

void RequestLog::clear_recent() {
  std::lock_guard<std::mutex> l(mu_);
  recent_.clear();
}

}  // namespace dpfsim
