// Test helpers: temporary directories, a local cpp-httplib server on 127.0.0.1:0 (HTTP or
// HTTPS), throwaway certificates and a log capture sink.
#pragma once

#include <httplib.h>
#include <spdlog/logger.h>

#include <memory>
#include <sstream>
#include <string>
#include <thread>

namespace extsvc::kube::test {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void write_file(const std::string& path, const std::string& content);
std::string read_file(const std::string& path);

// Runs a cpp-httplib server on 127.0.0.1 with an ephemeral port. Register handlers on srv()
// before start().
class TestServer {
 public:
  TestServer();  // plain HTTP
  TestServer(const std::string& cert_file, const std::string& key_file,
             const std::string& client_ca_file = "");  // HTTPS
  ~TestServer();
  TestServer(const TestServer&) = delete;
  TestServer& operator=(const TestServer&) = delete;

  httplib::Server& srv() { return *srv_; }
  void start();
  int port() const { return port_; }
  std::string url() const;

 private:
  std::unique_ptr<httplib::Server> srv_;
  std::thread thread_;
  int port_ = -1;
  bool tls_ = false;
};

// Throwaway PKI generated once per process with the openssl CLI.
struct Pki {
  std::string dir;
  std::string ca_crt, ca_key;          // CA that signed the server and client certs
  std::string server_crt, server_key;  // SAN IP:127.0.0.1, DNS:localhost
  std::string client_crt, client_key;  // signed by ca
  std::string other_ca_crt;            // unrelated CA
};
const Pki& pki();

// A port on 127.0.0.1 with nothing listening.
int closed_port();

// spdlog logger writing into a string stream, level trace.
struct LogCapture {
  LogCapture();
  std::string text() const { return out->str(); }
  std::shared_ptr<std::ostringstream> out;
  std::shared_ptr<spdlog::logger> logger;
};

}  // namespace extsvc::kube::test
