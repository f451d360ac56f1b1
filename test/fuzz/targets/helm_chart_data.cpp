// Helm chart data validator: never crashes and throws nothing but
// ValidationError; its normalized output validates to itself, renders into a
// DPUService without throwing, and that DPUService is recognised as ours.
#include "core/helm_chart_data.hpp"

#include <exception>
#include <string>

#include "core/dpuservice_render.hpp"
#include "core/validation_error.hpp"
#include "fuzz_check.hpp"
#include "fuzz_targets.hpp"

namespace extsvc::fuzz {

namespace {

constexpr std::string_view kUuid = "0f8fad5b-d9cb-469f-a165-70867728950e";
constexpr std::string_view kVersion = "V1-T1700000000000000";

}  // namespace

int helm_chart_data(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = as_text(data, size);
  nlohmann::ordered_json normalized;
  try {
    normalized = core::validate_helm_chart_data(text);
  } catch (const core::ValidationError& e) {
    const std::string msg = e.what();
    FUZZ_CHECK(!msg.empty() && msg.find('\n') == std::string::npos);
    FUZZ_CHECK(!e.path.empty() && e.path[0] == '$');
    FUZZ_CHECK(!e.hint.empty());
    return 0;
  } catch (const std::exception& e) {
    fail(__FILE__, __LINE__, e.what());
  }

  // Normalization is idempotent.
  const std::string dumped = normalized.dump();
  FUZZ_CHECK(dumped.size() <= core::kMaxHelmChartDataBytes + 64);
  try {
    FUZZ_CHECK(core::validate_helm_chart_data(dumped) == normalized);
  } catch (const std::exception& e) {
    fail(__FILE__, __LINE__, e.what());
  }

  // Accepted data always renders, and the rendering is recognised as ours.
  try {
    const auto plain = nlohmann::json::parse(dumped);
    const auto svc = core::render_dpuservice(kUuid, kVersion, 1, plain, core::kDefaultNamespace);
    FUZZ_CHECK(core::owned_by(svc, kUuid));
    FUZZ_CHECK(!core::identity_mismatch(svc, kUuid, kVersion, core::kDefaultNamespace));
  } catch (const std::exception& e) {
    fail(__FILE__, __LINE__, e.what());
  }
  return 0;
}

}  // namespace extsvc::fuzz
