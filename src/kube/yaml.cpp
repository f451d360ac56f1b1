// kubeconfig YAML to JSON, on top of yaml-cpp. See detail/internal.hpp.
//
// Plain scalars become JSON strings except null/~/empty (null) and true/false (bool); numbers
// stay strings so that values such as tokens keep their exact text. Anchors and aliases resolve
// (with a bound on the expanded size, against "billion laughs" documents), `<<` merge keys are
// applied as in YAML 1.1 (what kubectl's parser does), and a stream with more than one
// non-empty document is refused: a kubeconfig is one document.
#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kube/detail/internal.hpp"

namespace extsvc::kube::detail {

namespace {

using nlohmann::json;

constexpr int kMaxDepth = 64;
// Bounds on the expanded document: aliases can repeat a subtree any number of times.
constexpr size_t kMaxNodes = 1'000'000;
constexpr size_t kMaxScalarBytes = size_t{64} << 20;

constexpr std::string_view kTagPrefix = "tag:yaml.org,2002:";

struct ConvertError {
  std::string what;
};

std::string at_line(const YAML::Node& n) {
  const auto m = n.Mark();
  if (m.is_null()) return "";
  return " at line " + std::to_string(m.line + 1);
}

[[noreturn]] void fail(const YAML::Node& n, const std::string& what) {
  throw ConvertError{what + at_line(n)};
}

bool is_null_word(const std::string& s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}

class Converter {
 public:
  json convert(const YAML::Node& n, int depth) {
    if (depth > kMaxDepth) fail(n, "nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    if (++nodes_ > kMaxNodes) fail(n, "document expands to too many nodes (aliases)");
    switch (n.Type()) {
      case YAML::NodeType::Undefined:
      case YAML::NodeType::Null:
        return nullptr;
      case YAML::NodeType::Scalar:
        return scalar(n);
      case YAML::NodeType::Sequence: {
        check_collection_tag(n, "seq");
        json out = json::array();
        for (const auto& item : n) out.push_back(convert(item, depth + 1));
        return out;
      }
      case YAML::NodeType::Map:
        return mapping(n, depth);
    }
    return nullptr;
  }

 private:
  json scalar(const YAML::Node& n) {
    const std::string& v = n.Scalar();
    scalar_bytes_ += v.size();
    if (scalar_bytes_ > kMaxScalarBytes) fail(n, "document expands to too much text (aliases)");
    const std::string& tag = n.Tag();
    if (tag == "!") return v;  // quoted or block scalar: always a string
    std::string_view kind;
    if (tag == "?" || tag.empty()) {
      kind = "";  // plain scalar: resolve below
    } else if (std::string_view(tag).substr(0, kTagPrefix.size()) == kTagPrefix) {
      kind = std::string_view(tag).substr(kTagPrefix.size());
      if (kind == "str" || kind == "int" || kind == "float" || kind == "binary") return v;
      if (kind != "null" && kind != "bool") fail(n, "unsupported YAML tag");
    } else {
      fail(n, "unsupported YAML tag");
    }
    if (kind != "bool" && is_null_word(v)) return nullptr;
    if (v == "true" || v == "True" || v == "TRUE") return true;
    if (v == "false" || v == "False" || v == "FALSE") return false;
    if (kind == "bool" || kind == "null") fail(n, "invalid value for an explicit YAML tag");
    return v;
  }

  void check_collection_tag(const YAML::Node& n, std::string_view kind) {
    const std::string& tag = n.Tag();
    if (tag.empty() || tag == "?" || tag == "!") return;
    if (std::string_view(tag) == std::string(kTagPrefix) + std::string(kind)) return;
    fail(n, "unsupported YAML tag");
  }

  static bool is_merge_key(const YAML::Node& key) {
    return key.IsScalar() && key.Scalar() == "<<" && (key.Tag() == "?" || key.Tag().empty());
  }

  json mapping(const YAML::Node& n, int depth) {
    check_collection_tag(n, "map");
    json out = json::object();
    std::vector<YAML::Node> merges;
    for (const auto& kv : n) {
      const YAML::Node& key = kv.first;
      if (is_merge_key(key)) {
        merges.push_back(kv.second);
        continue;
      }
      if (!key.IsScalar()) fail(key, "complex (non-scalar) mapping keys are not supported");
      const std::string& k = key.Scalar();
      if (out.contains(k)) fail(key, "duplicate mapping key");
      out[k] = convert(kv.second, depth + 1);
    }
    // YAML 1.1 merge keys: explicit keys win, then earlier merged maps over later ones.
    for (const auto& m : merges) {
      std::vector<YAML::Node> sources;
      if (m.IsMap()) {
        sources.push_back(m);
      } else if (m.IsSequence()) {
        for (const auto& s : m) sources.push_back(s);
      } else {
        fail(m, "a << merge key needs a mapping or a list of mappings");
      }
      for (const auto& src : sources) {
        if (!src.IsMap()) fail(src, "a << merge key needs a mapping or a list of mappings");
        json merged = convert(src, depth + 1);
        for (auto& [k, v] : merged.items())
          if (!out.contains(k)) out[k] = std::move(v);
      }
    }
    return out;
  }

  size_t nodes_ = 0;
  size_t scalar_bytes_ = 0;
};

}  // namespace

// yaml-cpp 0.7 loops forever when a document's first token is ',' (found by
// fuzzing: ",:1"). Such a document is invalid YAML anyway (',' cannot start a
// plain scalar in block context), so it is refused before yaml-cpp sees it.
std::optional<std::string> document_starting_with_comma(std::string_view text) {
  bool at_start = true;
  size_t line = 0;
  for (size_t i = 0; i <= text.size();) {
    ++line;
    size_t end = text.find('\n', i);
    if (end == std::string_view::npos) end = text.size();
    std::string_view l = text.substr(i, end - i);
    i = end + 1;
    size_t k = l.find_first_not_of(" \t\r");
    if (k == std::string_view::npos) continue;
    std::string_view t = l.substr(k);
    const bool marker = (t.starts_with("---") || t.starts_with("...")) &&
                        (t.size() == 3 || t[3] == ' ' || t[3] == '\t' || t[3] == '\r');
    if (marker) {
      at_start = true;
      t = t.substr(3);
      k = t.find_first_not_of(" \t\r");
      if (k == std::string_view::npos) continue;
      t = t.substr(k);
    }
    if (t[0] == '#' || (at_start && t[0] == '%')) continue;
    if (at_start && t[0] == ',')
      return "a YAML document cannot start with ',' (line " + std::to_string(line) + ")";
    at_start = false;
  }
  return std::nullopt;
}

std::variant<nlohmann::json, std::string> parse_yaml(std::string_view text) {
  // YAML allows no C0 control character but tab, LF and CR; yaml-cpp 0.7
  // loops forever on some of them (found by fuzzing: "\0,"), so refuse first.
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
      return "control character " + std::to_string(c) + " at byte " + std::to_string(i) +
             "; YAML does not allow it";
  }
  if (auto bad = document_starting_with_comma(text)) return *bad;
  try {
    const std::vector<YAML::Node> docs = YAML::LoadAll(std::string(text));
    const YAML::Node* doc = nullptr;
    for (const auto& d : docs) {
      if (d.IsNull() || !d.IsDefined()) continue;
      if (doc != nullptr)
        return "multiple YAML documents" + at_line(d) + "; a kubeconfig is one document";
      doc = &d;
    }
    if (doc == nullptr) return json(nullptr);
    Converter c;
    return c.convert(*doc, 0);
  } catch (const ConvertError& e) {
    return e.what;
  } catch (const YAML::Exception& e) {
    // yaml-cpp's messages name the problem ("end of map not found"), never the content.
    std::string out = e.msg;
    if (!e.mark.is_null())
      out += " at line " + std::to_string(e.mark.line + 1) + ", column " +
             std::to_string(e.mark.column + 1);
    return out;
  } catch (const std::exception& e) {
    return std::string("cannot parse YAML: ") + e.what();
  }
}

}  // namespace extsvc::kube::detail
