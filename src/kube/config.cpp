#include "kube/config.hpp"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <system_error>

#include "kube/detail/internal.hpp"

namespace extsvc::kube {

namespace {

using nlohmann::json;

constexpr std::uintmax_t kMaxKubeconfigBytes = 16u << 20;

bool starts_with(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}

// Named-list lookup: [{name: n, <field>: {...}}, ...] -> the <field> object.
// Returns nullptr when absent; sets err on malformed structure.
const json* find_named(const json& root, const char* list_key, const char* field,
                       const std::string& name, std::string& err) {
  auto it = root.find(list_key);
  if (it == root.end() || it->is_null()) return nullptr;
  if (!it->is_array()) {
    err = std::string("kubeconfig: '") + list_key + "' must be a list";
    return nullptr;
  }
  for (const auto& entry : *it) {
    if (!entry.is_object()) continue;
    auto n = entry.find("name");
    if (n == entry.end() || !n->is_string() || n->get_ref<const std::string&>() != name) continue;
    auto f = entry.find(field);
    if (f == entry.end() || f->is_null()) {
      static const json kEmpty = json::object();
      return &kEmpty;
    }
    if (!f->is_object()) {
      err = std::string("kubeconfig: ") + list_key + " entry \"" + name + "\" has a malformed '" +
            field + "'";
      return nullptr;
    }
    return &*f;
  }
  return nullptr;
}

// String field; numbers/bools are rendered. Missing or null = "".
std::string get_str(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_boolean()) return it->get<bool>() ? "true" : "false";
  if (it->is_number()) return it->dump();
  return "";
}

std::string resolve(const std::filesystem::path& base_dir, const std::string& p) {
  if (p.empty()) return p;
  std::filesystem::path fp(p);
  if (fp.is_absolute()) return p;
  return (base_dir / fp).lexically_normal().string();
}

}  // namespace

std::optional<std::string> validate(const ClusterConfig& cfg, const ConfigNames& n) {
  if (cfg.server.empty()) return n.server + " is required";
  bool https = starts_with(cfg.server, "https://");
  if (!https && !starts_with(cfg.server, "http://"))
    return n.server + " must start with https:// or http://";
  if (cfg.server.size() <= (https ? 8u : 7u)) return n.server + " has no host";
  if (cfg.server.find_first_of(" \t\r\n") != std::string::npos)
    return n.server + " must not contain whitespace";
  if (!https && (!cfg.token.empty() || !cfg.token_file.empty()) && !cfg.allow_insecure_http)
    return "refusing to send " + n.token_file + " over plain http:// (" + n.server +
           "); use an https:// server (or " + n.allow_insecure_http + " for a test cluster)";
  if (cfg.insecure_skip_verify && (!cfg.ca_file.empty() || !cfg.ca_data.empty()))
    return "specifying " + n.ca_file + " with " + n.insecure + " is not allowed";
  if (!cfg.ca_file.empty() && !cfg.ca_data.empty())
    return "certificate-authority and certificate-authority-data are both specified";
  if (!cfg.client_cert_file.empty() && !cfg.client_cert_data.empty())
    return "client-cert and client-cert-data are both specified";
  if (!cfg.client_key_file.empty() && !cfg.client_key_data.empty())
    return "client-key and client-key-data are both specified";
  bool has_cert = !cfg.client_cert_file.empty() || !cfg.client_cert_data.empty();
  bool has_key = !cfg.client_key_file.empty() || !cfg.client_key_data.empty();
  if (has_cert != has_key) return "client certificate and client key must be specified together";
  if (cfg.qps > 0 && cfg.burst < 1) return n.burst + " must be at least 1 when " + n.qps + " > 0";
  if (cfg.connect_timeout_ms < 0 || cfg.timeout_ms < 0) return n.timeouts + " must not be negative";
  if (cfg.user_agent.find_first_of("\r\n") != std::string::npos)
    return "user_agent must not contain line breaks";
  return std::nullopt;
}

std::variant<ClusterConfig, std::string> load_kubeconfig(const std::string& path,
                                                         const std::string& context) {
  try {
    namespace fs = std::filesystem;
    if (path.empty()) return std::string("kubeconfig path is empty");
    std::error_code ec;
    auto size = fs::file_size(path, ec);
    if (ec) return "cannot read kubeconfig " + path + ": " + ec.message();
    if (size > kMaxKubeconfigBytes) return "kubeconfig " + path + " is too large";
    std::ifstream in(path, std::ios::binary);
    if (!in) return "cannot open kubeconfig " + path;
    std::ostringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();

    json root;
    size_t first = text.find_first_not_of(" \t\r\n");
    if (first != std::string::npos && text[first] == '{') {
      root = json::parse(text, nullptr, false);
      if (root.is_discarded()) return "kubeconfig " + path + " is not valid JSON";
    } else {
      auto parsed = detail::parse_yaml(text);
      if (auto* e = std::get_if<std::string>(&parsed))
        return "kubeconfig " + path + ": invalid YAML: " + *e;
      root = std::move(std::get<json>(parsed));
    }
    if (!root.is_object()) return "kubeconfig " + path + " is not a mapping";

    std::string ctx_name = context.empty() ? get_str(root, "current-context") : context;
    if (ctx_name.empty())
      return "kubeconfig " + path + " has no current-context and no context was requested";
    std::string err;
    const json* ctx = find_named(root, "contexts", "context", ctx_name, err);
    if (!err.empty()) return err;
    if (ctx == nullptr) return "context \"" + ctx_name + "\" not found in kubeconfig " + path;
    std::string cluster_name = get_str(*ctx, "cluster");
    std::string user_name = get_str(*ctx, "user");
    if (cluster_name.empty()) return "context \"" + ctx_name + "\" names no cluster";
    const json* cluster = find_named(root, "clusters", "cluster", cluster_name, err);
    if (!err.empty()) return err;
    if (cluster == nullptr)
      return "cluster \"" + cluster_name + "\" (context \"" + ctx_name +
             "\") not found in kubeconfig";
    const json* user = nullptr;
    if (!user_name.empty()) {
      user = find_named(root, "users", "user", user_name, err);
      if (!err.empty()) return err;
      if (user == nullptr)
        return "user \"" + user_name + "\" (context \"" + ctx_name + "\") not found in kubeconfig";
    }

    fs::path base_dir = fs::absolute(fs::path(path), ec).parent_path();
    if (ec) base_dir = fs::path(path).parent_path();

    ClusterConfig cfg;
    cfg.server = get_str(*cluster, "server");
    if (cfg.server.empty()) return "cluster \"" + cluster_name + "\" has no server";
    cfg.ca_file = resolve(base_dir, get_str(*cluster, "certificate-authority"));
    std::string ca_b64 = get_str(*cluster, "certificate-authority-data");
    if (!ca_b64.empty()) {
      auto d = detail::base64_decode(ca_b64);
      if (!d)
        return "cluster \"" + cluster_name + "\": invalid base64 in certificate-authority-data";
      cfg.ca_data = std::move(*d);
    }
    std::string insecure = get_str(*cluster, "insecure-skip-tls-verify");
    cfg.insecure_skip_verify = insecure == "true" || insecure == "True" || insecure == "TRUE";

    if (user != nullptr) {
      cfg.token = get_str(*user, "token");
      cfg.token_file = resolve(base_dir, get_str(*user, "tokenFile"));
      cfg.client_cert_file = resolve(base_dir, get_str(*user, "client-certificate"));
      cfg.client_key_file = resolve(base_dir, get_str(*user, "client-key"));
      std::string cert_b64 = get_str(*user, "client-certificate-data");
      if (!cert_b64.empty()) {
        auto d = detail::base64_decode(cert_b64);
        if (!d) return "user \"" + user_name + "\": invalid base64 in client-certificate-data";
        cfg.client_cert_data = std::move(*d);
      }
      std::string key_b64 = get_str(*user, "client-key-data");
      if (!key_b64.empty()) {
        auto d = detail::base64_decode(key_b64);
        if (!d) return "user \"" + user_name + "\": invalid base64 in client-key-data";
        cfg.client_key_data = std::move(*d);
      }
      bool has_cred = !cfg.token.empty() || !cfg.token_file.empty() ||
                      !cfg.client_cert_file.empty() || !cfg.client_cert_data.empty();
      // Refused even next to a token: kubectl would run the plugin, the worker cannot.
      for (const char* plugin : {"exec", "auth-provider"}) {
        auto p = user->find(plugin);
        if (p != user->end() && !p->is_null())
          return "user \"" + user_name + "\": " + plugin +
                 " credential plugins are not supported (the worker runs no external programs); "
                 "use a token, tokenFile or client certificate";
      }
      if (!has_cred) {
        if (user->contains("username") || user->contains("password"))
          return "user \"" + user_name + "\": basic authentication is not supported";
      }
    }
    // http:// with a token is refused later, by validate() of the final configuration, where
    // the caller has decided whether insecure HTTP is allowed.
    ClusterConfig probe = cfg;
    probe.allow_insecure_http = true;
    if (auto v = validate(probe)) return "kubeconfig " + path + ": " + *v;
    return cfg;
  } catch (const std::exception& e) {
    return "cannot load kubeconfig " + path + ": " + e.what();
  }
}

}  // namespace extsvc::kube
