#include "core/identity.hpp"

#include <openssl/evp.h>

#include <memory>
#include <stdexcept>

#include "core/ascii.hpp"

namespace extsvc::core {

std::optional<std::string> canonical_uuid(std::string_view uuid) {
  if (uuid.size() != 36) return std::nullopt;
  std::string out(uuid);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const bool hyphen_slot = i == 8 || i == 13 || i == 18 || i == 23;
    if (hyphen_slot) {
      if (out[i] != '-') return std::nullopt;
      continue;
    }
    if (!is_ascii_hex(out[i])) return std::nullopt;
    if (out[i] >= 'A' && out[i] <= 'F') out[i] = static_cast<char>(out[i] - 'A' + 'a');
  }
  return out;
}

std::string identity_hash(std::string_view uuid, std::string_view version) {
  const auto canonical = canonical_uuid(uuid);
  if (!canonical) throw std::invalid_argument("service id is not a UUID");
  std::string input = *canonical;
  input += '/';
  input += version;

  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_len = 0;
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), input.data(), input.size()) != 1 ||
      EVP_DigestFinal_ex(ctx.get(), digest, &digest_len) != 1)
    throw std::runtime_error("SHA-256 computation failed");
  return base32_lower(digest, digest_len).substr(0, kIdentityHashLength);
}

std::string dpf_service_name(std::string_view uuid, std::string_view version) {
  return std::string(kNamePrefix) + identity_hash(uuid, version);
}

std::string placement_label_key(std::string_view uuid, std::string_view version) {
  return std::string(kPlacementLabelPrefix) + identity_hash(uuid, version);
}

bool is_config_version(std::string_view v) {
  if (v.size() < 5 || v[0] != 'V') return false;
  const auto dash = v.find("-T");
  if (dash == std::string_view::npos) return false;
  const auto n = v.substr(1, dash - 1);
  const auto micros = v.substr(dash + 2);
  if (n.empty() || n.size() > 10 || !all_ascii_digits(n) || n[0] == '0') return false;
  return !micros.empty() && micros.size() <= 20 && all_ascii_digits(micros);
}

}  // namespace extsvc::core
