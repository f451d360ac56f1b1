#include "core/identity.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace extsvc::core {
namespace {

struct Vector {
  std::string uuid, version, name;
};

std::vector<Vector> load_vectors() {
  std::ifstream in(EXTSVC_IDENTITY_VECTORS);
  std::vector<Vector> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    Vector v;
    fields >> v.uuid >> v.version >> v.name;
    out.push_back(v);
  }
  return out;
}

// Pinned in code as well as in the file, so editing one alone fails.
TEST(Identity, PinnedVectors) {
  EXPECT_EQ(dpf_service_name("7b4d3c2a-1e5f-4a6b-9c8d-0e1f2a3b4c5d", "V1-T1700000000000000"),
            "extsvc-qquz5u6fxoepw7najclp");
  EXPECT_EQ(dpf_service_name("00000000-0000-0000-0000-000000000000", "V1-T1"),
            "extsvc-3pzba6qc54lyz34bpgc2");
  EXPECT_EQ(dpf_service_name("f47ac10b-58cc-4372-a567-0e02b2c3d479", "V1-T1733011200123456"),
            "extsvc-3zd33fdibjgwb7z22nad");
  EXPECT_EQ(placement_label_key("3fa85f64-5717-4562-b3fc-2c963f66afa6", "V2-T1700000000000001"),
            "nico/extsvc-dze3mztjibm756vdhxes");
}

TEST(Identity, VectorsFileMatches) {
  const auto vectors = load_vectors();
  ASSERT_GE(vectors.size(), 3u);
  for (const auto& v : vectors) {
    EXPECT_EQ(dpf_service_name(v.uuid, v.version), v.name) << v.uuid;
    EXPECT_EQ(placement_label_key(v.uuid, v.version), "nico/" + v.name) << v.uuid;
  }
}

TEST(Identity, UppercaseUuidHashesLikeLowercase) {
  EXPECT_EQ(identity_hash("F47AC10B-58CC-4372-A567-0E02B2C3D479", "V1-T1733011200123456"),
            "3zd33fdibjgwb7z22nad");
}

TEST(Identity, NameShape) {
  const auto name = dpf_service_name("7b4d3c2a-1e5f-4a6b-9c8d-0e1f2a3b4c5d", "V1-T1");
  EXPECT_EQ(name.size(), 27u);
  EXPECT_EQ(identity_hash("7b4d3c2a-1e5f-4a6b-9c8d-0e1f2a3b4c5d", "V1-T1").size(), 20u);
  // The version is part of the hash.
  EXPECT_NE(name, dpf_service_name("7b4d3c2a-1e5f-4a6b-9c8d-0e1f2a3b4c5d", "V1-T2"));
}

TEST(Identity, BadUuidThrows) {
  EXPECT_THROW(identity_hash("not-a-uuid", "V1-T1"), std::invalid_argument);
  EXPECT_THROW(dpf_service_name("{7b4d3c2a-1e5f-4a6b-9c8d-0e1f2a3b4c5d}", "V1-T1"),
               std::invalid_argument);
  EXPECT_THROW(placement_label_key("", "V1-T1"), std::invalid_argument);
}

TEST(Identity, CanonicalUuid) {
  EXPECT_EQ(canonical_uuid("7B4D3C2A-1E5F-4A6B-9C8D-0E1F2A3B4C5D"),
            "7b4d3c2a-1e5f-4a6b-9c8d-0e1f2a3b4c5d");
  EXPECT_EQ(canonical_uuid("7b4d3c2a-1e5f-4a6b-9c8d-0e1f2a3b4c5d"),
            "7b4d3c2a-1e5f-4a6b-9c8d-0e1f2a3b4c5d");
  EXPECT_FALSE(canonical_uuid("{7b4d3c2a-1e5f-4a6b-9c8d-0e1f2a3b4c5d}"));
  EXPECT_FALSE(canonical_uuid("7b4d3c2a1e5f4a6b9c8d0e1f2a3b4c5d"));
  EXPECT_FALSE(canonical_uuid("7b4d3c2a-1e5f-4a6b-9c8d-0e1f2a3b4c5g"));
  EXPECT_FALSE(canonical_uuid("7b4d3c2a-1e5f-4a6b-9c8d0-e1f2a3b4c5d"));
  EXPECT_FALSE(canonical_uuid("urn:uuid:7b4d3c2a-1e5f-4a6b-9c8d-0e1f2a3b"));
  EXPECT_FALSE(canonical_uuid(""));
}

TEST(Identity, Base32MatchesRfc4648Vectors) {
  // RFC 4648 section 10, lowercased and unpadded.
  auto b32 = [](std::string_view s) {
    return base32_lower(reinterpret_cast<const unsigned char*>(s.data()), s.size());
  };
  EXPECT_EQ(b32(""), "");
  EXPECT_EQ(b32("f"), "my");
  EXPECT_EQ(b32("fo"), "mzxq");
  EXPECT_EQ(b32("foo"), "mzxw6");
  EXPECT_EQ(b32("foob"), "mzxw6yq");
  EXPECT_EQ(b32("fooba"), "mzxw6ytb");
  EXPECT_EQ(b32("foobar"), "mzxw6ytboi");
}

TEST(Identity, ConfigVersion) {
  EXPECT_TRUE(is_config_version("V1-T1700000000000000"));
  EXPECT_TRUE(is_config_version("V12-T0"));
  EXPECT_TRUE(is_config_version("V1-T1"));
  EXPECT_FALSE(is_config_version("V1"));
  EXPECT_FALSE(is_config_version("V0-T1700000000000000"));
  EXPECT_FALSE(is_config_version("V01-T1700000000000000"));
  EXPECT_FALSE(is_config_version("v1-T1700000000000000"));
  EXPECT_FALSE(is_config_version("V1-t1700000000000000"));
  EXPECT_FALSE(is_config_version("V1-T"));
  EXPECT_FALSE(is_config_version("V-T1"));
  EXPECT_FALSE(is_config_version("V1-T17000000000000000000000"));
  EXPECT_FALSE(is_config_version("V1-T1x"));
  EXPECT_FALSE(is_config_version("V1-T-1"));
  EXPECT_FALSE(is_config_version(" V1-T1"));
  EXPECT_FALSE(is_config_version(""));
}

}  // namespace
}  // namespace extsvc::core
