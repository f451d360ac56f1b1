// The wire schema (controller/wire.hpp): a claimed row's work object decodes,
// anything else is refused with the element named (the worker then fails or
// backs the row off with that text instead of working it on a guess), and
// outcomes encode with exactly the keys extsvc.complete reads.
#include "controller/wire.hpp"

#include <gtest/gtest.h>

#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>

namespace extsvc::controller {

using nlohmann::json;
using reconcile::DpuWork;
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

// A DPU's NICo MachineId (SPEC 7), as the queue hands it out.
const std::string kDpu = "fm100dsjtiaehv1n5vh67tbmqq4eabcjdng40f7jupsadbedhruh6rag1l0";

// A DPU's work object with these wanted_keys and items (JSON texts).
std::string dpu_work(const std::string& keys, const std::string& items) {
  return R"({"dpu_machine_id":")" + kDpu +
         R"(","device_name":"dpu-1","node_name":"node-1",)"
         R"("deregistered":false,"attempts":0,"wanted_keys":)" +
         keys + R"(,"items":)" + items + "}";
}

DpuWork decode(const std::string& keys, const std::string& items) {
  return decode_dpu_work(dpu_work(keys, items));
}

std::string refusal(const std::string& work) {
  try {
    decode_dpu_work(work);
  } catch (const WireError& e) {
    return e.what();
  }
  return "decoded";
}

std::string refusal(const std::string& keys, const std::string& items) {
  return refusal(dpu_work(keys, items));
}

TEST(DecodeDpuWork, DecodesBothKindsOfItem) {
  const DpuWork w = decode(R"(["nico/extsvc-a","nico/extsvc-c"])", array_of({kAttachment, kSite}));
  EXPECT_EQ(w.dpu_machine_id, kDpu);
  EXPECT_EQ(w.device_name, "dpu-1");
  EXPECT_EQ(w.node_name, "node-1");
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

TEST(DecodeDpuWork, EmptyArraysAreNothingToDo) {
  const DpuWork w = decode("[]", "[]");
  EXPECT_TRUE(w.wanted_keys.empty());
  EXPECT_TRUE(w.items.empty());
}

TEST(DecodeDpuWork, RefusesWhatDoesNotFitAndNamesIt) {
  const std::string item(kAttachment);
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = item;
    s.replace(s.find(from), from.size(), to);
    return array_of({s});
  };
  EXPECT_EQ(refusal(""), "work is not JSON");
  EXPECT_EQ(refusal("[]"), "work is not a JSON object");
  EXPECT_EQ(refusal("{}", "[]"), "wanted_keys is not a JSON array");
  EXPECT_EQ(refusal("[]", "{}"), "items is not a JSON array");
  EXPECT_EQ(refusal(R"({"dpu_machine_id":")" + kDpu + R"("})"), "deregistered is not a boolean");
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

// A service's work object as extsvc._service_work builds it.
json service_work() {
  return {{"service_id", "8f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"},
          {"lifecycle_state", "CREATING"},
          {"deployment_scope", "INSTANCE_DPUS"},
          {"dpf_service_name", "extsvc-abc"},
          {"attachable_version", "V1-T1700000000000000"},
          {"desired_revision", 2},
          {"applied_revision", nullptr},
          {"attempts", 3},
          {"placement_clear", true},
          {"namespace", "dpf-operator-system"},
          {"helm_data",
           {{"repoURL", "https://charts.example.com/stable"},
            {"chartName", "demo-agent"},
            {"chartVersion", "1.2.3"},
            {"security", {{"privileged", false}}}}}};
}

std::string service_refusal(const json& work) {
  try {
    decode_service_work(work.dump());
  } catch (const WireError& e) {
    return e.what();
  }
  return "decoded";
}

TEST(DecodeServiceWork, DecodesAndRendersTheDesiredRevision) {
  ServiceItem item = decode_service_work(service_work().dump());
  EXPECT_EQ(item.work.service_id, "8f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b");
  EXPECT_EQ(item.work.lifecycle_state, "CREATING");
  EXPECT_EQ(item.work.desired_revision, 2);
  EXPECT_FALSE(item.work.applied_revision.has_value());
  EXPECT_EQ(item.work.attempts, 3);
  EXPECT_TRUE(item.work.placement_clear);
  EXPECT_EQ(item.ns, "dpf-operator-system");
  ASSERT_TRUE(item.helm_data.has_value());
  render_desired(item);
  EXPECT_EQ(item.work.desired["metadata"]["labels"]["nico/extension-service-id"],
            "8f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b");
  EXPECT_EQ(item.work.desired["metadata"]["namespace"], "dpf-operator-system");
  EXPECT_EQ(item.work.desired["spec"]["helmChart"]["source"]["chart"], "demo-agent");
  EXPECT_EQ(item.work.desired["spec"]["serviceDaemonSet"]["annotations"]
                             ["nico/extension-service-revision"],
            "2");
}

TEST(DecodeServiceWork, RefusesWhatDoesNotFitAndNamesIt) {
  auto without = [](const char* key) {
    json w = service_work();
    w.erase(key);
    return w;
  };
  auto with = [](const char* key, json v) {
    json w = service_work();
    w[key] = std::move(v);
    return w;
  };
  EXPECT_EQ(service_refusal(without("service_id")), "service_id is missing");
  EXPECT_EQ(service_refusal(with("lifecycle_state", 7)), "lifecycle_state is not a string");
  EXPECT_EQ(service_refusal(with("desired_revision", 0)),
            "desired_revision is not a revision number");
  EXPECT_EQ(service_refusal(with("applied_revision", "1")),
            "applied_revision is not a revision number");
  EXPECT_EQ(service_refusal(with("attempts", -1)), "attempts is not a count");
  EXPECT_EQ(service_refusal(without("placement_clear")), "placement_clear is not a boolean");
  EXPECT_EQ(service_refusal(with("helm_data", "x")), "helm_data is not an object");
}

TEST(DecodeServiceWork, NoHelmDataCannotBeRendered) {
  ServiceItem item = decode_service_work([] {
    json w = service_work();
    w["helm_data"] = nullptr;
    return w;
  }()
                                             .dump());
  EXPECT_FALSE(item.helm_data.has_value());
  EXPECT_THROW(render_desired(item), std::invalid_argument);
}

TEST(EncodeOutcome, ServiceOutcomesCarryOnlyWhatIsSet) {
  reconcile::Outcome o;
  o.kind = reconcile::Outcome::Kind::kTransition;
  o.new_state = "READY";
  o.reason = "created";
  o.applied_revision = 2;
  o.observed_generation = 1;
  EXPECT_EQ(encode_service_outcome(o), (json{{"outcome", "transition"},
                                             {"new_state", "READY"},
                                             {"reason", "created"},
                                             {"applied_revision", 2},
                                             {"observed_generation", 1}}));
  reconcile::Outcome lost;
  lost.kind = reconcile::Outcome::Kind::kLost;
  lost.message = "lease fence";
  EXPECT_EQ(encode_service_outcome(lost), (json{{"outcome", "retry"}, {"message", "lease fence"}}));
  reconcile::Outcome retry;
  retry.kind = reconcile::Outcome::Kind::kRetry;
  retry.http_status = 429;
  retry.retry_after_s = 1.5;
  EXPECT_EQ(encode_service_outcome(retry),
            (json{{"outcome", "retry"}, {"http_status", 429}, {"retry_after_s", 1.5}}));
}

// The outcomes the worker writes without a pass (work_items.cpp) keep the shapes the SQL side
// reads: a service row that can never be worked fails for good, the rest is retried.
TEST(EncodeOutcome, FailuresAndRetriesOutsideAPass) {
  EXPECT_EQ(encode_service_failure("the claimed row could not be decoded: x"),
            (json{{"outcome", "transition"},
                  {"new_state", "FAILED"},
                  {"reason", "permanent_error"},
                  {"message", "the claimed row could not be decoded: x"}}));
  EXPECT_EQ(encode_retry("nico_extsvc internal error: y"),
            (json{{"outcome", "retry"}, {"message", "nico_extsvc internal error: y"}}));
  EXPECT_EQ(encode_retry("undecodable", 30.0),
            (json{{"outcome", "retry"}, {"message", "undecodable"}, {"retry_after_s", 30.0}}));
  EXPECT_EQ(encode_retry("no delay", 0.0),
            (json{{"outcome", "retry"}, {"message", "no delay"}, {"retry_after_s", 0.0}}));
}

TEST(EncodeOutcome, DpuOutcomesListEveryItemResult) {
  const DpuWork w = decode("[]", array_of({kAttachment, kSite}));
  reconcile::DpuOutcome o;
  o.results.push_back({&w.items[0], "RUNNING", "a Ready pod of revision 2"});
  o.results.push_back({&w.items[1], "TERMINATED", "no pod left"});
  const json j = encode_dpu_outcome(o);
  EXPECT_EQ(j["outcome"], "observed");
  ASSERT_EQ(j["results"].size(), 2u);
  EXPECT_EQ(j["results"][0]["instance_id"], "i-1");
  EXPECT_EQ(j["results"][0]["state"], "RUNNING");
  EXPECT_TRUE(j["results"][1]["instance_id"].is_null());
  EXPECT_EQ(j["results"][1]["kind"], "site");
  EXPECT_FALSE(j.contains("message"));
  EXPECT_EQ(j["keep_polling"], false);
}

TEST(EncodeDpfStatuses, NothingToRecordIsEmpty) {
  EXPECT_EQ(encode_dpf_statuses({}), "");
  core::DpfStatus st;
  st.ready = false;
  st.reason = "ChartPullFailed";
  EXPECT_EQ(
      json::parse(encode_dpf_statuses({{"s-1", st}})),
      json::parse(
          R"([{"service_id":"s-1","ready":false,"reason":"ChartPullFailed","message":null}])"));
}

}  // namespace
}  // namespace extsvc::controller
