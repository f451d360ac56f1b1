// Minimal keep-alive HTTP load generator for bench/sim_throughput.sh.
//   dpfsim_load --url http://127.0.0.1:P --path /api/v1/nodes/NAME [--method GET|PATCH] [--body
//   JSON]
//               [--content-type CT] [--threads 2] [--seconds 5]
// A "{i}" in --body is replaced by a per-request counter (so every PATCH really writes).
// Prints one JSON line: {"requests":N,"errors":E,"seconds":S,"rps":R,"p50_us":..,"p99_us":..}
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  std::string url, path = "/version", method = "GET", body, ct = "application/merge-patch+json",
                   token;
  int threads = 2;
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
  }
  if (url.empty()) {
    std::cerr << "usage: dpfsim_load --url URL --path PATH [--method GET|PATCH] [--body JSON] "
                 "[--threads N] [--seconds S]\n";
    return 2;
  }
  std::atomic<long> total{0}, errors{0};
  std::vector<std::vector<long>> lat(threads);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      httplib::Client cli(url);
      cli.set_keep_alive(true);
      cli.set_tcp_nodelay(true);
      cli.set_connection_timeout(5);
      cli.set_read_timeout(10);
      httplib::Headers h;
      if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
      long i = 0;
      const auto ph = body.find("{i}");
      while (std::chrono::steady_clock::now() < deadline) {
        auto t0 = std::chrono::steady_clock::now();
        std::string b = body;
        if (ph != std::string::npos)
          b.replace(ph, 3, std::to_string(t) + "-" + std::to_string(i++));
        httplib::Result r = method == "PATCH" ? cli.Patch(path.c_str(), h, b, ct.c_str())
                                              : cli.Get(path.c_str(), h);
        auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::steady_clock::now() - t0)
                      .count();
        if (!r || r->status >= 400) ++errors;
        ++total;
        lat[t].push_back(us);
      }
    });
  }
  for (auto& th : ts) th.join();
  std::vector<long> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) {
    return all.empty() ? 0L : all[std::min(all.size() - 1, static_cast<size_t>(p * all.size()))];
  };
  nlohmann::json out{{"method", method},
                     {"path", path},
                     {"threads", threads},
                     {"requests", total.load()},
                     {"errors", errors.load()},
                     {"seconds", seconds},
                     {"rps", static_cast<long>(static_cast<double>(total.load()) / seconds)},
                     {"p50_us", pct(0.5)},
                     {"p99_us", pct(0.99)}};
  std::cout << out.dump() << std::endl;
  return errors.load() > 0 ? 1 : 0;
}
