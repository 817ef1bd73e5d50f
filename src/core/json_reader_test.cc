// JsonReader against nlohmann::json, the parser the SegmentDesc codec used before it read
// straight into its structs: both must accept exactly the same texts, give the same strings
// and type the same numbers.
#include "core/json_reader.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {
namespace {

using Json = nlohmann::json;
using Type = JsonReader::Type;

// Reads one whole value through JsonReader the way a decoder does (every container opened and
// walked, every scalar read by type) and rebuilds it as a Json; false when the reader fails.
bool ReadAll(std::string_view text, Json* out, std::string* error) {
  JsonReader reader(text);
  std::vector<Json*> open;  // containers being filled, outermost first
  std::vector<std::string> keys;
  Json root;
  auto place = [&](Json value) -> Json* {
    if (open.empty()) {
      root = std::move(value);
      return &root;
    }
    Json* top = open.back();
    if (top->is_array()) {
      top->push_back(std::move(value));
      return &top->back();
    }
    return &((*top)[keys.back()] = std::move(value));
  };
  while (true) {
    const Type type = reader.Peek();
    if (type == Type::kObject || type == Type::kArray) {
      if (!(type == Type::kObject ? reader.BeginObject() : reader.BeginArray())) break;
      open.push_back(place(type == Type::kObject ? Json::object() : Json::array()));
      keys.emplace_back();
    } else if (type == Type::kString) {
      std::string_view s;
      if (!reader.ReadString(&s)) break;
      place(std::string(s));
    } else if (type == Type::kBoolean) {
      bool b = false;
      if (!reader.ReadBool(&b)) break;
      place(b);
    } else if (type == Type::kNull) {
      if (!reader.ReadNull()) break;
      place(nullptr);
    } else if (type == Type::kUnsigned) {
      uint64_t u = 0;
      if (!reader.ReadUnsigned(&u)) break;
      place(u);
    } else if (type == Type::kSigned || type == Type::kFloat) {
      // Not read by value (the codec never needs one): skipped, and recorded by type.
      if (!reader.SkipValue(1, 1, "", "", "")) break;
      place(type == Type::kSigned ? "<signed>" : "<float>");
    } else {
      break;
    }
    while (!open.empty()) {
      bool more = false;
      if (open.back()->is_object()) {
        std::string_view key;
        if (!reader.NextMember(&more, &key)) break;
        if (more) keys.back() = std::string(key);
      } else if (!reader.NextElement(&more)) {
        break;
      }
      if (more) break;
      open.pop_back();
      keys.pop_back();
    }
    if (reader.failed()) break;
    if (open.empty()) {
      if (reader.ExpectEnd()) *out = std::move(root);
      break;
    }
  }
  *error = reader.error();
  return !reader.failed();
}

// nlohmann's reading of `text` in the same terms: signed and float numbers by type only.
bool NlohmannReads(std::string_view text, Json* out) {
  Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return false;
  std::vector<Json*> todo = {&doc};
  while (!todo.empty()) {
    Json* j = todo.back();
    todo.pop_back();
    if (j->is_number_integer() && !j->is_number_unsigned()) *j = "<signed>";
    if (j->is_number_float()) *j = "<float>";
    if (j->is_structured()) {
      for (auto& child : *j) todo.push_back(&child);
    }
  }
  *out = std::move(doc);
  return true;
}

void ExpectSameAsNlohmann(std::string_view text) {
  SCOPED_TRACE(testing::Message() << "text: '" << text << "'");
  Json ours;
  Json theirs;
  std::string error;
  const bool ok = ReadAll(text, &ours, &error);
  const bool nlohmann_ok = NlohmannReads(text, &theirs);
  ASSERT_EQ(ok, nlohmann_ok) << (ok ? "accepted" : "refused: " + error);
  if (ok) EXPECT_EQ(ours, theirs);
  if (!ok) EXPECT_EQ(error.rfind("invalid JSON: parse error at line ", 0), 0u) << error;
}

TEST(JsonReaderTest, AcceptsAndRefusesWhatNlohmannDoes) {
  const std::vector<std::string> texts = {
      // values, whitespace, nesting
      "0",
      "1",
      "-0",
      "-1",
      "18446744073709551615",
      "18446744073709551616",
      "-9223372036854775808",
      "-9223372036854775809",
      "99999999999999999999999",
      "1.5",
      "1e3",
      "1E+3",
      "1e-3",
      "-1.0e-2",
      "1e999",
      "-1e999",
      "1e-999",
      "01",
      "-",
      "-a",
      "1.",
      ".5",
      "1e",
      "1e+",
      "+1",
      "0x10",
      "NaN",
      "Infinity",
      "true",
      "false",
      "null",
      "tru",
      "nul",
      "truex",
      "[]",
      "{}",
      " \t\r\n[ 1 , 2 ] ",
      "[1,]",
      "[,1]",
      "[1 2]",
      "{\"a\":1,}",
      "{\"a\" 1}",
      "{\"a\":}",
      "{1:2}",
      "{'a':1}",
      "{\"a\":1}{}",
      "[1]]",
      "[[[[]]]]",
      "{\"a\":{\"b\":[{\"c\":null}]}}",
      "{\"a\":1,\"a\":2}",
      "",
      " ",
      "[",
      "{",
      "{\"a\"",
      "\"abc",
      "\"abc\"",
      "/* c */ 1",
      "1 // c",
      "\xef\xbb\xbf[1]",
      "\xef\xbb[1]",
      "\xef[1]",
      "[1]\xef\xbb\xbf",
      // strings: escapes, surrogates, UTF-8, control characters
      R"("\" \\ \/ \b \f \n \r \t")",
      R"("\u0041\u00e9\u4e2d")",
      R"("\u0000")",
      R"("\uD83D\uDE00")",
      R"("\ud83d\ude00")",
      R"("\uD83D")",
      R"("\uDE00")",
      R"("\uD83Dx")",
      R"("\uD83D\u0041")",
      R"("\u12")",
      R"("\u12G4")",
      R"("\x41")",
      R"("\a")",
      "\"a\tb\"",
      "\"a\nb\"",
      std::string("\"a\0b\"", 5),
      "\"\x7f\"",
      "\"caf\xc3\xa9\"",
      "\"\xe4\xb8\xad\"",
      "\"\xf0\x9f\x98\x80\"",
      "\"\xc3\"",
      "\"\xc0\xaf\"",
      "\"\xc1\xbf\"",
      "\"\xe0\x80\xaf\"",
      "\"\xed\xa0\x80\"",
      "\"\xed\x9f\xbf\"",
      "\"\xf4\x90\x80\x80\"",
      "\"\xf4\x8f\xbf\xbf\"",
      "\"\xf5\x80\x80\x80\"",
      "\"\xff\"",
      "\"\x80\"",
      "\"\xe4\xb8\"",
      "\"ab\xe4\xb8\"",
      // keys go through the same string rules
      R"({"\u006eame":1})",
      "{\"k\xff\":1}",
      R"({"a\"b":"c\\d"})",
      // long plain strings (the 8-byte scan) with a special byte at every offset
      "\"0123456789abcdef0123456789abcdef\"",
      "\"0123456789abcdef\\n0123456789\"",
      "\"0123456789abcde\x01\"",
      "\"01234567\xc3\xa9"
      "89abcdef\"",
  };
  for (const std::string& text : texts) ExpectSameAsNlohmann(text);
  // A special byte at each offset of a long string, against the 8-byte scan's boundaries.
  for (size_t at = 0; at < 20; ++at) {
    for (const std::string special : {"\\\"", "\x01", "\xc3\xa9", "\xff", "\\u00e9"}) {
      std::string text = "\"" + std::string(20, 'x') + "\"";
      text.insert(1 + at, special);
      ExpectSameAsNlohmann(text);
    }
  }
}

// The one deliberate difference: nlohmann stops at a NUL byte after the value (its lexer reads
// it as the end of input), so it accepts "[1]\0x"; the reader refuses bytes after the value,
// NUL included, as trailing bytes.
TEST(JsonReaderTest, RefusesANulByteAfterTheValueWhereNlohmannStopsAtIt) {
  const std::string text("[1]\0x", 5);
  Json theirs;
  EXPECT_TRUE(NlohmannReads(text, &theirs));
  Json ours;
  std::string error;
  EXPECT_FALSE(ReadAll(text, &ours, &error));
  EXPECT_EQ(error,
            "invalid JSON: parse error at line 1, column 4: unexpected byte 0x00; "
            "expected end of input");
}

TEST(JsonReaderTest, EmptyTextWithoutDataFailsAndEveryReadAfterAFailureFails) {
  // A default string_view has a null data pointer: no value is there, and it is an error.
  JsonReader empty{std::string_view()};
  EXPECT_EQ(empty.Peek(), Type::kError);
  EXPECT_EQ(empty.error(),
            "invalid JSON: parse error at line 1, column 1: unexpected end of "
            "input; expected a value");
  EXPECT_EQ(empty.Peek(), Type::kError);

  // A failure set by the caller after a Peek: the peeked value is not handed out any more.
  JsonReader reader("[1]");
  EXPECT_EQ(reader.Peek(), Type::kArray);
  EXPECT_FALSE(reader.FailWith("refused by the caller"));
  EXPECT_EQ(reader.Peek(), Type::kError);
  EXPECT_FALSE(reader.BeginArray());
  EXPECT_FALSE(reader.SkipValue(1, 8, "", "", "doc"));
  EXPECT_EQ(reader.error(), "refused by the caller");
}

TEST(JsonReaderTest, ErrorsNameLineAndColumnOfTheOffendingByte) {
  Json ignored;
  std::string error;
  EXPECT_FALSE(ReadAll("{\n  \"a\": [1,\n  x]}", &ignored, &error));
  EXPECT_EQ(error.rfind("invalid JSON: parse error at line 3, column 3: unexpected 'x'", 0), 0u)
      << error;
  EXPECT_FALSE(ReadAll("[1, 2", &ignored, &error));
  EXPECT_NE(error.find("line 1, column 6: unexpected end of input"), std::string::npos) << error;
  EXPECT_FALSE(ReadAll("[1e999]", &ignored, &error));
  EXPECT_NE(error.find("number overflow parsing '1e999'"), std::string::npos) << error;
}

TEST(JsonReaderTest, SkipValueBoundsNestingWithoutRecursing) {
  // 300000 levels: a recursive skip would overflow the stack; this one keeps a vector.
  const std::string deep = std::string(300000, '[') + std::string(300000, ']');
  JsonReader unlimited(deep);
  EXPECT_TRUE(unlimited.SkipValue(1, 1 << 30, "", "", "doc")) << unlimited.error();
  EXPECT_TRUE(unlimited.ExpectEnd());

  JsonReader limited(R"({"a":[{"b":[[1]]}]})");
  EXPECT_FALSE(limited.SkipValue(1, 4, "", "", "doc"));
  EXPECT_EQ(limited.error(), "a[0].b: JSON nesting is deeper than the limit of 4 levels");
  JsonReader at_root(R"([1])");
  EXPECT_FALSE(at_root.SkipValue(1, 0, "", "", "doc"));
  EXPECT_EQ(at_root.error(), "doc: JSON nesting is deeper than the limit of 0 levels");
}

}  // namespace
}  // namespace ferry
