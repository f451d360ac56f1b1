#include "request_log_file.h"

#include <cerrno>
#include <cstring>
#include <ctime>

namespace dpfsim {

std::string rfc3339_micros(std::chrono::system_clock::time_point t) {
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(us / 1000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[80];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<long long>(us % 1000000));
  return buf;
}

RequestLogFile::~RequestLogFile() {
  if (file_ != nullptr) std::fclose(file_);
}

bool RequestLogFile::open(const std::string& path, std::string* error) {
  file_ = std::fopen(path.c_str(), "a");
  if (file_ == nullptr) {
    *error = path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

json RequestLogFile::line_of(const RequestRecord& r) {
  json j{{"seq", r.seq},         {"time", rfc3339_micros(r.at)},
         {"cluster", r.cluster}, {"method", r.method},
         {"verb", r.verb},       {"resource", r.resource},
         {"path", r.path},       {"query", r.query},
         {"status", r.status},   {"user_agent", r.user_agent}};
  if (!r.fault.empty()) j["fault"] = r.fault;
  // a POST's path names only the collection: the new object's name says which commit it served
  // (bench/commit_burst.py matches each create's commit with its POST)
  if (r.method == "POST" && !r.body.empty()) {
    const json body = json::parse(r.body, nullptr, false);
    if (body.is_object() && body.contains("metadata") && body["metadata"].is_object() &&
        body["metadata"].contains("name") && body["metadata"]["name"].is_string())
      j["name"] = body["metadata"]["name"];
  }
  return j;
}

void RequestLogFile::append(const RequestRecord& r) {
  const std::string line = line_of(r).dump() + "\n";
  std::lock_guard<std::mutex> l(mu_);
  if (file_ == nullptr) return;
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

}  // namespace dpfsim
