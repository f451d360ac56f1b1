#include "core/lease_record.hpp"

#include <charconv>
#include <ctime>

#include "core/site.hpp"

namespace extsvc::core {

namespace {

using nlohmann::json;

template <class T>
std::optional<T> number(std::string_view s) {
  T v{};
  if (s.empty()) return std::nullopt;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string text(const json& obj, std::initializer_list<const char*> path) {
  const json* cur = &obj;
  for (const char* k : path) {
    if (!cur->is_object()) return {};
    const auto it = cur->find(k);
    if (it == cur->end()) return {};
    cur = &*it;
  }
  return cur->is_string() ? cur->get<std::string>() : std::string();
}

int integer(const json& obj, std::initializer_list<const char*> path) {
  const json* cur = &obj;
  for (const char* k : path) {
    if (!cur->is_object()) return 0;
    const auto it = cur->find(k);
    if (it == cur->end()) return 0;
    cur = &*it;
  }
  return cur->is_number_integer() ? cur->get<int>() : 0;
}

// "<system_identifier>.<timeline>"
std::optional<std::pair<uint64_t, uint32_t>> system_and_timeline(std::string_view s) {
  const auto dot = s.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const auto sys = number<uint64_t>(s.substr(0, dot));
  const auto tl = number<uint32_t>(s.substr(dot + 1));
  if (!sys || !tl) return std::nullopt;
  return std::make_pair(*sys, *tl);
}

}  // namespace

std::string HolderIdentity::format() const {
  return std::to_string(system_identifier) + "." + std::to_string(timeline) + "/" + database + "/" +
         started + "/" + host;
}

std::optional<HolderIdentity> HolderIdentity::parse(std::string_view s) {
  const auto first = s.find('/');
  const auto last = s.rfind('/');
  if (first == std::string_view::npos || last == first) return std::nullopt;
  const auto before_last = s.rfind('/', last - 1);
  if (before_last == std::string_view::npos || before_last <= first) return std::nullopt;
  const auto st = system_and_timeline(s.substr(0, first));
  if (!st) return std::nullopt;
  HolderIdentity h;
  h.system_identifier = st->first;
  h.timeline = st->second;
  h.database = std::string(s.substr(first + 1, before_last - first - 1));
  h.started = std::string(s.substr(before_last + 1, last - before_last - 1));
  h.host = std::string(s.substr(last + 1));
  if (h.started.empty()) return std::nullopt;
  return h;
}

LeaseRecord LeaseRecord::from_json(const json& lease) {
  LeaseRecord r;
  r.object = lease;
  r.resource_version = text(lease, {"metadata", "resourceVersion"});
  r.holder = text(lease, {"spec", "holderIdentity"});
  r.duration_s = integer(lease, {"spec", "leaseDurationSeconds"});
  r.acquire_time = text(lease, {"spec", "acquireTime"});
  r.renew_time = text(lease, {"spec", "renewTime"});
  r.transitions = integer(lease, {"spec", "leaseTransitions"});
  if (auto st = system_and_timeline(
          text(lease, {"metadata", "annotations", kAnnHighestTimeline.data()}))) {
    HolderIdentity h;
    h.system_identifier = st->first;
    h.timeline = st->second;
    r.highest = h;
  }
  return r;
}

bool LeaseRecord::same_record(const LeaseRecord& o) const {
  return holder == o.holder && duration_s == o.duration_s && acquire_time == o.acquire_time &&
         renew_time == o.renew_time && transitions == o.transitions;
}

const char* to_string(LeaseAction a) {
  switch (a) {
    case LeaseAction::kRenew:
      return "renew";
    case LeaseAction::kAcquire:
      return "acquire";
    case LeaseAction::kPreempt:
      return "preempt";
    case LeaseAction::kWait:
      return "wait";
    case LeaseAction::kDeposed:
      return "deposed";
  }
  return "wait";
}

LeaseAction decide(const LeaseRecord& observed, const HolderIdentity& me, bool expired) {
  if (!observed.holder.empty() && observed.holder == me.format()) return LeaseAction::kRenew;
  // a promoted standby of our cluster got further than we are: whatever the holder now
  if (observed.highest && observed.highest->same_system(me) &&
      observed.highest->timeline > me.timeline)
    return LeaseAction::kDeposed;
  const auto holder = HolderIdentity::parse(observed.holder);
  if (holder && holder->same_system(me)) {
    if (holder->timeline > me.timeline) return LeaseAction::kDeposed;
    if (holder->timeline < me.timeline) return LeaseAction::kPreempt;
  }
  if (observed.holder.empty() || expired) return LeaseAction::kAcquire;
  return LeaseAction::kWait;
}

std::string micro_time(std::chrono::system_clock::time_point t) {
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

std::optional<std::chrono::system_clock::time_point> parse_micro_time(std::string_view text) {
  // 2006-01-02T15:04:05[.000000]Z
  if (text.size() < 20 || text.back() != 'Z' || text[4] != '-' || text[7] != '-' ||
      text[10] != 'T' || text[13] != ':' || text[16] != ':')
    return std::nullopt;
  const auto year = number<int>(text.substr(0, 4)), mon = number<int>(text.substr(5, 2)),
             day = number<int>(text.substr(8, 2)), hour = number<int>(text.substr(11, 2)),
             min = number<int>(text.substr(14, 2)), sec = number<int>(text.substr(17, 2));
  if (!year || !mon || !day || !hour || !min || !sec || *mon < 1 || *mon > 12 || *day < 1 ||
      *day > 31 || *hour > 23 || *min > 59 || *sec > 60)
    return std::nullopt;
  long long us = 0;
  const std::string_view rest = text.substr(19, text.size() - 20);
  if (!rest.empty()) {
    if (rest[0] != '.' || rest.size() < 2 || rest.size() > 10) return std::nullopt;
    std::string digits(rest.substr(1));
    const auto frac = number<long long>(digits);
    if (!frac) return std::nullopt;
    us = *frac;
    for (size_t n = digits.size(); n < 6; ++n) us *= 10;
    for (size_t n = digits.size(); n > 6; --n) us /= 10;
  }
  std::tm tm{};
  tm.tm_year = *year - 1900;
  tm.tm_mon = *mon - 1;
  tm.tm_mday = *day;
  tm.tm_hour = *hour;
  tm.tm_min = *min;
  tm.tm_sec = *sec;
  const time_t secs = timegm(&tm);
  return std::chrono::system_clock::time_point(std::chrono::seconds(secs)) +
         std::chrono::microseconds(us);
}

json lease_for(const std::optional<LeaseRecord>& observed, std::string_view ns,
               std::string_view name, std::string_view site_id, const HolderIdentity& me,
               int duration_s, bool acquired, std::chrono::system_clock::time_point now) {
  json lease = observed ? observed->object : json::object();
  lease["apiVersion"] = std::string(kLeaseApiVersion);
  lease["kind"] = "Lease";
  json& md = lease["metadata"];
  if (!md.is_object()) md = json::object();
  md["name"] = std::string(name);
  md["namespace"] = std::string(ns);
  md.erase("managedFields");
  if (!md.contains("labels") || !md["labels"].is_object()) md["labels"] = json::object();
  md["labels"][std::string(kSiteLabel)] = std::string(site_id);
  if (!md.contains("annotations") || !md["annotations"].is_object())
    md["annotations"] = json::object();
  json& ann = md["annotations"];
  ann[std::string(kAnnSystemIdentifier)] = std::to_string(me.system_identifier);
  ann[std::string(kAnnTimeline)] = std::to_string(me.timeline);
  ann[std::string(kAnnDatabase)] = me.database;
  ann[std::string(kAnnServerStarted)] = me.started;
  ann[std::string(kAnnHost)] = me.host;
  // the highest timeline of our system identifier survives releases and other holders
  uint32_t highest = me.timeline;
  if (observed && observed->highest && observed->highest->same_system(me))
    highest = std::max(highest, observed->highest->timeline);
  ann[std::string(kAnnHighestTimeline)] =
      std::to_string(me.system_identifier) + "." + std::to_string(highest);
  const std::string t = micro_time(now);
  json spec = {
      {"holderIdentity", me.format()}, {"leaseDurationSeconds", duration_s}, {"renewTime", t}};
  if (acquired || !observed) {
    spec["acquireTime"] = t;
    spec["leaseTransitions"] = observed ? observed->transitions + 1 : 0;
  } else {
    spec["acquireTime"] = observed->acquire_time.empty() ? t : observed->acquire_time;
    spec["leaseTransitions"] = observed->transitions;
  }
  lease["spec"] = std::move(spec);
  if (observed && !observed->resource_version.empty())
    md["resourceVersion"] = observed->resource_version;
  else
    md.erase("resourceVersion");
  return lease;
}

json released_lease(const LeaseRecord& observed, std::chrono::system_clock::time_point now) {
  json lease = observed.object;
  json& md = lease["metadata"];
  md.erase("managedFields");
  if (md.contains("annotations") && md["annotations"].is_object())
    for (auto key : {kAnnSystemIdentifier, kAnnTimeline, kAnnDatabase, kAnnServerStarted, kAnnHost})
      md["annotations"].erase(std::string(key));
  const std::string t = micro_time(now);
  lease["spec"] = {{"holderIdentity", ""},
                   {"leaseDurationSeconds", 1},
                   {"acquireTime", t},
                   {"renewTime", t},
                   {"leaseTransitions", observed.transitions}};
  md["resourceVersion"] = observed.resource_version;
  return lease;
}

}  // namespace extsvc::core
