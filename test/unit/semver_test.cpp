#include "core/semver.hpp"

#include <gtest/gtest.h>

namespace extsvc::core {
namespace {

TEST(Semver, AcceptsExactVersions) {
  for (const char* v : {"1.2.3", "v1.2.3", "0.0.0", "0.1.0", "10.20.30", "1.2.3-alpha.1+build.5",
                        "1.0.0-alpha", "1.0.0-alpha.beta", "1.0.0-0.3.7", "1.0.0-x.7.z.92",
                        "1.0.0+20130313144700", "1.0.0-beta+exp.sha.5114f85", "1.0.0+001",
                        "1.0.0-rc.1+build.01", "1.2.3-x", "1.2.3---R-C.0", "2.0.0-0A"})
    EXPECT_TRUE(is_exact_semver(v)) << v;
}

TEST(Semver, RefusesRangesTagsAndMalformed) {
  for (const char* v : {"",           "01.2.3",     "1.02.3",    "1.2.03",         "1.2",
                        "1",          "1.2.3.4",    "^1.2.3",    "~1.2.3",         ">=1.2.3",
                        ">1.2.3",     "<2",         "=1.2.3",    "1.2.3 || 2.0.0", "1.2.3 - 2.0.0",
                        "latest",     "stable",     "1.x",       "1.2.x",          "1.2.X",
                        "*",          "1.*",        "v",         "V1.2.3",         "vv1.2.3",
                        " 1.2.3",     "1.2.3 ",     "1.2.3-",    "1.2.3+",         "1.2.3-01",
                        "1.2.3-a..b", "1.2.3+a..b", "1.2.3-a_b", "1.2.3+a+b",      "-1.2.3",
                        "1.2.-3",     "1..3",       "a.b.c"})
    EXPECT_FALSE(is_exact_semver(v)) << v;
}

}  // namespace
}  // namespace extsvc::core
