// The reason a retried pass is counted under (reconcile::retry_reason, extsvc_retries_total):
// every reason it returns is in the metrics vocabulary, and the client's refusal to call without
// a token is not a 401 (issue 28).
#include <gtest/gtest.h>

#include <algorithm>
#include <string_view>

#include "core/metrics_store.hpp"
#include "reconcile/errors.hpp"

namespace extsvc::reconcile {
namespace {

kube::Error error(kube::ErrorKind kind, int status, const char* reason) {
  kube::Error e;
  e.kind = kind;
  e.http_status = status;
  e.reason = reason;
  return e;
}

bool in_vocabulary(std::string_view reason) {
  const auto& names = core::MetricsStore::kRetryReasonNames;
  return std::find(names.begin(), names.end(), reason) != names.end();
}

TEST(RetryReason, AnUnreadableTokenFileIsNotUnauthorized) {
  // what kube::Client returns when the token file cannot be read and there is no token to send
  const auto no_token = error(kube::ErrorKind::kUnauthorized, 0, "TokenUnavailable");
  EXPECT_STREQ(retry_reason(no_token), "token_unavailable");
  EXPECT_TRUE(retryable(no_token));  // the file may come back (a rotation in progress)
  EXPECT_STREQ(retry_reason(error(kube::ErrorKind::kUnauthorized, 401, "Unauthorized")),
               "unauthorized");
  EXPECT_STREQ(retry_reason(error(kube::ErrorKind::kForbidden, 403, "Forbidden")), "forbidden");
}

TEST(RetryReason, EveryReasonIsInTheMetricsVocabulary) {
  for (const auto& e : {error(kube::ErrorKind::kUnauthorized, 0, "TokenUnavailable"),
                        error(kube::ErrorKind::kUnauthorized, 401, "Unauthorized"),
                        error(kube::ErrorKind::kForbidden, 403, "Forbidden"),
                        error(kube::ErrorKind::kTransport, 0, "Transport"),
                        error(kube::ErrorKind::kTimeout, 0, "Timeout"),
                        error(kube::ErrorKind::kServerError, 503, "ServiceUnavailable"),
                        error(kube::ErrorKind::kTooManyRequests, 429, "TooManyRequests"),
                        error(kube::ErrorKind::kConflict, 409, "Conflict"),
                        error(kube::ErrorKind::kOther, 200, "InvalidResponse"),
                        error(kube::ErrorKind::kOther, 200, "ResponseTooLarge"),
                        error(kube::ErrorKind::kBadRequest, 400, "BadRequest")})
    EXPECT_TRUE(in_vocabulary(retry_reason(e))) << retry_reason(e);
}

}  // namespace
}  // namespace extsvc::reconcile
