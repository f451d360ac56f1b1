// The product's Kubernetes client against a raw libcurl loop of the same requests (issue 11:
// "the overhead per call against a raw loop of the same requests <= 2x"). Both make N merge
// patches of one DPUDevice's spec.cluster.nodeLabels (the value changes every time, so each one
// writes) on one keep-alive TLS connection with the same bearer token, single-threaded, against
// the same dpfsim; the client also serializes the patch, parses and checks the answer, reads the
// token file when it changed, runs its token bucket (here: no limit) and reports to an observer.
// Rounds alternate raw and client so that machine noise hits both alike.
// Prints one JSON line: per-call medians and p99 in microseconds, and the ratio of medians.
//   client_overhead --url https://127.0.0.1:P --ca CA --token-file F --path /apis/... [--n 4000]
#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kube/client.hpp"
#include "kube/observer.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double micros(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size())))];
}

size_t sink(char*, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(static_cast<size_t>(size * n), ' ');
  return size * n;
}

struct CountingObserver : extsvc::kube::RequestObserver {
  long calls = 0;
  void on_request(const extsvc::kube::RequestEvent&) noexcept override { ++calls; }
};

std::string body_for(long i) {
  return R"({"spec":{"cluster":{"nodeLabels":{"bench.example.com/seq":")" + std::to_string(i) +
         R"("}}}})";
}

}  // namespace

int main(int argc, char** argv) {
  std::string url, ca, token_file, path;
  long n = 4000;
  bool raw_gzip = false;  // diagnosis: the raw loop asks for compressed answers as the client does
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--url")
      url = v;
    else if (a == "--ca")
      ca = v;
    else if (a == "--token-file")
      token_file = v;
    else if (a == "--path")
      path = v;
    else if (a == "--raw-gzip")
      raw_gzip = v == "1";
    else if (a == "--n")
      n = std::stol(v);
  }
  if (url.empty() || path.empty()) {
    std::cerr << "usage: client_overhead --url U --ca CA --token-file F --path P [--n N]\n";
    return 2;
  }
  std::string token;
  if (!token_file.empty()) std::getline(std::ifstream(token_file), token);

  curl_global_init(CURL_GLOBAL_DEFAULT);
  CURL* raw = curl_easy_init();
  std::string answer;
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, "Accept: application/json");
  headers = curl_slist_append(headers, "Content-Type: application/merge-patch+json");
  headers = curl_slist_append(headers, ("Authorization: Bearer " + token).c_str());
  const std::string full = url + path + "?fieldValidation=Strict";
  curl_easy_setopt(raw, CURLOPT_URL, full.c_str());
  curl_easy_setopt(raw, CURLOPT_CUSTOMREQUEST, "PATCH");
  curl_easy_setopt(raw, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(raw, CURLOPT_WRITEFUNCTION, sink);
  curl_easy_setopt(raw, CURLOPT_WRITEDATA, &answer);
  if (!ca.empty()) curl_easy_setopt(raw, CURLOPT_CAINFO, ca.c_str());
  if (raw_gzip) curl_easy_setopt(raw, CURLOPT_ACCEPT_ENCODING, "");

  extsvc::kube::ClusterConfig cfg;
  cfg.server = url;
  cfg.ca_file = ca;
  cfg.token_file = token_file;
  cfg.qps = 0;  // no client-side limit: the call itself is measured
  extsvc::kube::Client client(cfg);
  CountingObserver observer;
  client.set_observer(&observer, "management");

  std::vector<double> raw_us, client_us;
  long errors = 0, seq = 0;
  const int rounds = 20;
  const long per_round = std::max(1L, n / rounds);
  for (int r = -1; r < rounds; ++r) {  // round -1 warms both connections up
    for (long i = 0; i < per_round; ++i) {
      const std::string body = body_for(++seq);
      answer.clear();
      curl_easy_setopt(raw, CURLOPT_POSTFIELDS, body.c_str());
      curl_easy_setopt(raw, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
      const auto t0 = Clock::now();
      const CURLcode rc = curl_easy_perform(raw);
      const auto t1 = Clock::now();
      long code = 0;
      curl_easy_getinfo(raw, CURLINFO_RESPONSE_CODE, &code);
      if (rc != CURLE_OK || code != 200) ++errors;
      if (r >= 0) raw_us.push_back(micros(t1 - t0));
    }
    for (long i = 0; i < per_round; ++i) {
      const nlohmann::json patch = nlohmann::json::parse(body_for(++seq));
      const auto t0 = Clock::now();
      auto res = client.merge_patch(path + "?fieldValidation=Strict", patch);
      const auto t1 = Clock::now();
      if (!res.ok()) ++errors;
      if (r >= 0) client_us.push_back(micros(t1 - t0));
    }
  }
  nlohmann::json out = {
      {"calls_each", raw_us.size()},
      {"errors", errors},
      {"raw_p50_us", pct(raw_us, 50)},
      {"raw_p99_us", pct(raw_us, 99)},
      {"client_p50_us", pct(client_us, 50)},
      {"client_p99_us", pct(client_us, 99)},
      {"ratio_p50", pct(raw_us, 50) > 0 ? pct(client_us, 50) / pct(raw_us, 50) : 0},
      {"client_connects", client.stats().connects},
      {"observer_calls", observer.calls},
  };
  std::cout << out.dump() << std::endl;
  curl_slist_free_all(headers);
  curl_easy_cleanup(raw);
  return errors == 0 ? 0 : 1;
}
