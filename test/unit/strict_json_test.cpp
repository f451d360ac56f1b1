#include "core/strict_json.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace extsvc::core {
namespace {

JsonSyntaxError parse_error(std::string_view text, std::size_t depth = 64) {
  try {
    parse_strict_json(text, depth);
  } catch (const JsonSyntaxError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << text;
  return JsonSyntaxError(0, "", "");
}

TEST(StrictJson, ParsesAndKeepsKeyOrder) {
  const auto v =
      parse_strict_json(R"({"z":1,"a":[true,null,"s",1.5,-2,18446744073709551615],"m":{}})");
  EXPECT_EQ(v.dump(), R"({"z":1,"a":[true,null,"s",1.5,-2,18446744073709551615],"m":{}})");
}

TEST(StrictJson, AnyRootValue) {
  EXPECT_EQ(parse_strict_json("[1]").dump(), "[1]");
  EXPECT_EQ(parse_strict_json(" \"x\" ").dump(), "\"x\"");
  EXPECT_EQ(parse_strict_json("null").dump(), "null");
  EXPECT_EQ(parse_strict_json("42\n").dump(), "42");
}

TEST(StrictJson, RefusesInvalidJson) {
  EXPECT_NE(std::string(parse_error("").what()).find("invalid JSON"), std::string::npos);
  parse_error("{");
  parse_error("{\"a\":}");
  parse_error("{'a':1}");
  parse_error("{\"a\":1,}");
  parse_error("[1,]");
  parse_error("tru");
  parse_error("01");
  parse_error("NaN");
  parse_error("/* c */ {}");
  parse_error("{\"a\":\"\x01\"}");  // raw control character in a string
}

TEST(StrictJson, MessageDoesNotEchoInput) {
  const auto e = parse_error(R"({"repoURL": "https://user:s3cret@host/x" oops})");
  EXPECT_EQ(std::string(e.what()).find("s3cret"), std::string::npos) << e.what();
  const auto e2 = parse_error(R"({"a": "s3cret\q"})");
  EXPECT_EQ(std::string(e2.what()).find("s3cret"), std::string::npos) << e2.what();
}

// Found by fuzz_strict_json: a number too large for a double was refused with
// nlohmann's "number overflow parsing '<the whole number>'", quoting input of
// any length.
TEST(StrictJson, NumberOverflowMessageDoesNotEchoInput) {
  const std::string digits = "7" + std::string(400, '3');
  for (const std::string& text : std::vector<std::string>{
           digits, "{\"a\": [" + digits + "]}", "-" + digits, "1e99999", "0." + digits + "e999"}) {
    const auto e = parse_error(text);
    const std::string msg = e.what();
    EXPECT_EQ(msg.find("333"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("999"), std::string::npos) << msg;
    EXPECT_LT(msg.size(), 80u) << msg;
    EXPECT_EQ(msg, "invalid JSON: number overflow");
    EXPECT_LE(e.offset, text.size());
  }
}

TEST(StrictJson, RefusesTrailingData) {
  const auto e = parse_error("{} {}");
  EXPECT_EQ(e.path, "$");
  EXPECT_GE(e.offset, 2u);
  parse_error("{}x");
  parse_error("1 2");
  parse_error("{}\n,");
  EXPECT_NO_THROW(parse_strict_json("{} \n\t\r"));
}

TEST(StrictJson, RefusesDuplicateKeys) {
  auto e = parse_error(R"({"a":1,"a":2})");
  EXPECT_EQ(e.path, "$.a");
  EXPECT_NE(std::string(e.what()).find("$.a"), std::string::npos);
  EXPECT_EQ(e.offset, 9u);  // the closing quote of the second "a"

  e = parse_error(R"({"values":{"x":{"a":1},"a":{"b":1,"b":2}}})");
  EXPECT_EQ(e.path, "$.values.a.b");

  e = parse_error(R"({"l":[{"k":1},{"k":1,"k":2}]})");
  EXPECT_EQ(e.path, "$.l[1].k");

  e = parse_error(R"({"labels":{"app/x":"1","app/x":"2"}})");
  EXPECT_EQ(e.path, R"($.labels["app/x"])");

  // Same key in sibling objects is fine.
  EXPECT_NO_THROW(parse_strict_json(R"({"a":{"k":1},"b":{"k":1}})"));
  // Escapes are compared after decoding: "\u0061" is "a".
  EXPECT_EQ(parse_error(R"({"a":1,"\u0061":2})").path, "$.a");
}

TEST(StrictJson, RefusesInvalidUtf8) {
  auto e = parse_error("{\"a\":\"\xC0\xAF\"}");  // overlong
  EXPECT_EQ(e.offset, 6u);
  EXPECT_NE(std::string(e.what()).find("UTF-8"), std::string::npos);
  parse_error("{\"a\":\"\xED\xA0\x80\"}");  // encoded surrogate
  parse_error("{\"a\":\"\xE2\x82\"}");      // truncated
  parse_error("{\"a\":1}\xFF");             // invalid byte after the value
  parse_error("{\"\xC3\":1}");              // truncated inside a key
  parse_error(R"({"a":"\ud800"})");         // escaped lone surrogate
  parse_error(R"({"a":"\udc00\ud800"})");   // reversed pair
  EXPECT_NO_THROW(parse_strict_json(R"({"a":"\ud83d\ude00","b":"é"})"));
}

TEST(StrictJson, LargeObjectKeepsEveryKeyInOrder) {
  std::string text = "{";
  for (int i = 0; i < 12000; ++i)
    text += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + ",";
  text.back() = '}';
  const auto v = parse_strict_json(text);
  ASSERT_EQ(v.size(), 12000u);
  EXPECT_EQ(v.begin().key(), "k0");
  EXPECT_EQ(v["k11999"], 11999);
  EXPECT_EQ(parse_error(text.substr(0, text.size() - 1) + ",\"k5\":0}").path, "$.k5");
}

TEST(StrictJson, RefusesByteOrderMark) {
  parse_error("\xEF\xBB\xBF{}");
}

TEST(StrictJson, DepthLimit) {
  auto nested = [](int depth) {
    return std::string(static_cast<std::size_t>(depth), '[') +
           std::string(static_cast<std::size_t>(depth), ']');
  };
  EXPECT_NO_THROW(parse_strict_json(nested(64)));
  auto e = parse_error(nested(65));
  EXPECT_NE(std::string(e.what()).find("deeper than 64"), std::string::npos);
  EXPECT_NO_THROW(parse_strict_json(nested(3), 3));
  e = parse_error(R"({"a":{"b":{"c":1}}})", 2);
  EXPECT_EQ(e.path, "$.a.b");
  // Far beyond the limit: refused without exhausting the stack.
  parse_error(nested(100000));
}

}  // namespace
}  // namespace extsvc::core
