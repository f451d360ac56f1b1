// A small parser for the YAML subset used by kubeconfig files. See detail/internal.hpp.
//
// Plain scalars become JSON strings except null/~/empty (null) and true/false (bool); numbers
// stay strings so that values such as tokens keep their exact text.
#include <cctype>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "kube/detail/internal.hpp"

namespace extsvc::kube::detail {

namespace {

using nlohmann::json;

constexpr int kMaxDepth = 64;

struct ParseError {
  std::string what;
};

struct Line {
  int no = 0;       // 1-based line number in the input
  int indent = 0;   // column of the first content character
  std::string raw;  // text after the indentation (may contain a comment)
  bool tab_indent = false;
};

bool is_space(char c) {
  return c == ' ' || c == '\t';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && (is_space(s.back()) || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Removes a trailing comment (quote-aware) and surrounding blanks.
std::string strip_comment(std::string_view s) {
  char quote = 0;
  char prev_sig = 0;  // previous non-blank character outside quotes (0 = start)
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (quote == '"') {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        quote = 0;
        prev_sig = c;
      }
      continue;
    }
    if (quote == '\'') {
      if (c == '\'') {
        if (i + 1 < s.size() && s[i + 1] == '\'') {
          ++i;
        } else {
          quote = 0;
          prev_sig = c;
        }
      }
      continue;
    }
    if (c == '#' && (i == 0 || is_space(s[i - 1]))) return std::string(trim(s.substr(0, i)));
    if ((c == '"' || c == '\'') &&
        (prev_sig == 0 || prev_sig == ':' || prev_sig == '-' || prev_sig == '[' ||
         prev_sig == '{' || prev_sig == ',' || prev_sig == '?') &&
        (i == 0 || is_space(s[i - 1]) || s[i - 1] == '[' || s[i - 1] == '{' || s[i - 1] == ',')) {
      quote = c;
      continue;
    }
    if (!is_space(c)) prev_sig = c;
  }
  return std::string(trim(s));
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Parser {
 public:
  explicit Parser(std::string_view text) { split(text); }

  json parse_document() {
    skip_blank();
    if (pos_ < lines_.size() && strip_comment(lines_[pos_].raw) == "---" &&
        lines_[pos_].indent == 0) {
      ++pos_;
    }
    skip_blank();
    json root;
    if (!eof()) root = parse_node_at(cur().indent, 0);
    skip_blank();
    if (!eof()) {
      std::string c = strip_comment(cur().raw);
      if (c == "..." || c == "---") {
        ++pos_;
        skip_blank();
        if (!eof()) fail("multiple YAML documents are not supported");
      } else {
        fail("unexpected content (bad indentation?)");
      }
    }
    return root;
  }

 private:
  std::vector<Line> lines_;
  size_t pos_ = 0;

  void split(std::string_view text) {
    if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
    int no = 0;
    size_t start = 0;
    while (start <= text.size()) {
      size_t nl = text.find('\n', start);
      std::string_view l =
          text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
      if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
      Line line;
      line.no = ++no;
      size_t i = 0;
      while (i < l.size() && is_space(l[i])) {
        if (l[i] == '\t') line.tab_indent = true;
        ++i;
      }
      line.indent = static_cast<int>(i);
      line.raw = std::string(l.substr(i));
      lines_.push_back(std::move(line));
      if (nl == std::string_view::npos) break;
      start = nl + 1;
    }
  }

  [[noreturn]] void fail(const std::string& what) const {
    int no = pos_ < lines_.size() ? lines_[pos_].no : (lines_.empty() ? 0 : lines_.back().no);
    throw ParseError{what + " at line " + std::to_string(no)};
  }

  bool eof() const { return pos_ >= lines_.size(); }
  const Line& cur() const { return lines_[pos_]; }

  // Skips blank and comment-only lines; refuses tab indentation on the next content line.
  void skip_blank() {
    while (!eof() && strip_comment(cur().raw).empty()) ++pos_;
    if (!eof()) check_line();
  }

  static bool is_seq_item(const std::string& c) {
    return c == "-" || (c.size() >= 2 && c[0] == '-' && is_space(c[1]));
  }

  void check_line() const {
    if (cur().tab_indent) fail("tabs are not allowed in indentation");
  }

  json parse_node_at(int indent, int depth) {
    if (depth > kMaxDepth) fail("nesting too deep");
    check_line();
    std::string c = strip_comment(cur().raw);
    if (is_seq_item(c)) return parse_seq(indent, depth);
    std::string key;
    std::string rest;
    if (split_key(c, key, rest)) return parse_map(indent, depth);
    return parse_value_text(c, indent, depth);
  }

  // Splits "key: rest" / "key:" (plain or quoted key). False when c is not a mapping entry.
  bool split_key(const std::string& c, std::string& key, std::string& rest) const {
    if (c.empty()) return false;
    if (c[0] == '?') fail("complex mapping keys are not supported");
    if (c[0] == '[' || c[0] == '{') return false;
    size_t after = 0;
    if (c[0] == '"' || c[0] == '\'') {
      size_t i = 0;
      std::string k = parse_quoted(c, i);
      while (i < c.size() && is_space(c[i])) ++i;
      if (i >= c.size() || c[i] != ':') return false;
      if (i + 1 < c.size() && !is_space(c[i + 1])) return false;
      key = std::move(k);
      after = i + 1;
    } else {
      size_t i = 0;
      for (;; ++i) {
        i = c.find(':', i);
        if (i == std::string::npos) return false;
        if (i + 1 == c.size() || is_space(c[i + 1])) break;
      }
      key = std::string(trim(std::string_view(c).substr(0, i)));
      if (key.empty()) return false;
      after = i + 1;
    }
    rest = std::string(trim(std::string_view(c).substr(after)));
    return true;
  }

  json parse_map(int indent, int depth) {
    json obj = json::object();
    while (true) {
      skip_blank();
      if (eof()) break;
      check_line();
      if (cur().indent < indent) break;
      if (cur().indent > indent) fail("bad indentation");
      std::string c = strip_comment(cur().raw);
      if (c == "---" || c == "...") break;
      if (is_seq_item(c)) fail("unexpected sequence item in a mapping");
      std::string key;
      std::string rest;
      if (!split_key(c, key, rest)) fail("expected a 'key: value' mapping entry");
      if (obj.contains(key)) fail("duplicate mapping key");
      obj[key] = parse_entry_value(rest, indent, depth);
    }
    return obj;
  }

  // Value of a mapping entry whose text after ':' is `rest`; the current line is the entry line.
  json parse_entry_value(const std::string& rest, int indent, int depth) {
    if (rest.empty()) {
      ++pos_;
      skip_blank();
      if (eof()) return nullptr;
      if (cur().indent > indent) return parse_node_at(cur().indent, depth + 1);
      if (cur().indent == indent && is_seq_item(strip_comment(cur().raw)))
        return parse_seq(indent, depth + 1);
      return nullptr;
    }
    if (rest[0] == '|' || rest[0] == '>') return parse_block_scalar(rest, indent);
    return parse_value_text(rest, indent, depth);
  }

  json parse_seq(int indent, int depth) {
    json arr = json::array();
    while (true) {
      skip_blank();
      if (eof()) break;
      check_line();
      if (cur().indent < indent) break;
      if (cur().indent > indent) fail("bad indentation");
      std::string c = strip_comment(cur().raw);
      if (!is_seq_item(c)) break;
      // Re-interpret the rest of the line as a node indented past the dash.
      Line& line = lines_[pos_];
      size_t i = 1;
      while (i < line.raw.size() && is_space(line.raw[i])) {
        if (line.raw[i] == '\t') fail("tabs are not allowed in indentation");
        ++i;
      }
      std::string item_text = strip_comment(std::string_view(line.raw).substr(i));
      if (item_text.empty()) {
        ++pos_;
        skip_blank();
        if (!eof() && cur().indent > indent) {
          arr.push_back(parse_node_at(cur().indent, depth + 1));
        } else {
          arr.push_back(nullptr);
        }
        continue;
      }
      line.indent += static_cast<int>(i);
      line.raw = line.raw.substr(i);
      std::string key;
      std::string rest;
      if (item_text[0] == '|' || item_text[0] == '>') {
        arr.push_back(parse_block_scalar(item_text, indent));
      } else if (is_seq_item(item_text) || split_key(item_text, key, rest)) {
        arr.push_back(parse_node_at(line.indent, depth + 1));
      } else {
        arr.push_back(parse_value_text(item_text, line.indent, depth + 1));
      }
    }
    return arr;
  }

  // Inline value text (scalar or flow collection) starting on the current line; consumes it.
  json parse_value_text(const std::string& text, int indent, int depth) {
    if (text[0] == '&' || text[0] == '*' || text[0] == '!')
      fail("YAML anchors, aliases and tags are not supported");
    if (text[0] == '[' || text[0] == '{') {
      std::string buf = text;
      ++pos_;
      // Flow collections may continue on following, more-indented lines.
      while (!balanced(buf)) {
        skip_blank();
        if (eof() || cur().indent <= indent) fail("unterminated flow collection");
        buf += ' ';
        buf += strip_comment(cur().raw);
        ++pos_;
      }
      size_t i = 0;
      json v = parse_flow(buf, i, depth + 1);
      skip_ws(buf, i);
      if (i != buf.size()) fail("unexpected characters after a flow collection");
      return v;
    }
    if (text[0] == '"' || text[0] == '\'') {
      size_t i = 0;
      std::string s = parse_quoted(text, i);
      if (!trim(std::string_view(text).substr(i)).empty())
        fail("unexpected characters after a quoted scalar");
      ++pos_;
      return s;
    }
    ++pos_;
    // Plain multi-line scalar continuation: more-indented lines that are not entries.
    std::string s = text;
    while (true) {
      size_t save = pos_;
      skip_blank();
      if (eof() || cur().indent <= indent) {
        pos_ = save;
        break;
      }
      std::string c = strip_comment(cur().raw);
      std::string k;
      std::string r;
      if (is_seq_item(c) || split_key(c, k, r)) fail("bad indentation");
      s += ' ';
      s += c;
      ++pos_;
    }
    return plain_scalar(s);
  }

  static bool balanced(const std::string& s) {
    int d = 0;
    char quote = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      char c = s[i];
      if (quote == '"') {
        if (c == '\\')
          ++i;
        else if (c == '"')
          quote = 0;
      } else if (quote == '\'') {
        if (c == '\'') quote = 0;
      } else if (c == '"' || c == '\'') {
        quote = c;
      } else if (c == '[' || c == '{') {
        ++d;
      } else if (c == ']' || c == '}') {
        --d;
      }
    }
    return d <= 0 && quote == 0;
  }

  static json plain_scalar(std::string_view s) {
    s = trim(s);
    if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
    if (s == "true" || s == "True" || s == "TRUE") return true;
    if (s == "false" || s == "False" || s == "FALSE") return false;
    return std::string(s);
  }

  static void skip_ws(const std::string& s, size_t& i) {
    while (i < s.size() && is_space(s[i])) ++i;
  }

  json parse_flow(const std::string& s, size_t& i, int depth) {
    if (depth > kMaxDepth) fail("nesting too deep");
    skip_ws(s, i);
    if (i >= s.size()) fail("unexpected end of flow collection");
    char c = s[i];
    if (c == '[') {
      ++i;
      json arr = json::array();
      skip_ws(s, i);
      if (i < s.size() && s[i] == ']') {
        ++i;
        return arr;
      }
      while (true) {
        arr.push_back(parse_flow(s, i, depth + 1));
        skip_ws(s, i);
        if (i < s.size() && s[i] == ',') {
          ++i;
          skip_ws(s, i);
          if (i < s.size() && s[i] == ']') {
            ++i;
            return arr;
          }
          continue;
        }
        if (i < s.size() && s[i] == ']') {
          ++i;
          return arr;
        }
        fail("malformed flow sequence");
      }
    }
    if (c == '{') {
      ++i;
      json obj = json::object();
      skip_ws(s, i);
      if (i < s.size() && s[i] == '}') {
        ++i;
        return obj;
      }
      while (true) {
        skip_ws(s, i);
        std::string key;
        if (i < s.size() && (s[i] == '"' || s[i] == '\'')) {
          key = parse_quoted(s, i);
        } else {
          size_t st = i;
          while (i < s.size() && s[i] != ':' && s[i] != ',' && s[i] != '}') ++i;
          key = std::string(trim(std::string_view(s).substr(st, i - st)));
        }
        skip_ws(s, i);
        json val;
        if (i < s.size() && s[i] == ':') {
          ++i;
          skip_ws(s, i);
          if (i < s.size() && (s[i] == ',' || s[i] == '}')) {
            val = nullptr;
          } else {
            val = parse_flow(s, i, depth + 1);
          }
        }
        obj[key] = std::move(val);
        skip_ws(s, i);
        if (i < s.size() && s[i] == ',') {
          ++i;
          skip_ws(s, i);
          if (i < s.size() && s[i] == '}') {
            ++i;
            return obj;
          }
          continue;
        }
        if (i < s.size() && s[i] == '}') {
          ++i;
          return obj;
        }
        fail("malformed flow mapping");
      }
    }
    if (c == '"' || c == '\'') return parse_quoted(s, i);
    if (c == '&' || c == '*' || c == '!') fail("YAML anchors, aliases and tags are not supported");
    size_t st = i;
    while (i < s.size() && s[i] != ',' && s[i] != ']' && s[i] != '}') ++i;
    return plain_scalar(std::string_view(s).substr(st, i - st));
  }

  // Parses a quoted scalar starting at s[i] (a quote); leaves i after the closing quote.
  std::string parse_quoted(const std::string& s, size_t& i) const {
    char q = s[i++];
    std::string out;
    while (true) {
      if (i >= s.size())
        fail("unterminated quoted scalar (multi-line quoted scalars are not supported)");
      char c = s[i];
      if (q == '\'') {
        if (c == '\'') {
          if (i + 1 < s.size() && s[i + 1] == '\'') {
            out += '\'';
            i += 2;
            continue;
          }
          ++i;
          return out;
        }
        out += c;
        ++i;
        continue;
      }
      if (c == '"') {
        ++i;
        return out;
      }
      if (c != '\\') {
        out += c;
        ++i;
        continue;
      }
      if (i + 1 >= s.size()) fail("bad escape in double-quoted scalar");
      char e = s[i + 1];
      i += 2;
      switch (e) {
        case '0':
          out += '\0';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 't':
        case '\t':
          out += '\t';
          break;
        case 'n':
          out += '\n';
          break;
        case 'v':
          out += '\v';
          break;
        case 'f':
          out += '\f';
          break;
        case 'r':
          out += '\r';
          break;
        case 'e':
          out += '\x1b';
          break;
        case ' ':
          out += ' ';
          break;
        case '"':
          out += '"';
          break;
        case '/':
          out += '/';
          break;
        case '\\':
          out += '\\';
          break;
        case 'N':
          append_utf8(out, 0x85);
          break;
        case '_':
          append_utf8(out, 0xA0);
          break;
        case 'L':
          append_utf8(out, 0x2028);
          break;
        case 'P':
          append_utf8(out, 0x2029);
          break;
        case 'x':
        case 'u':
        case 'U': {
          size_t len = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          if (i + len > s.size()) fail("bad escape in double-quoted scalar");
          uint32_t cp = 0;
          for (size_t k = 0; k < len; ++k) {
            char h = s[i + k];
            cp <<= 4;
            if (h >= '0' && h <= '9')
              cp |= static_cast<uint32_t>(h - '0');
            else if (h >= 'a' && h <= 'f')
              cp |= static_cast<uint32_t>(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F')
              cp |= static_cast<uint32_t>(h - 'A' + 10);
            else
              fail("bad escape in double-quoted scalar");
          }
          i += len;
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            // Surrogate pair (\uD83D\uDE00) or invalid.
            if (e == 'u' && cp >= 0xD800 && cp <= 0xDBFF && i + 6 <= s.size() && s[i] == '\\' &&
                s[i + 1] == 'u') {
              uint32_t lo = 0;
              for (size_t k = 0; k < 4; ++k) {
                char h = s[i + 2 + k];
                lo <<= 4;
                if (h >= '0' && h <= '9')
                  lo |= static_cast<uint32_t>(h - '0');
                else if (h >= 'a' && h <= 'f')
                  lo |= static_cast<uint32_t>(h - 'a' + 10);
                else if (h >= 'A' && h <= 'F')
                  lo |= static_cast<uint32_t>(h - 'A' + 10);
                else
                  fail("bad escape in double-quoted scalar");
              }
              if (lo < 0xDC00 || lo > 0xDFFF) fail("bad surrogate pair in double-quoted scalar");
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
              i += 6;
            } else {
              fail("bad code point in double-quoted scalar");
            }
          }
          append_utf8(out, cp);
          break;
        }
        default:
          fail("bad escape in double-quoted scalar");
      }
    }
  }

  // Literal (|) or folded (>) block scalar; header is the text after "key:". `indent` is the
  // indentation of the owning entry. Current line is the header line.
  json parse_block_scalar(const std::string& header, int indent) {
    char style = header[0];
    char chomp = 0;
    int explicit_indent = 0;
    for (size_t k = 1; k < header.size(); ++k) {
      char h = header[k];
      if (h == '-' || h == '+')
        chomp = h;
      else if (h >= '1' && h <= '9')
        explicit_indent = h - '0';
      else if (is_space(h))
        break;
      else
        fail("bad block scalar header");
    }
    ++pos_;
    int block_indent = explicit_indent > 0 ? indent + explicit_indent : -1;
    std::vector<std::string> body;
    while (!eof()) {
      const Line& l = cur();
      bool blank = trim(l.raw).empty();
      if (blank) {
        body.emplace_back();
        ++pos_;
        continue;
      }
      if (block_indent < 0) {
        if (l.indent <= indent) break;
        block_indent = l.indent;
      }
      if (l.indent < block_indent) break;
      body.push_back(std::string(l.indent - block_indent, ' ') + l.raw);
      ++pos_;
    }
    // Trailing blank lines belong to chomping; also give back lines for the parent.
    size_t trailing = 0;
    while (trailing < body.size() && body[body.size() - 1 - trailing].empty()) ++trailing;
    std::vector<std::string> content(body.begin(), body.end() - static_cast<long>(trailing));
    std::string out;
    if (style == '|') {
      for (size_t k = 0; k < content.size(); ++k) {
        out += content[k];
        if (k + 1 < content.size()) out += '\n';
      }
    } else {
      for (size_t k = 0; k < content.size(); ++k) {
        const std::string& ln = content[k];
        out += ln;
        if (k + 1 < content.size()) {
          const std::string& next = content[k + 1];
          bool more = (!ln.empty() && is_space(ln[0])) || (!next.empty() && is_space(next[0]));
          if (ln.empty() || more)
            out += '\n';  // an empty line stands for one newline
          else if (!next.empty())
            out += ' ';  // a break before an empty line is dropped
        }
      }
    }
    if (!content.empty()) {
      if (chomp == 0)
        out += '\n';
      else if (chomp == '+')
        out += std::string(trailing + 1, '\n');
    }
    return out;
  }
};

}  // namespace

std::variant<nlohmann::json, std::string> parse_yaml(std::string_view text) {
  try {
    Parser p(text);
    return p.parse_document();
  } catch (const ParseError& e) {
    return e.what;
  } catch (const std::exception& e) {
    return std::string("YAML parse failure: ") + e.what();
  }
}

}  // namespace extsvc::kube::detail
