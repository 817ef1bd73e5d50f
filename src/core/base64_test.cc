#include "core/base64.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <string_view>

namespace ferry {
namespace {

constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// The decoded bytes of a valid input, or a failed test.
std::string Decoded(std::string_view text) {
  Result<std::string> r = Base64Decode(text);
  EXPECT_TRUE(r.ok()) << "'" << text << "': " << r.status();
  return r.ok() ? *r : std::string();
}

void ExpectBase64Rejected(std::string_view text, std::string_view message_part) {
  Result<std::string> r = Base64Decode(text);
  ASSERT_FALSE(r.ok()) << "accepted '" << text << "'";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(message_part), std::string::npos)
      << "'" << text << "': " << r.status();
}

TEST(Base64Test, Rfc4648Vectors) {
  const std::pair<std::string_view, std::string_view> kVectors[] = {
      {"", ""},
      {"f", "Zg=="},
      {"fo", "Zm8="},
      {"foo", "Zm9v"},
      {"foob", "Zm9vYg=="},
      {"fooba", "Zm9vYmE="},
      {"foobar", "Zm9vYmFy"},
  };
  for (const auto& [plain, encoded] : kVectors) {
    EXPECT_EQ(Base64Encode(plain), encoded);
    EXPECT_EQ(Decoded(encoded), plain);
  }
}

TEST(Base64Test, UsesTheStandardAlphabetForHighBits) {
  EXPECT_EQ(Base64Encode("\xfb\xff\xbf"), "+/+/");
  EXPECT_EQ(Decoded("+/+/"), "\xfb\xff\xbf");
}

TEST(Base64Test, RoundTripsRandomBinary) {
  std::mt19937 rng(20240611);
  std::uniform_int_distribution<int> byte(0, 255);
  for (size_t length = 0; length < 300; ++length) {
    std::string bytes(length, '\0');
    for (char& c : bytes) c = static_cast<char>(byte(rng));
    const std::string text = Base64Encode(bytes);
    EXPECT_EQ(text.size(), (length + 2) / 3 * 4);
    EXPECT_EQ(Decoded(text), bytes) << "length " << length;
  }
}

TEST(Base64Test, RoundTripsEveryByteValue) {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  EXPECT_EQ(Decoded(Base64Encode(all)), all);
}

TEST(Base64Test, RejectsLengthNotAMultipleOfFour) {
  ExpectBase64Rejected("Zg", "multiple of 4");  // padding omitted
  ExpectBase64Rejected("Zg=", "multiple of 4");
  ExpectBase64Rejected("Zm9vY", "multiple of 4");
  ExpectBase64Rejected("=", "multiple of 4");
}

TEST(Base64Test, RejectsBadPadding) {
  ExpectBase64Rejected("Z===", "padding '=' is only allowed at the end at offset 1");
  ExpectBase64Rejected("====", "offset 0");
  ExpectBase64Rejected("=AAA", "offset 0");
  ExpectBase64Rejected("A=AA", "offset 1");
  ExpectBase64Rejected("Zg==Zg==", "offset 2");  // padding in the middle
  ExpectBase64Rejected("Zm8=Zm9v", "offset 3");
}

TEST(Base64Test, RejectsNonCanonicalTrailingBits) {
  ExpectBase64Rejected("Zh==", "non-canonical");  // 'h' has low bits set; canonical is "Zg=="
  ExpectBase64Rejected("Zm9=", "non-canonical");  // canonical is "Zm8="
  // Exhaustively: with two padding characters the low 4 bits of the 2nd character must be zero,
  // with one, the low 2 bits of the 3rd.
  for (size_t v = 0; v < 64; ++v) {
    const std::string one_byte = std::string("A") + kAlphabet[v] + "==";
    const std::string two_bytes = std::string("AA") + kAlphabet[v] + "=";
    EXPECT_EQ(Base64Decode(one_byte).ok(), (v & 0xf) == 0) << one_byte;
    EXPECT_EQ(Base64Decode(two_bytes).ok(), (v & 0x3) == 0) << two_bytes;
  }
}

TEST(Base64Test, RejectsCharactersOutsideTheAlphabet) {
  ExpectBase64Rejected("Zm9v!A==", "invalid character '!' at offset 4");
  ExpectBase64Rejected("Zm-_", "invalid character '-' at offset 2");  // URL-safe alphabet
  ExpectBase64Rejected(std::string_view("Zm\0v", 4), "invalid character 0x00 at offset 2");
  ExpectBase64Rejected("Zm9\x80", "invalid character 0x80 at offset 3");
  // Every byte value in the first position: accepted exactly when in the alphabet.
  for (int c = 0; c < 256; ++c) {
    const std::string text = std::string(1, static_cast<char>(c)) + "AAA";
    EXPECT_EQ(Base64Decode(text).ok(), kAlphabet.find(static_cast<char>(c)) != kAlphabet.npos)
        << "byte " << c;
  }
}

TEST(Base64Test, RejectsWhitespace) {
  ExpectBase64Rejected("Zm9v\n", "multiple of 4");
  ExpectBase64Rejected("Zm9vYmFy\r\n", "multiple of 4");
  ExpectBase64Rejected(" Zm9vYmE", "invalid character 0x20 at offset 0");
  ExpectBase64Rejected("Zm 9vYmE", "invalid character 0x20 at offset 2");
  ExpectBase64Rejected("Zm9v\tYmE", "invalid character 0x09 at offset 4");
  ExpectBase64Rejected("Zm9vYmE\n", "invalid character 0x0a at offset 7");
}

}  // namespace
}  // namespace ferry
