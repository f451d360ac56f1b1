#include "label_selector.h"

#include <cctype>
#include <cstdlib>

namespace dpfsim {

namespace {

enum class Tok { End, Ident, Not, Eq, DoubleEq, NotEq, In, NotIn, Open, Close, Comma, Gt, Lt };

struct Token {
  Tok t;
  std::string s;
};

bool is_special(char c) {
  return c == '!' || c == '=' || c == '(' || c == ')' || c == ',' || c == '>' || c == '<';
}

std::vector<Token> lex(const std::string& in) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < in.size()) {
    char c = in[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (c == '!') {
      if (i + 1 < in.size() && in[i + 1] == '=') {
        out.push_back({Tok::NotEq, "!="});
        i += 2;
      } else {
        out.push_back({Tok::Not, "!"});
        ++i;
      }
      continue;
    }
    if (c == '=') {
      if (i + 1 < in.size() && in[i + 1] == '=') {
        out.push_back({Tok::DoubleEq, "=="});
        i += 2;
      } else {
        out.push_back({Tok::Eq, "="});
        ++i;
      }
      continue;
    }
    if (c == '(') {
      out.push_back({Tok::Open, "("});
      ++i;
      continue;
    }
    if (c == ')') {
      out.push_back({Tok::Close, ")"});
      ++i;
      continue;
    }
    if (c == ',') {
      out.push_back({Tok::Comma, ","});
      ++i;
      continue;
    }
    if (c == '>') {
      out.push_back({Tok::Gt, ">"});
      ++i;
      continue;
    }
    if (c == '<') {
      out.push_back({Tok::Lt, "<"});
      ++i;
      continue;
    }
    size_t j = i;
    while (j < in.size() && !std::isspace(static_cast<unsigned char>(in[j])) && !is_special(in[j]))
      ++j;
    std::string word = in.substr(i, j - i);
    if (word == "in")
      out.push_back({Tok::In, word});
    else if (word == "notin")
      out.push_back({Tok::NotIn, word});
    else
      out.push_back({Tok::Ident, word});
    i = j;
  }
  out.push_back({Tok::End, ""});
  return out;
}

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument("unable to parse requirement: " + what);
}

std::string tok_name(const Token& t) {
  return t.t == Tok::End ? "" : t.s;
}

}  // namespace

LabelSelector LabelSelector::parse(const std::string& text) {
  LabelSelector sel;
  std::vector<Token> toks = lex(text);
  size_t p = 0;
  if (toks[0].t == Tok::End) return sel;
  while (true) {
    LabelRequirement r;
    if (toks[p].t == Tok::Not) {
      ++p;
      if (toks[p].t != Tok::Ident) fail("found '" + tok_name(toks[p]) + "', expected: identifier");
      r.key = toks[p++].s;
      r.op = LabelRequirement::Op::DoesNotExist;
    } else if (toks[p].t == Tok::Ident) {
      r.key = toks[p++].s;
      switch (toks[p].t) {
        case Tok::End:
        case Tok::Comma:
          r.op = LabelRequirement::Op::Exists;
          break;
        case Tok::Eq:
        case Tok::DoubleEq:
        case Tok::NotEq: {
          r.op = toks[p].t == Tok::NotEq ? LabelRequirement::Op::NotEquals
                                         : LabelRequirement::Op::Equals;
          ++p;
          if (toks[p].t == Tok::Ident)
            r.values.push_back(toks[p++].s);
          else if (toks[p].t == Tok::End || toks[p].t == Tok::Comma)
            r.values.push_back("");
          else
            fail("found '" + tok_name(toks[p]) + "', expected: identifier");
          break;
        }
        case Tok::Gt:
        case Tok::Lt: {
          r.op = toks[p].t == Tok::Gt ? LabelRequirement::Op::GreaterThan
                                      : LabelRequirement::Op::LessThan;
          ++p;
          if (toks[p].t != Tok::Ident) fail("found '" + tok_name(toks[p]) + "', expected: integer");
          char* end = nullptr;
          std::strtoll(toks[p].s.c_str(), &end, 10);
          if (!end || *end) fail("for 'Gt', 'Lt' operators, the value must be an integer");
          r.values.push_back(toks[p++].s);
          break;
        }
        case Tok::In:
        case Tok::NotIn: {
          r.op = toks[p].t == Tok::In ? LabelRequirement::Op::In : LabelRequirement::Op::NotIn;
          ++p;
          if (toks[p].t != Tok::Open) fail("found '" + tok_name(toks[p]) + "', expected: '('");
          ++p;
          bool expect_value = true;
          while (true) {
            if (toks[p].t == Tok::Close) {
              if (expect_value && !r.values.empty()) r.values.push_back("");
              ++p;
              break;
            }
            if (toks[p].t == Tok::Ident && expect_value) {
              r.values.push_back(toks[p++].s);
              expect_value = false;
            } else if (toks[p].t == Tok::Comma) {
              if (expect_value) r.values.push_back("");
              expect_value = true;
              ++p;
            } else {
              fail("found '" + tok_name(toks[p]) + "', expected: ',', ')' or identifier");
            }
          }
          if (r.values.empty()) fail("for 'in', 'notin' operators, values set can't be empty");
          break;
        }
        default:
          fail("found '" + tok_name(toks[p]) + "', expected: in, notin, =, ==, !=, gt, lt");
      }
    } else {
      fail("found '" + tok_name(toks[p]) + "', expected: !, identifier, or 'end of string'");
    }
    sel.reqs_.push_back(std::move(r));
    if (toks[p].t == Tok::End) break;
    if (toks[p].t != Tok::Comma)
      fail("found '" + tok_name(toks[p]) + "', expected: ',' or 'end of string'");
    ++p;
  }
  return sel;
}

LabelSelector LabelSelector::from_json(const json& sel) {
  LabelSelector out;
  if (!sel.is_object()) return out;
  if (auto it = sel.find("matchLabels"); it != sel.end() && it->is_object()) {
    for (auto& [k, v] : it->items()) {
      LabelRequirement r;
      r.key = k;
      r.op = LabelRequirement::Op::Equals;
      r.values.push_back(v.is_string() ? v.get<std::string>() : v.dump());
      out.reqs_.push_back(r);
    }
  }
  if (auto it = sel.find("matchExpressions"); it != sel.end() && it->is_array()) {
    for (const auto& e : *it) {
      LabelRequirement r;
      r.key = jstr(e, {"key"});
      std::string op = jstr(e, {"operator"});
      if (op == "In")
        r.op = LabelRequirement::Op::In;
      else if (op == "NotIn")
        r.op = LabelRequirement::Op::NotIn;
      else if (op == "Exists")
        r.op = LabelRequirement::Op::Exists;
      else if (op == "DoesNotExist")
        r.op = LabelRequirement::Op::DoesNotExist;
      else
        continue;
      if (auto vs = e.find("values"); vs != e.end() && vs->is_array())
        for (const auto& v : *vs)
          if (v.is_string()) r.values.push_back(v.get<std::string>());
      out.reqs_.push_back(r);
    }
  }
  return out;
}

bool LabelSelector::matches(const json& labels) const {
  for (const auto& r : reqs_) {
    const json* v = nullptr;
    if (labels.is_object()) {
      auto it = labels.find(r.key);
      if (it != labels.end()) v = &*it;
    }
    std::string val = (v && v->is_string()) ? v->get<std::string>() : "";
    bool has = v != nullptr;
    auto in_values = [&]() {
      for (const auto& x : r.values)
        if (x == val) return true;
      return false;
    };
    switch (r.op) {
      case LabelRequirement::Op::Equals:
      case LabelRequirement::Op::In:
        if (!has || !in_values()) return false;
        break;
      case LabelRequirement::Op::NotEquals:
      case LabelRequirement::Op::NotIn:
        if (has && in_values()) return false;
        break;
      case LabelRequirement::Op::Exists:
        if (!has) return false;
        break;
      case LabelRequirement::Op::DoesNotExist:
        if (has) return false;
        break;
      case LabelRequirement::Op::GreaterThan:
      case LabelRequirement::Op::LessThan: {
        if (!has) return false;
        char* end = nullptr;
        long long lv = std::strtoll(val.c_str(), &end, 10);
        if (val.empty() || !end || *end) return false;
        long long rv = std::strtoll(r.values[0].c_str(), nullptr, 10);
        if (r.op == LabelRequirement::Op::GreaterThan ? !(lv > rv) : !(lv < rv)) return false;
        break;
      }
    }
  }
  return true;
}

std::string field_value(const json& obj, const std::string& path) {
  const json* cur = &obj;
  for (const auto& part : split(path, '.')) {
    if (!cur->is_object()) return "";
    auto it = cur->find(part);
    if (it == cur->end()) return "";
    cur = &*it;
  }
  if (cur->is_string()) return cur->get<std::string>();
  if (cur->is_boolean()) return cur->get<bool>() ? "true" : "false";
  if (cur->is_number()) return cur->dump();
  return "";
}

FieldSelector FieldSelector::parse(const std::string& text,
                                   const std::vector<std::string>& allowed) {
  FieldSelector fs;
  if (trim(text).empty()) return fs;
  for (const auto& raw : split(text, ',')) {
    std::string term = trim(raw);
    if (term.empty()) continue;
    FieldRequirement r;
    size_t pos;
    if ((pos = term.find("!=")) != std::string::npos) {
      r.negate = true;
      r.field = trim(term.substr(0, pos));
      r.value = trim(term.substr(pos + 2));
    } else if ((pos = term.find("==")) != std::string::npos) {
      r.field = trim(term.substr(0, pos));
      r.value = trim(term.substr(pos + 2));
    } else if ((pos = term.find('=')) != std::string::npos) {
      r.field = trim(term.substr(0, pos));
      r.value = trim(term.substr(pos + 1));
    } else {
      throw std::invalid_argument("invalid selector: '" + text + "'; can't understand '" + term +
                                  "'");
    }
    bool ok = false;
    for (const auto& a : allowed)
      if (a == r.field) ok = true;
    if (!ok) throw std::invalid_argument("field label not supported: " + r.field);
    fs.reqs_.push_back(r);
  }
  return fs;
}

bool FieldSelector::matches(const json& obj) const {
  for (const auto& r : reqs_) {
    bool eq = field_value(obj, r.field) == r.value;
    if (eq == r.negate) return false;
  }
  return true;
}

}  // namespace dpfsim
