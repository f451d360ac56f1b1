#include "core/kube_quantity.hpp"

#include <gtest/gtest.h>

namespace extsvc::core {
namespace {

TEST(KubeQuantity, Accepts) {
  for (const char* q : {"100m",  "1Gi", "1e3", "0.5", "0",   "1",    "+1",   "1.",    ".5",
                        "128Mi", "2Ki", "3Ti", "4Pi", "5Ei", "1n",   "1u",   "1k",    "1M",
                        "1G",    "1T",  "1P",  "1E",  "1E3", "1e-3", "1e+3", "1.5e2", "250m"})
    EXPECT_TRUE(is_nonnegative_quantity(q)) << q;
}

TEST(KubeQuantity, Refuses) {
  for (const char* q :
       {"",     "-1", "-0", "-1Gi", "1GiB",  "1gi", "1K",  "1KI",  "1 Gi", " 1",   "1e", "1e+",
        "1ee3", ".",  "+",  "Gi",   "1.2.3", "1m5", "abc", "1Gi1", "1e3m", "0x10", "1,5"})
    EXPECT_FALSE(is_nonnegative_quantity(q)) << q;
}

}  // namespace
}  // namespace extsvc::core
