#include "test_support.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace extsvc::kube::test {

namespace {

struct IgnoreSigpipe {
  IgnoreSigpipe() { ::signal(SIGPIPE, SIG_IGN); }
} ignore_sigpipe;

void run(const std::string& cmd) {
  std::string full = cmd + " >/dev/null 2>&1";
  if (std::system(full.c_str()) != 0) throw std::runtime_error("command failed: " + cmd);
}

}  // namespace

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "extsvc-kube-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void write_file(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TestServer::TestServer() : srv_(std::make_unique<httplib::Server>()) {}

TestServer::TestServer(const std::string& cert_file, const std::string& key_file,
                       const std::string& client_ca_file)
    : srv_(std::make_unique<httplib::SSLServer>(
          cert_file.c_str(), key_file.c_str(),
          client_ca_file.empty() ? nullptr : client_ca_file.c_str())),
      tls_(true) {
  if (!srv_->is_valid()) throw std::runtime_error("SSLServer setup failed");
}

void TestServer::start() {
  srv_->set_keep_alive_max_count(1000);
  srv_->set_keep_alive_timeout(30);
  srv_->set_tcp_nodelay(true);
  port_ = srv_->bind_to_any_port("127.0.0.1");
  if (port_ <= 0) throw std::runtime_error("bind failed");
  thread_ = std::thread([this] { srv_->listen_after_bind(); });
  for (int i = 0; i < 500 && !srv_->is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

TestServer::~TestServer() {
  srv_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string TestServer::url() const {
  return std::string(tls_ ? "https" : "http") + "://127.0.0.1:" + std::to_string(port_);
}

const Pki& pki() {
  static const Pki p = [] {
    static TempDir dir;  // lives until process exit
    Pki k;
    k.dir = dir.path();
    const std::string o = EXTSVC_OPENSSL_EXECUTABLE;
    const std::string d = k.dir + "/";
    k.ca_crt = d + "ca.crt";
    k.ca_key = d + "ca.key";
    k.server_crt = d + "server.crt";
    k.server_key = d + "server.key";
    k.client_crt = d + "client.crt";
    k.client_key = d + "client.key";
    k.other_ca_crt = d + "other-ca.crt";
    const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    auto make_ca = [&](const std::string& crt, const std::string& key, const std::string& cn) {
      run(o + " req -x509" + ec + " -keyout " + key + " -out " + crt + " -days 2 -subj /CN=" + cn +
          " -addext basicConstraints=critical,CA:TRUE -addext "
          "keyUsage=critical,keyCertSign,cRLSign");
    };
    make_ca(k.ca_crt, k.ca_key, "extsvc-test-ca");
    make_ca(k.other_ca_crt, d + "other-ca.key", "extsvc-other-ca");
    write_file(d + "server.ext",
               "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
               "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n");
    write_file(d + "client.ext",
               "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
               "extendedKeyUsage=clientAuth\n");
    run(o + " req" + ec + " -keyout " + k.server_key + " -out " + d +
        "server.csr -subj /CN=localhost");
    run(o + " x509 -req -in " + d + "server.csr -CA " + k.ca_crt + " -CAkey " + k.ca_key +
        " -CAcreateserial -out " + k.server_crt + " -days 2 -extfile " + d + "server.ext");
    run(o + " req" + ec + " -keyout " + k.client_key + " -out " + d +
        "client.csr -subj /CN=extsvc-client");
    run(o + " x509 -req -in " + d + "client.csr -CA " + k.ca_crt + " -CAkey " + k.ca_key +
        " -CAcreateserial -out " + k.client_crt + " -days 2 -extfile " + d + "client.ext");
    return k;
  }();
  return p;
}

int closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);
  ::close(fd);  // never listened: connections are refused
  return port;
}

LogCapture::LogCapture() : out(std::make_shared<std::ostringstream>()) {
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(*out);
  logger = std::make_shared<spdlog::logger>("kube-test", sink);
  logger->set_level(spdlog::level::trace);
  logger->flush_on(spdlog::level::trace);
}

}  // namespace extsvc::kube::test
