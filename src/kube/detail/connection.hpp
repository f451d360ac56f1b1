// How every libcurl handle of the client is set up (TLS, credentials, timeouts, headers) and how
// a libcurl failure becomes an Error: shared by the synchronous calls (client_transport.cpp) and
// the asynchronous ones on a Multi (client_async.cpp). Not a stable API.
#pragma once

#include <curl/curl.h>

#include <string>

#include "kube/config.hpp"
#include "kube/error.hpp"

namespace extsvc::kube::detail {

// Protocols, TLS verification and client certificates, connect timeout, user agent, keep-alive,
// compression. Not the total timeout: a watch stream has none.
void apply_connection_options(CURL* curl, const ClusterConfig& cfg);

// Accept, Expect, Content-Type (when given) and Authorization (when token is not empty). The
// caller frees the list with curl_slist_free_all after the transfer.
curl_slist* request_headers(const std::string& token, const char* content_type);

// The Error for a failed transfer (rc != CURLE_OK); `token` is scrubbed from the text.
Error transport_error(CURLcode rc, const char* errbuf, const std::string& token);

}  // namespace extsvc::kube::detail
