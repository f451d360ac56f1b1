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

JsonSyntaxError::JsonSyntaxError(std::size_t off, std::string p, const std::string& message)
    : std::runtime_error(message), offset(off), path(std::move(p)) {}

namespace {

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
// the "last read: '...'" excerpt, which would echo tenant input.
std::string short_syntax_message(const std::string& what) {
  std::string msg = what;
  if (auto at = msg.find("syntax error"); at != std::string::npos) msg = msg.substr(at);
  if (auto at = msg.find("; last read"); at != std::string::npos) msg.resize(at);
  // Other exceptions (e.g. 406 "number overflow parsing '<digits>'") quote the
  // input too: keep only the words before the quote, without the id prefix.
  if (auto at = msg.find(" parsing '"); at != std::string::npos) msg.resize(at);
  if (msg.starts_with("[json.exception.")) {
    if (auto at = msg.find("] "); at != std::string::npos) msg.erase(0, at + 2);
  }
  return "invalid JSON: " + msg;
}

class StrictBuilder {
 public:
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  StrictBuilder(std::size_t max_depth, const std::size_t* read)
      : max_depth_(max_depth), read_(read) {}

  bool null() { return put(nullptr); }
  bool boolean(bool v) { return put(v); }
  bool number_integer(number_integer_t v) { return put(v); }
  bool number_unsigned(number_unsigned_t v) { return put(v); }
  bool number_float(number_float_t v, const string_t& /*raw*/) { return put(v); }
  bool string(string_t& v) { return put(std::move(v)); }
  bool binary(binary_t& /*v*/) { return fail(*read_, "$", "invalid JSON: binary values"); }

  bool start_object(std::size_t /*size*/) { return open(Json::object()); }
  bool start_array(std::size_t /*size*/) { return open(Json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(string_t& k) {
    Frame& f = frames_.back();
    f.key_path = json_path_member(f.path, k);
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
    return fail(position > 0 ? position - 1 : 0, "$", short_syntax_message(ex.what()));
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

  bool fail(std::size_t offset, std::string path, const std::string& message) {
    if (!error_) error_.emplace(offset, std::move(path), message);
    return false;
  }

  std::size_t max_depth_;
  const std::size_t* read_;
  Json root_;
  Json* pending_ = nullptr;
  std::vector<Frame> frames_;
  std::optional<JsonSyntaxError> error_;
};

}  // namespace

Json parse_strict_json(std::string_view text, std::size_t max_depth) {
  // nlohmann checks UTF-8 only inside strings; check every byte so the error
  // is uniform and points at the first bad byte.
  if (auto bad = first_invalid_utf8(text))
    throw JsonSyntaxError(*bad, "$", "invalid UTF-8 at byte " + std::to_string(*bad));
  // nlohmann skips a byte order mark silently; RFC 8259 forbids sending one.
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF")
    throw JsonSyntaxError(0, "$", "invalid JSON: byte order mark not allowed");

  std::size_t read = 0;
  StrictBuilder builder(max_depth, &read);
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
