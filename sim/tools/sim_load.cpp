// Minimal keep-alive HTTP load generator for bench/sim_throughput.sh and bench/sim_fleet.py.
//   dpfsim_load --url http://127.0.0.1:P --path /api/v1/nodes/NAME [--method GET|PATCH]
//               [--body JSON] [--content-type CT] [--threads 2] [--seconds 5]
//               [--interval-ms MS] [--stop-file FILE]
//   dpfsim_load --url URL --requests-file FILE --method PATCH [--threads 2]
// Time mode: each thread repeats the request for --seconds (or until --stop-file exists), waiting
// --interval-ms between requests (a probe rather than a flood). A "{i}" in --body is replaced by a
// per-request counter (so every PATCH really writes).
// File mode: FILE has one request per line, "PATH<TAB>BODY"; the threads share the lines and
// send each once (a raw loop of the same requests a client would make).
// Prints one JSON line: {"requests":N,"errors":E,"seconds":S,"rps":R,"p50_us":..,"p99_us":..}
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

bool exists(const std::string& path) {
  std::ifstream f(path);
  return static_cast<bool>(f);
}

}  // namespace

int main(int argc, char** argv) {
  std::string url, path = "/version", method = "GET", body, ct = "application/merge-patch+json",
                   token, requests_file, stop_file;
  int threads = 2, interval_ms = 0;
  double seconds = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--url")
      url = v;
    else if (a == "--path")
      path = v;
    else if (a == "--method")
      method = v;
    else if (a == "--body")
      body = v;
    else if (a == "--content-type")
      ct = v;
    else if (a == "--threads")
      threads = std::stoi(v);
    else if (a == "--seconds")
      seconds = std::stod(v);
    else if (a == "--token")
      token = v;
    else if (a == "--requests-file")
      requests_file = v;
    else if (a == "--interval-ms")
      interval_ms = std::stoi(v);
    else if (a == "--stop-file")
      stop_file = v;
  }
  if (url.empty()) {
    std::cerr << "usage: dpfsim_load --url URL (--path PATH | --requests-file FILE) "
                 "[--method GET|PATCH] [--body JSON] [--threads N] [--seconds S]\n";
    return 2;
  }
  std::vector<std::pair<std::string, std::string>> reqs;  // file mode: path, body
  if (!requests_file.empty()) {
    std::ifstream in(requests_file);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      auto tab = line.find('\t');
      reqs.emplace_back(line.substr(0, tab), tab == std::string::npos ? "" : line.substr(tab + 1));
    }
  }
  std::atomic<long> total{0}, errors{0};
  std::atomic<size_t> next{0};
  std::vector<std::vector<long>> lat(threads);
  auto t_start = std::chrono::steady_clock::now();
  auto deadline = t_start + std::chrono::duration<double>(seconds);
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      httplib::Client cli(url);
      cli.set_keep_alive(true);
      cli.set_tcp_nodelay(true);
      cli.set_connection_timeout(5);
      cli.set_read_timeout(30);
      httplib::Headers h;
      if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
      long i = 0;
      const auto ph = body.find("{i}");
      for (;;) {
        std::string p = path, b = body;
        if (!reqs.empty()) {
          size_t k = next.fetch_add(1);
          if (k >= reqs.size()) break;
          p = reqs[k].first;
          b = reqs[k].second;
        } else {
          if (std::chrono::steady_clock::now() >= deadline) break;
          if (!stop_file.empty() && exists(stop_file)) break;
          if (ph != std::string::npos)
            b.replace(ph, 3, std::to_string(t) + "-" + std::to_string(i++));
        }
        auto t0 = std::chrono::steady_clock::now();
        httplib::Result r =
            method == "PATCH" ? cli.Patch(p.c_str(), h, b, ct.c_str()) : cli.Get(p.c_str(), h);
        auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::steady_clock::now() - t0)
                      .count();
        if (!r || r->status >= 400) ++errors;
        ++total;
        lat[t].push_back(us);
        if (interval_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
      }
    });
  }
  for (auto& th : ts) th.join();
  double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  std::vector<long> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) {
    return all.empty() ? 0L : all[std::min(all.size() - 1, static_cast<size_t>(p * all.size()))];
  };
  nlohmann::json out{{"method", method},
                     {"path", reqs.empty() ? path : requests_file},
                     {"threads", threads},
                     {"requests", total.load()},
                     {"errors", errors.load()},
                     {"seconds", elapsed},
                     {"rps", static_cast<long>(static_cast<double>(total.load()) / elapsed)},
                     {"p50_us", pct(0.5)},
                     {"p99_us", pct(0.99)},
                     {"max_us", all.empty() ? 0L : all.back()}};
  std::cout << out.dump() << std::endl;
  return errors.load() > 0 ? 1 : 0;
}
