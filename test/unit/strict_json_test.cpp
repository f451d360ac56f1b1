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
    EXPECT_EQ(msg, "invalid JSON: number out of range");
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

// ---------------------------------------------------------------- issue #10

JsonSyntaxError parse_error_with(std::string_view text, const StrictJsonOptions& o) {
  try {
    parse_strict_json(text, o);
  } catch (const JsonSyntaxError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << text.substr(0, 200);
  return JsonSyntaxError(0, "", "");
}

StrictJsonOptions exact() {
  StrictJsonOptions o;
  o.exact_numbers = true;
  o.refuse_nul = true;
  return o;
}

TEST(StrictJson, SameJsonNumber) {
  EXPECT_TRUE(same_json_number("1e2", "100.0"));
  EXPECT_TRUE(same_json_number("0.10", "0.1"));
  EXPECT_TRUE(same_json_number("1.5e300", "1.5e+300"));
  EXPECT_TRUE(same_json_number("-0.0", "0"));
  EXPECT_TRUE(same_json_number("0e999999999999999999999", "0.0"));
  EXPECT_TRUE(same_json_number("0.000125", "1.25e-04"));
  EXPECT_FALSE(same_json_number("123456789012345678901234567890", "1.2345678901234568e+29"));
  EXPECT_FALSE(same_json_number("1e-400", "0.0"));
  EXPECT_FALSE(same_json_number("-1", "1"));
  EXPECT_FALSE(same_json_number("1e999999999999999999999", "1e+308"));
}

TEST(StrictJson, ExactNumbersKeepTheirValue) {
  const char* text =
      R"({"a":0.1,"b":18446744073709551615,"c":-9223372036854775808,"d":1.5e300,"e":2.5,)"
      R"("f":1e2,"g":-0,"h":5e-324,"i":1.7976931348623157e308})";
  const auto v = parse_strict_json(text, exact());
  EXPECT_EQ(v.dump(),
            R"({"a":0.1,"b":18446744073709551615,"c":-9223372036854775808,"d":1.5e+300,"e":2.5,)"
            R"("f":100.0,"g":0,"h":5e-324,"i":1.7976931348623157e+308})");
  // Without the option the historical behaviour stays: rounded silently.
  EXPECT_EQ(parse_strict_json("[123456789012345678901234567890]").dump(),
            "[1.2345678901234568e+29]");
}

TEST(StrictJson, ExactNumbersRefuseRounding) {
  using K = JsonSyntaxError::Kind;
  auto e = parse_error_with(R"({"v":{"n":123456789012345678901234567890}})", exact());
  EXPECT_EQ(e.kind, K::kInexactNumber);
  EXPECT_EQ(e.path, "$.v.n");
  e = parse_error_with(R"({"v":[1,1e-400]})", exact());
  EXPECT_EQ(e.kind, K::kInexactNumber);
  EXPECT_EQ(e.path, "$.v[1]");
  e = parse_error_with(R"({"v":0.30000000000000000001})", exact());
  EXPECT_EQ(e.kind, K::kInexactNumber);
  e = parse_error_with(R"({"v":1e400})", exact());  // overflows a double
  EXPECT_EQ(e.kind, K::kInexactNumber);
  EXPECT_EQ(e.path, "$.v");
}

TEST(StrictJson, HugeNumbersAreNotEchoed) {
  const std::string digits(120000, '7');
  for (const bool exact_numbers : {false, true}) {
    StrictJsonOptions o;
    o.exact_numbers = exact_numbers;
    std::vector<std::string> texts = {"[" + digits + "]", "[" + digits + "x]",
                                      "[-" + digits + "e5]"};
    // Merely rounded (not out of range): an error only when exact numbers are asked for.
    if (exact_numbers) texts.push_back("[0." + digits + "]");
    for (const std::string& text : texts) {
      const auto e = parse_error_with(text, o);
      const std::string what = e.what();
      EXPECT_LT(what.size(), 200u) << what.substr(0, 300);
      EXPECT_EQ(what.find("7777777777"), std::string::npos) << what.substr(0, 300);
    }
  }
}

TEST(StrictJson, RefusesNulWhenAsked) {
  using K = JsonSyntaxError::Kind;
  EXPECT_EQ(parse_strict_json(R"(["a\u0000b"])").at(0).get<std::string>().size(), 3u);
  auto e = parse_error_with(R"({"v":{"s":"a\u0000b"}})", exact());
  EXPECT_EQ(e.kind, K::kNulCharacter);
  EXPECT_EQ(e.path, "$.v.s");
  e = parse_error_with(R"({"v":["x","\u0000"]})", exact());
  EXPECT_EQ(e.path, "$.v[1]");
  e = parse_error_with(R"({"v":{"k\u0000":1}})", exact());
  EXPECT_EQ(e.kind, K::kNulCharacter);
  EXPECT_EQ(e.path, R"($.v["k\u0000"])");
}

TEST(StrictJson, LongKeysAreShortenedInPaths) {
  const std::string key(5000, 'k');
  const auto e = parse_error("{\"" + key + "\":1,\"" + key + "\":2}");
  EXPECT_EQ(e.path, "$[\"" + std::string(64, 'k') + "\"...]");
  EXPECT_LT(std::string(e.what()).size(), 200u);
}

}  // namespace
}  // namespace extsvc::core
