// kubeconfig YAML to JSON, on top of yaml-cpp. See detail/internal.hpp.
//
// Plain scalars become JSON strings except null/~/empty (null) and true/false (bool); numbers
// stay strings so that values such as tokens keep their exact text. Anchors and aliases resolve
// (with a bound on the expanded size, against "billion laughs" documents), `<<` merge keys are
// applied as in YAML 1.1 (what kubectl's parser does), and a stream with more than one
// non-empty document is refused: a kubeconfig is one document.
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
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

// yaml-cpp 0.7's LoadAll never returns when a document starts with a token
// its parser does not consume (',' ']' '}' ... found by fuzzing; fixed
// upstream after 0.7 by yaml-cpp PR 1319): each pass yields one more null
// document at the same place. A first pass over the events counts the
// documents and stops at a bound, so LoadAll runs only on a stream known to
// end (the parser is deterministic).
class DocumentCounter final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

constexpr int kMaxDocuments = 16;

std::optional<std::string> too_many_documents(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentCounter counter;
  for (int docs = 0; parser.HandleNextDocument(counter);) {
    if (++docs > kMaxDocuments)
      return "more than " + std::to_string(kMaxDocuments) +
             " YAML documents, or a token that cannot start a document; a kubeconfig is one "
             "document";
  }
  return std::nullopt;
}

}  // namespace

std::variant<nlohmann::json, std::string> parse_yaml(std::string_view text) {
  // YAML allows no C0 control character but tab, LF and CR; yaml-cpp 0.7
  // loops forever on some of them (found by fuzzing: "\0,"), so refuse first.
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
      return "control character " + std::to_string(c) + " at byte " + std::to_string(i) +
             "; YAML does not allow it";
  }
  try {
    const std::string input(text);
    if (auto bad = too_many_documents(input)) return *bad;
    const std::vector<YAML::Node> docs = YAML::LoadAll(input);
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
