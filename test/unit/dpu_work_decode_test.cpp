// The claimed DPU's JSON columns: what decodes, and that anything else is
// refused with the element named (the worker then backs the row off with that
// text instead of working it on a guess).
#include "reconcile/dpu_work_decode.hpp"

#include <gtest/gtest.h>

#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>

namespace extsvc::reconcile {
namespace {

const char* kAttachment =
    R"({"kind":"attachment","instance_id":"i-1","service_id":"s-1","version":"V1-T1",)"
    R"("label_key":"nico/extsvc-a","dpf_service_name":"extsvc-a","applied_revision":2,"wanted":true})";
const char* kSite =
    R"({"kind":"site","instance_id":null,"service_id":"s-2","version":"V1-T2",)"
    R"("label_key":"nico/extsvc-b","dpf_service_name":"extsvc-b","applied_revision":null,"wanted":false})";

// Appends rather than chaining operator+ (GCC 12's -Warray-bounds misfires on
// the chained temporaries).
std::string array_of(std::initializer_list<std::string_view> parts) {
  std::string out = "[";
  for (auto p : parts) {
    if (out.size() > 1) out.push_back(',');
    out.append(p);
  }
  out.push_back(']');
  return out;
}

std::string refusal(const std::string& keys, const std::string& items) {
  DpuWork w;
  try {
    decode_dpu_items(keys, items, w);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "decoded";
}

TEST(DecodeDpuItems, DecodesBothKindsOfItem) {
  DpuWork w;
  decode_dpu_items(R"(["nico/extsvc-a","nico/extsvc-c"])", array_of({kAttachment, kSite}), w);
  EXPECT_EQ(w.wanted_keys, (std::set<std::string>{"nico/extsvc-a", "nico/extsvc-c"}));
  ASSERT_EQ(w.items.size(), 2u);
  EXPECT_EQ(w.items[0].kind, "attachment");
  EXPECT_EQ(w.items[0].instance_id, "i-1");
  EXPECT_EQ(w.items[0].applied_revision, 2);
  EXPECT_TRUE(w.items[0].wanted);
  EXPECT_EQ(w.items[1].kind, "site");
  EXPECT_EQ(w.items[1].instance_id, "");
  EXPECT_EQ(w.items[1].applied_revision, 0);
  EXPECT_FALSE(w.items[1].wanted);
  EXPECT_EQ(w.items[1].dpf_service_name, "extsvc-b");
}

TEST(DecodeDpuItems, EmptyArraysAreNothingToDo) {
  DpuWork w;
  decode_dpu_items("[]", "[]", w);
  EXPECT_TRUE(w.wanted_keys.empty());
  EXPECT_TRUE(w.items.empty());
}

TEST(DecodeDpuItems, RefusesWhatDoesNotFitAndNamesIt) {
  const std::string item(kAttachment);
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = item;
    s.replace(s.find(from), from.size(), to);
    return array_of({s});
  };
  EXPECT_EQ(refusal("", "[]"), "wanted_keys is not JSON");
  EXPECT_EQ(refusal("{}", "[]"), "wanted_keys is not a JSON array");
  EXPECT_EQ(refusal(R"(["a",null])", "[]"), "wanted_keys[1] is not a label key");
  EXPECT_EQ(refusal("[]", "[1]"), "items[0] is not an object");
  EXPECT_EQ(refusal("[]", with(R"("version":"V1-T1")", R"("version":null)")),
            "items[0].version is not a string");
  EXPECT_EQ(refusal("[]", with(R"("kind":"attachment")", R"("kind":"pod")")),
            "items[0].kind is neither attachment nor site");
  EXPECT_EQ(refusal("[]", with(R"("instance_id":"i-1")", R"("instance_id":null)")),
            "items[0].instance_id is not a string");
  EXPECT_EQ(refusal("[]", with(R"("applied_revision":2)", R"("applied_revision":"2")")),
            "items[0].applied_revision is not a revision number");
  EXPECT_EQ(refusal("[]", with(R"("applied_revision":2)", R"("applied_revision":-1)")),
            "items[0].applied_revision is not a revision number");
  EXPECT_EQ(refusal("[]", with(R"(,"wanted":true)", "")), "items[0].wanted is not a boolean");
  EXPECT_EQ(refusal("[]", with(R"("label_key":"nico/extsvc-a",)", "")),
            "items[0].label_key is missing");
}

}  // namespace
}  // namespace extsvc::reconcile
