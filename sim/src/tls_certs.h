// Generates a CA and a server certificate (localhost, 127.0.0.1, ::1) in-process with OpenSSL 3.
#pragma once

#include <string>

namespace dpfsim {

struct TlsFiles {
  std::string ca_cert;      // <dir>/ca.crt
  std::string server_cert;  // <dir>/server.crt
  std::string server_key;   // <dir>/server.key
};

// Creates dir if needed and (re)writes the three files. Throws std::runtime_error on failure.
TlsFiles generate_tls_files(const std::string& dir);

}  // namespace dpfsim
