// The bearer token: static, or read from a file that may be rotated under the client.
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kube/detail/client_impl.hpp"

namespace extsvc::kube {

namespace {

using detail::make_error;

constexpr size_t kMaxTokenBytes = 64 * 1024;
constexpr auto kTokenRecheck = std::chrono::seconds(1);

std::string trim_ws(std::string s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

}  // namespace

// Returns the bearer token to send ("" = none), or an Error.
std::variant<std::string, Error> Client::Impl::current_token(bool force_reread) {
  if (cfg.token_file.empty()) return cfg.token;
  auto now = Clock::now();
  if (!force_reread && file_token_loaded && now - token_checked < kTokenRecheck) return file_token;
  token_checked = now;
  struct stat st = {};
  if (::stat(cfg.token_file.c_str(), &st) != 0) {
    std::string why = std::strerror(errno);
    return token_unavailable(why);
  }
  if (!force_reread && file_token_loaded && st.st_size == file_stat.st_size &&
      st.st_ino == file_stat.st_ino && st.st_dev == file_stat.st_dev &&
      st.st_mtim.tv_sec == file_stat.st_mtim.tv_sec &&
      st.st_mtim.tv_nsec == file_stat.st_mtim.tv_nsec) {
    token_warned = false;  // back, unchanged
    return file_token;
  }
  if (st.st_size > static_cast<off_t>(kMaxTokenBytes)) return token_unavailable("file too large");
  std::ifstream in(cfg.token_file, std::ios::binary);
  if (!in) return token_unavailable(std::strerror(errno));  // e.g. Permission denied
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string tok = trim_ws(ss.str());
  if (tok.empty()) return token_unavailable("file is empty");
  if (tok.find_first_of("\r\n") != std::string::npos)
    return token_unavailable("file contains more than one line");
  if (token_warned) {
    log().info("kube: bearer token file {} is readable again", cfg.token_file);
    token_warned = false;
  }
  if (file_token_loaded && tok != file_token) {
    log().info("kube: bearer token file {} changed, using the new token", cfg.token_file);
  }
  file_token = std::move(tok);
  file_token_loaded = true;
  file_stat = st;
  return file_token;
}

std::variant<std::string, Error> Client::Impl::token_unavailable(const std::string& why) {
  // Checked every second while it lasts: the log gets one WARNING per outage, the error (and
  // extsvc_retries_total{reason="token_unavailable"}) every call.
  const bool warn = !token_warned;
  token_warned = true;
  if (file_token_loaded) {
    if (warn)
      log().warn("kube: cannot re-read bearer token file {} ({}); keeping the previous token",
                 cfg.token_file, why);
    return file_token;
  }
  if (!cfg.token.empty()) {
    if (warn)
      log().warn("kube: cannot read bearer token file {} ({}); using the static token",
                 cfg.token_file, why);
    return cfg.token;
  }
  if (warn)
    log().warn("kube: cannot read bearer token file {} ({}); no call is made until it is readable",
               cfg.token_file, why);
  // Not a 401: nothing was sent. Its own reason, so the retries are not counted as unauthorized.
  return make_error(ErrorKind::kUnauthorized, 0, "TokenUnavailable",
                    "cannot read bearer token file " + cfg.token_file + ": " + why);
}

}  // namespace extsvc::kube
