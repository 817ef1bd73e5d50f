#include "common/wire_codec.h"

#include <gtest/gtest.h>

#include <array>
#include <string>

namespace ferry {
namespace {

TEST(WireCodecTest, FixedFieldsAreLittleEndianWhateverTheHost) {
  std::array<unsigned char, 8> b{};
  StoreLe16(b.data(), 0x0102);
  EXPECT_EQ(b[0], 0x02);
  EXPECT_EQ(b[1], 0x01);
  StoreLe32(b.data(), 0x01020304);
  EXPECT_EQ((std::array<unsigned char, 4>{b[0], b[1], b[2], b[3]}),
            (std::array<unsigned char, 4>{4, 3, 2, 1}));
  StoreLe64(b.data(), 0x0102030405060708ull);
  EXPECT_EQ(b[0], 8);
  EXPECT_EQ(b[7], 1);
  EXPECT_EQ(LoadLe64(b.data()), 0x0102030405060708ull);
  EXPECT_EQ(LoadLe32(b.data()), 0x05060708u);
  EXPECT_EQ(LoadLe16(b.data()), 0x0708);
  StoreLe64(b.data(), ~uint64_t{0});
  EXPECT_EQ(LoadLe64(b.data()), ~uint64_t{0});  // high bytes do not sign-extend
}

TEST(WireCodecTest, WriterAppendsAndReaderReadsBack) {
  std::string out = "prefix";
  WireWriter w(&out);
  w.PutU8(0xfe);
  w.PutU16(0xbeef);
  w.PutU32(0xdeadbeef);
  w.PutU64(0x0123456789abcdefull);
  w.PutString("hello");
  w.PutBytes("raw");
  ASSERT_EQ(out.substr(0, 6), "prefix");  // what was there is kept
  EXPECT_EQ(out.size(), 6u + 1 + 2 + 4 + 8 + 4 + 5 + 3);

  WireReader r(std::string_view(out).substr(6), "test");
  uint8_t u8 = 0;
  uint16_t u16 = 0;
  uint32_t u32 = 0;
  uint64_t u64 = 0;
  std::string s;
  std::string_view raw;
  ASSERT_TRUE(r.GetU8("a", &u8).ok());
  ASSERT_TRUE(r.GetU16("b", &u16).ok());
  ASSERT_TRUE(r.GetU32("c", &u32).ok());
  ASSERT_TRUE(r.GetU64("d", &u64).ok());
  ASSERT_TRUE(r.GetString("e", &s).ok());
  EXPECT_FALSE(r.Finish().ok());  // "raw" is left
  ASSERT_TRUE(r.GetBytes("f", 3, &raw).ok());
  EXPECT_TRUE(r.Finish().ok());
  EXPECT_EQ(u8, 0xfe);
  EXPECT_EQ(u16, 0xbeef);
  EXPECT_EQ(u32, 0xdeadbeefu);
  EXPECT_EQ(u64, 0x0123456789abcdefull);
  EXPECT_EQ(s, "hello");
  EXPECT_EQ(raw, "raw");
}

TEST(WireCodecTest, ReaderNeverReadsPastTheEndAndLeavesOutputsAlone) {
  // A buffer whose bytes past the view are readable but must never be read.
  const std::string backing = "\x01\x02\x03\x04\x05\x06\x07\x08\x09";
  for (size_t len = 0; len < 8; ++len) {
    WireReader r(std::string_view(backing).substr(0, len), "short message");
    uint64_t v = 42;
    const Status s = r.GetU64("counter", &v);
    ASSERT_FALSE(s.ok()) << len;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("short message"), std::string::npos) << s;
    EXPECT_NE(s.message().find("counter"), std::string::npos) << s;
    EXPECT_EQ(v, 42u);              // untouched
    EXPECT_EQ(r.remaining(), len);  // the reader did not move
  }
  WireReader r(std::string_view(backing).substr(0, 1), "m");
  uint16_t u16 = 7;
  uint32_t u32 = 7;
  std::string_view bytes = "keep";
  EXPECT_FALSE(r.GetU16("x", &u16).ok());
  EXPECT_FALSE(r.GetU32("x", &u32).ok());
  EXPECT_FALSE(r.GetBytes("x", 2, &bytes).ok());
  EXPECT_EQ(u16, 7);
  EXPECT_EQ(u32, 7u);
  EXPECT_EQ(bytes, "keep");
  uint8_t u8 = 0;
  EXPECT_TRUE(r.GetU8("x", &u8).ok());
  EXPECT_FALSE(r.GetU8("x", &u8).ok());
}

TEST(WireCodecTest, StringLengthsAreBoundedBeforeAnythingIsCopied) {
  // A length far beyond the bytes present is refused, not allocated.
  std::string out;
  WireWriter w(&out);
  w.PutU32(0xffffffffu);
  w.PutBytes("abc");
  std::string s = "untouched";
  WireReader r(out, "frame");
  Status st = r.GetString("name", &s);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(s, "untouched");

  out.clear();
  w.PutString("too long");
  WireReader limited(out, "frame");
  st = limited.GetString("name", &s, 4);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("limit"), std::string::npos) << st;
  EXPECT_EQ(s, "untouched");
  WireReader fits(out, "frame");
  EXPECT_TRUE(fits.GetString("name", &s, 8).ok());
  EXPECT_EQ(s, "too long");
}

TEST(WireCodecTest, TakeRestTakesEverythingLeft) {
  WireReader r(std::string_view("\x05tail", 5), "m");
  uint8_t u8 = 0;
  ASSERT_TRUE(r.GetU8("n", &u8).ok());
  EXPECT_EQ(r.TakeRest(), "tail");
  EXPECT_EQ(r.TakeRest(), "");
  EXPECT_TRUE(r.Finish().ok());
}

}  // namespace
}  // namespace ferry
