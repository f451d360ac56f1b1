#include "kube/detail/connection.hpp"

#include <algorithm>
#include <cstring>

#include "kube/detail/client_impl.hpp"

namespace extsvc::kube::detail {

namespace {

bool is_tls_error(CURLcode c) {
  switch (c) {
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_CLIENTCERT:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_SSL_SHUTDOWN_FAILED:
    case CURLE_USE_SSL_FAILED:
      return true;
    default:
      return false;
  }
}

}  // namespace

void apply_connection_options(CURL* curl, const ClusterConfig& cfg) {
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, cfg.connect_timeout_ms);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, cfg.user_agent.c_str());
  curl_easy_setopt(curl, CURLOPT_ACCEPT_ENCODING, "");
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  if (cfg.insecure_skip_verify) {
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
  } else {
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
    if (!cfg.ca_file.empty()) {
      curl_easy_setopt(curl, CURLOPT_CAINFO, cfg.ca_file.c_str());
      curl_easy_setopt(curl, CURLOPT_CAPATH, nullptr);
    } else if (!cfg.ca_data.empty()) {
      curl_blob blob{const_cast<char*>(cfg.ca_data.data()), cfg.ca_data.size(), CURL_BLOB_COPY};
      curl_easy_setopt(curl, CURLOPT_CAINFO_BLOB, &blob);
      curl_easy_setopt(curl, CURLOPT_CAPATH, nullptr);
    }
  }
  if (!cfg.client_cert_file.empty()) {
    curl_easy_setopt(curl, CURLOPT_SSLCERT, cfg.client_cert_file.c_str());
  } else if (!cfg.client_cert_data.empty()) {
    curl_blob blob{const_cast<char*>(cfg.client_cert_data.data()), cfg.client_cert_data.size(),
                   CURL_BLOB_COPY};
    curl_easy_setopt(curl, CURLOPT_SSLCERT_BLOB, &blob);
  }
  if (!cfg.client_key_file.empty()) {
    curl_easy_setopt(curl, CURLOPT_SSLKEY, cfg.client_key_file.c_str());
  } else if (!cfg.client_key_data.empty()) {
    curl_blob blob{const_cast<char*>(cfg.client_key_data.data()), cfg.client_key_data.size(),
                   CURL_BLOB_COPY};
    curl_easy_setopt(curl, CURLOPT_SSLKEY_BLOB, &blob);
  }
}

curl_slist* request_headers(const std::string& token, const char* content_type) {
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, "Accept: application/json");
  headers = curl_slist_append(headers, "Expect:");
  if (content_type != nullptr)
    headers = curl_slist_append(headers, (std::string("Content-Type: ") + content_type).c_str());
  if (!token.empty()) {
    std::string auth = "Authorization: Bearer " + token;
    headers = curl_slist_append(headers, auth.c_str());
    std::fill(auth.begin(), auth.end(), '\0');
  }
  return headers;
}

Error transport_error(CURLcode rc, const char* errbuf, const std::string& token) {
  std::string text = errbuf != nullptr && errbuf[0] != '\0' ? std::string(errbuf)
                                                            : std::string(curl_easy_strerror(rc));
  scrub(text, token);
  if (rc == CURLE_OPERATION_TIMEDOUT) return make_error(ErrorKind::kTimeout, 0, "Timeout", text);
  if (is_tls_error(rc)) return make_error(ErrorKind::kTransport, 0, "TLSError", text);
  if (rc == CURLE_URL_MALFORMAT || rc == CURLE_UNSUPPORTED_PROTOCOL)
    return make_error(ErrorKind::kOther, 0, "InvalidRequest", text);
  return make_error(ErrorKind::kTransport, 0, "TransportError", text);
}

}  // namespace extsvc::kube::detail
