#include "core/kube_metadata.hpp"

#include <gtest/gtest.h>

#include <string>

namespace extsvc::core {
namespace {

TEST(KubeMetadata, QualifiedNames) {
  for (const char* k :
       {"app", "App_1.x-y", "example.com/app", "a/b", "nvidia.com/gpu", "a-b.c-d/Z9"})
    EXPECT_TRUE(is_qualified_name(k)) << k;
  EXPECT_TRUE(is_qualified_name(std::string(63, 'a')));
  EXPECT_FALSE(is_qualified_name(std::string(64, 'a')));
  EXPECT_TRUE(is_qualified_name(std::string(253, 'a') + "/x"));
  EXPECT_FALSE(is_qualified_name(std::string(254, 'a') + "/x"));
  for (const char* k : {"", "/a", "a/", "a/b/c", "-a", "a-", "_a", "a b", "Example.com/a",
                        "exa_mple.com/a", ".a/b", "a..b/c", "a/-b", "é"})
    EXPECT_FALSE(is_qualified_name(k)) << k;
}

TEST(KubeMetadata, LabelValues) {
  EXPECT_TRUE(is_label_value(""));
  EXPECT_TRUE(is_label_value("v1.2_3-x"));
  EXPECT_TRUE(is_label_value(std::string(63, 'z')));
  EXPECT_FALSE(is_label_value(std::string(64, 'z')));
  EXPECT_FALSE(is_label_value("a/b"));
  EXPECT_FALSE(is_label_value("-a"));
  EXPECT_FALSE(is_label_value("a b"));
}

TEST(KubeMetadata, ReservedKeys) {
  EXPECT_TRUE(is_reserved_metadata_key("nico/x"));
  EXPECT_TRUE(is_reserved_metadata_key("nico/extsvc-abc"));
  EXPECT_TRUE(is_reserved_metadata_key("svc.dpu.nvidia.com/service"));
  EXPECT_FALSE(is_reserved_metadata_key("nico"));
  EXPECT_FALSE(is_reserved_metadata_key("nicox/a"));
  EXPECT_FALSE(is_reserved_metadata_key("a.nico/a"));
  EXPECT_FALSE(is_reserved_metadata_key("dpu.nvidia.com/x"));
  EXPECT_FALSE(is_reserved_metadata_key("x.svc.dpu.nvidia.com/a"));
}

}  // namespace
}  // namespace extsvc::core
