#include "core/strict_json.hpp"

#include <algorithm>
#include <iterator>
#include <optional>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/json_path.hpp"
#include "core/utf8.hpp"

namespace extsvc::core {

JsonSyntaxError::JsonSyntaxError(std::size_t off, std::string p, const std::string& message, Kind k)
    : std::runtime_error(message), offset(off), path(std::move(p)), kind(k) {}

namespace {

// A JSON number as sign, significant digits (no leading or trailing zeros)
// and a decimal exponent: value = digits * 10^exponent. Zero has no digits.
struct Decimal {
  bool negative = false;
  std::string digits;
  long long exponent = 0;
  bool operator==(const Decimal&) const = default;
};

Decimal to_decimal(std::string_view s) {
  // Exponents this large are far outside double's range; saturating keeps the
  // comparison correct and the arithmetic free of overflow.
  constexpr long long kExpLimit = 1'000'000'000'000LL;
  Decimal d;
  std::size_t i = 0;
  if (i < s.size() && s[i] == '-') {
    d.negative = true;
    ++i;
  }
  long long frac_digits = 0;
  bool in_frac = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '.') {
      in_frac = true;
      continue;
    }
    if (c < '0' || c > '9') break;
    if (!(d.digits.empty() && c == '0')) d.digits += c;  // drop leading zeros
    if (in_frac) ++frac_digits;
  }
  long long exp = 0;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    bool neg = false;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i)
      exp = std::min(kExpLimit, exp * 10 + (s[i] - '0'));
    if (neg) exp = -exp;
  }
  std::size_t trailing = 0;
  while (trailing < d.digits.size() && d.digits[d.digits.size() - 1 - trailing] == '0') ++trailing;
  d.digits.resize(d.digits.size() - trailing);
  if (d.digits.empty()) return Decimal{};  // zero, whatever its sign
  d.exponent = exp - frac_digits + static_cast<long long>(trailing);
  return d;
}

using Json = nlohmann::ordered_json;

// nlohmann's SAX interface reports no position for keys; an input iterator
// that remembers how far the lexer has read gives duplicate keys an offset.
class CountingIterator {
 public:
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  CountingIterator() = default;
  CountingIterator(const char* p, const char* base, std::size_t* high)
      : p_(p), base_(base), high_(high) {}

  reference operator*() const {
    *high_ = std::max(*high_, static_cast<std::size_t>(p_ - base_) + 1);
    return *p_;
  }
  CountingIterator& operator++() {
    ++p_;
    return *this;
  }
  CountingIterator operator++(int) {
    CountingIterator old = *this;
    ++p_;
    return old;
  }
  bool operator==(const CountingIterator& o) const { return p_ == o.p_; }
  bool operator!=(const CountingIterator& o) const { return p_ != o.p_; }

 private:
  const char* p_ = nullptr;
  const char* base_ = nullptr;
  std::size_t* high_ = nullptr;
};

// Keeps the "syntax error ... - reason" part of nlohmann's message and drops
// the "last read: '...'" excerpt, which would echo tenant input. Other
// nlohmann messages (e.g. "number overflow parsing '<the whole number>'")
// quote the token, so only a fixed text is kept for them.
std::string short_syntax_message(const std::string& what) {
  std::string msg = what;
  const auto at = msg.find("syntax error");
  if (at == std::string::npos) return "invalid JSON";
  msg = msg.substr(at);
  if (auto last = msg.find("; last read"); last != std::string::npos) msg.resize(last);
  // Defensive: a reason never needs more than a short line.
  if (msg.size() > 160) msg.resize(160);
  return "invalid JSON: " + msg;
}

constexpr const char* kInexactMessage =
    "number cannot be kept exactly (it does not fit a 64-bit integer or round-trip through a "
    "double)";

class StrictBuilder {
 public:
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  StrictBuilder(const StrictJsonOptions& options, const std::size_t* read)
      : max_depth_(options.max_depth), options_(options), read_(read) {}

  bool null() { return put(nullptr); }
  bool boolean(bool v) { return put(v); }
  // nlohmann reports integers exactly; only "-0" loses its sign, which does
  // not change the value.
  bool number_integer(number_integer_t v) { return put(v); }
  bool number_unsigned(number_unsigned_t v) { return put(v); }
  bool number_float(number_float_t v, const string_t& raw) {
    if (options_.exact_numbers && !same_json_number(raw, Json(v).dump()))
      return fail(at(), child_path(), kInexactMessage, JsonSyntaxError::Kind::kInexactNumber);
    return put(v);
  }
  bool string(string_t& v) {
    if (options_.refuse_nul && v.find('\0') != std::string::npos)
      return fail(at(), child_path(), "string contains the character U+0000",
                  JsonSyntaxError::Kind::kNulCharacter);
    return put(std::move(v));
  }
  bool binary(binary_t& /*v*/) { return fail(*read_, "$", "invalid JSON: binary values"); }

  bool start_object(std::size_t /*size*/) { return open(Json::object()); }
  bool start_array(std::size_t /*size*/) { return open(Json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(string_t& k) {
    Frame& f = frames_.back();
    f.key_path = json_path_member(f.path, k);
    if (options_.refuse_nul && k.find('\0') != std::string::npos)
      return fail(at(), f.key_path, "object key contains the character U+0000",
                  JsonSyntaxError::Kind::kNulCharacter);
    if (!f.keys.insert(k).second) {
      const std::size_t at = *read_ > 0 ? *read_ - 1 : 0;
      return fail(at, f.key_path, "duplicate key at " + f.key_path);
    }
    // ordered_json's operator[] searches linearly, which is quadratic over a
    // large object; uniqueness is already known, so append directly.
    auto& members = *f.value->get_ptr<Json::object_t*>();
    members.Container::emplace_back(k, nullptr);
    pending_ = &members.back().second;
    return true;
  }

  bool parse_error(std::size_t position, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& ex) {
    const std::size_t offset = position > 0 ? position - 1 : 0;
    // 406: a number too large for a double (1e400, or thousands of digits).
    if (ex.id == 406) {
      if (options_.exact_numbers)
        return fail(offset, child_path(), kInexactMessage, JsonSyntaxError::Kind::kInexactNumber);
      return fail(offset, "$", "invalid JSON: number out of range");
    }
    return fail(offset, "$", short_syntax_message(ex.what()));
  }

  Json take() { return std::move(root_); }
  const std::optional<JsonSyntaxError>& error() const { return error_; }

 private:
  struct Frame {
    Json* value;
    std::string path;
    std::string key_path;                  // path of the member being parsed
    std::unordered_set<std::string> keys;  // O(1) duplicate check per object
    std::size_t count = 0;                 // next array index
  };

  std::string child_path() const {
    if (frames_.empty()) return "$";
    const Frame& f = frames_.back();
    return f.value->is_array() ? json_path_index(f.path, f.count) : f.key_path;
  }

  template <class V>
  Json* place(V&& v) {
    if (frames_.empty()) {
      root_ = Json(std::forward<V>(v));
      return &root_;
    }
    Frame& f = frames_.back();
    if (f.value->is_array()) {
      f.value->push_back(Json(std::forward<V>(v)));
      ++f.count;
      return &f.value->back();
    }
    *pending_ = Json(std::forward<V>(v));
    return pending_;
  }

  template <class V>
  bool put(V&& v) {
    place(std::forward<V>(v));
    return true;
  }

  bool open(Json empty) {
    std::string path = child_path();
    if (frames_.size() + 1 > max_depth_) {
      const std::size_t at = *read_ > 0 ? *read_ - 1 : 0;
      return fail(at, path,
                  "nesting deeper than " + std::to_string(max_depth_) + " levels at " + path);
    }
    // Containers are only ever appended to the innermost open container, so
    // this pointer stays valid until the container is closed.
    Json* slot = place(std::move(empty));
    frames_.push_back(Frame{slot, std::move(path), {}, {}, 0});
    return true;
  }

  bool close() {
    frames_.pop_back();
    return true;
  }

  bool fail(std::size_t offset, std::string path, const std::string& message,
            JsonSyntaxError::Kind kind = JsonSyntaxError::Kind::kSyntax) {
    if (!error_) error_.emplace(offset, std::move(path), message, kind);
    return false;
  }

  std::size_t at() const { return *read_ > 0 ? *read_ - 1 : 0; }

  std::size_t max_depth_;
  StrictJsonOptions options_;
  const std::size_t* read_;
  Json root_;
  Json* pending_ = nullptr;
  std::vector<Frame> frames_;
  std::optional<JsonSyntaxError> error_;
};

}  // namespace

bool same_json_number(std::string_view raw, std::string_view shortest) {
  return to_decimal(raw) == to_decimal(shortest);
}

Json parse_strict_json(std::string_view text, std::size_t max_depth) {
  StrictJsonOptions options;
  options.max_depth = max_depth;
  return parse_strict_json(text, options);
}

Json parse_strict_json(std::string_view text, const StrictJsonOptions& options) {
  // nlohmann checks UTF-8 only inside strings; check every byte so the error
  // is uniform and points at the first bad byte.
  if (auto bad = first_invalid_utf8(text))
    throw JsonSyntaxError(*bad, "$", "invalid UTF-8 at byte " + std::to_string(*bad));
  // nlohmann skips a byte order mark silently; RFC 8259 forbids sending one.
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF")
    throw JsonSyntaxError(0, "$", "invalid JSON: byte order mark not allowed");

  std::size_t read = 0;
  StrictBuilder builder(options, &read);
  const char* begin = text.data();
  const char* end = begin + text.size();
  const bool ok =
      Json::sax_parse(CountingIterator(begin, begin, &read), CountingIterator(end, begin, &read),
                      &builder, nlohmann::json::input_format_t::json, /*strict=*/true);
  if (builder.error()) throw *builder.error();
  if (!ok) throw JsonSyntaxError(read, "$", "invalid JSON");
  return builder.take();
}

}  // namespace extsvc::core
