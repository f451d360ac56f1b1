// Kubernetes responses through the real client: Client::get() and
// Client::list() (pagination with `continue`, 410 Gone restart, Status
// errors) against an in-process HTTP/1.1 server on 127.0.0.1 that plays back
// the fuzz input. Input: pages separated by "\n@@\n"; the first byte of a
// page chooses the HTTP status (see kStatuses), the rest is the body. The client makes one
// GET of the first page, then lists the rest; beyond the input the server
// answers an empty final list page.
// Properties: no crash or exception; a successful list is an object with an
// items array and a metadata object; every error message is bounded, valid
// UTF-8 and has no line breaks.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/utf8.hpp"
#include "fuzz_check.hpp"
#include "fuzz_targets.hpp"
#include "kube/client.hpp"

namespace extsvc::fuzz {

namespace {

// Status of a page by its first byte b: kStatuses[(b - '0') mod 256 mod 10],
// so the digits '0'..'9' choose 200 201 200 200 404 409 410 429 500 503.
constexpr std::array<int, 10> kStatuses = {200, 201, 200, 200, 404, 409, 410, 429, 500, 503};

struct Page {
  int status;
  std::string body;
};

class PlaybackServer {
 public:
  PlaybackServer() {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    FUZZ_CHECK(listen_fd_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    FUZZ_CHECK(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    FUZZ_CHECK(listen(listen_fd_, 16) == 0);
    socklen_t len = sizeof addr;
    FUZZ_CHECK(getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port_ = ntohs(addr.sin_port);
    std::thread([this] { serve(); }).detach();
  }

  int port() const { return port_; }

  void load(std::vector<Page> pages) {
    std::lock_guard<std::mutex> lock(mu_);
    pages_ = std::move(pages);
    next_ = 0;
  }

 private:
  Page next_page() {
    std::lock_guard<std::mutex> lock(mu_);
    if (next_ < pages_.size()) return pages_[next_++];
    return {200, R"({"kind":"List","apiVersion":"v1","metadata":{},"items":[]})"};
  }

  void serve() {
    while (true) {
      const int fd = accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      std::string buf;
      char chunk[4096];
      while (true) {
        const auto end = buf.find("\r\n\r\n");
        if (end != std::string::npos) {
          buf.erase(0, end + 4);  // GET requests only: no request body
          if (!respond(fd, next_page())) break;
          continue;
        }
        const ssize_t n = read(fd, chunk, sizeof chunk);
        if (n <= 0) break;
        buf.append(chunk, static_cast<std::size_t>(n));
      }
      close(fd);
    }
  }

  static bool respond(int fd, const Page& page) {
    std::string out = "HTTP/1.1 " + std::to_string(page.status) +
                      " Fuzz\r\nContent-Type: application/json\r\nContent-Length: " +
                      std::to_string(page.body.size()) + "\r\n";
    if (page.status == 429 || page.status == 503) out += "Retry-After: 0\r\n";
    out += "\r\n";
    out += page.body;
    std::size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = write(fd, out.data() + done, out.size() - done);
      if (n <= 0) return false;
      done += static_cast<std::size_t>(n);
    }
    return true;
  }

  int listen_fd_ = -1;
  int port_ = 0;
  std::mutex mu_;
  std::vector<Page> pages_;
  std::size_t next_ = 0;
};

bool clean_text(std::string_view s) {
  if (s.size() > 512 || core::first_invalid_utf8(s)) return false;
  return s.find_first_of("\r\n") == std::string_view::npos;
}

void check_result(const kube::Result& r, bool is_list) {
  if (r.ok()) {
    FUZZ_CHECK(r.value().http_status >= 200 && r.value().http_status < 300);
    if (!is_list) return;
    const auto& body = r.value().body;
    FUZZ_CHECK(body.is_object());
    FUZZ_CHECK(body.contains("items") && body["items"].is_array());
    FUZZ_CHECK(body.contains("metadata") && body["metadata"].is_object());
    return;
  }
  const kube::Error& e = r.error();
  FUZZ_CHECK(e.kind != kube::ErrorKind::kNone);
  FUZZ_CHECK(clean_text(e.message));
  FUZZ_CHECK(!core::first_invalid_utf8(kube::describe(e)));
}

}  // namespace

int kube_list(const std::uint8_t* data, std::size_t size) {
  static PlaybackServer server;
  static kube::Client client([] {
    kube::ClusterConfig cfg;
    cfg.server = "http://127.0.0.1:" + std::to_string(server.port());
    cfg.qps = 0;  // no client-side throttling
    cfg.timeout_ms = 5000;
    return cfg;
  }());

  std::vector<Page> pages;
  std::string_view text = as_text(data, size);
  constexpr std::string_view kSep = "\n@@\n";
  while (!text.empty() && pages.size() < 64) {
    const auto sep = text.find(kSep);
    const auto page = text.substr(0, sep);
    if (!page.empty()) {
      pages.push_back({kStatuses[static_cast<unsigned char>(page[0] - '0') % kStatuses.size()],
                       std::string(page.substr(1))});
    }
    if (sep == std::string_view::npos) break;
    text.remove_prefix(sep + kSep.size());
  }
  server.load(std::move(pages));
  check_result(client.get("/api/v1/namespaces/default/pods/x"), false);
  check_result(client.list(kube::pods_path("default"), "app=x", "", 2), true);
  return 0;
}

}  // namespace extsvc::fuzz
