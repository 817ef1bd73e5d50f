#include "rpc/frame.h"

#include <gtest/gtest.h>

#include <string>

#include "rpc/byte_codec.h"

namespace ferry::rpc {
namespace {

std::string HeaderBytes(const FrameHeader& h) {
  std::string bytes(kFrameHeaderSize, '\0');
  EncodeFrameHeader(h, bytes.data());
  return bytes;
}

TEST(FrameTest, HeaderLayoutIsLittleEndianByteForByte) {
  FrameHeader h;
  h.type = 0x0102;
  h.request_id = 0x0807060504030201ull;
  h.flags = kFlagResponse | kFlagError;
  h.payload_len = 0x0a0b0c0d;
  const std::string expected(
      "FRY1"                              // magic 0x31595246, little-endian
      "\x01\x00"                          // version 1
      "\x02\x01"                          // type
      "\x01\x02\x03\x04\x05\x06\x07\x08"  // request_id
      "\x03\x00"                          // flags
      "\x00\x00"                          // reserved
      "\x0d\x0c\x0b\x0a",                 // payload_len
      kFrameHeaderSize);
  EXPECT_EQ(HeaderBytes(h), expected);
}

TEST(FrameTest, HeaderRoundTrips) {
  for (uint16_t flags : {uint16_t{0}, kFlagResponse, uint16_t(kFlagResponse | kFlagError)}) {
    FrameHeader h;
    h.type = 0xffff;
    h.request_id = ~0ull;
    h.flags = flags;
    h.payload_len = 1234;
    Result<FrameHeader> back = DecodeFrameHeader(HeaderBytes(h), 1234);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, h);
  }
}

TEST(FrameTest, EncodeFrameSetsLengthAndAppendsPayload) {
  FrameHeader h;
  h.type = 7;
  h.request_id = 9;
  h.payload_len = 999;  // overwritten from the payload
  Result<std::string> frame = EncodeFrame(h, "hello");
  ASSERT_TRUE(frame.ok());
  ASSERT_EQ(frame->size(), kFrameHeaderSize + 5);
  EXPECT_EQ(frame->substr(kFrameHeaderSize), "hello");
  Result<FrameHeader> back = DecodeFrameHeader(frame->substr(0, kFrameHeaderSize), 100);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->payload_len, 5u);
  EXPECT_EQ(back->type, 7);
  EXPECT_EQ(back->request_id, 9u);
}

// Each corruption of a valid header must be rejected as InvalidArgument.
TEST(FrameTest, RejectsEveryBadHeaderField) {
  FrameHeader h;
  h.type = 1;
  h.payload_len = 16;
  const std::string good = HeaderBytes(h);
  ASSERT_TRUE(DecodeFrameHeader(good, 16).ok());

  auto expect_rejected = [](const std::string& bytes, size_t max, const char* what) {
    Result<FrameHeader> r = DecodeFrameHeader(bytes, max);
    EXPECT_FALSE(r.ok()) << what;
    if (!r.ok()) EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << what;
  };
  std::string bad = good;
  bad[0] = 'X';
  expect_rejected(bad, 16, "magic");
  bad = good;
  StoreLe16(bad.data() + 4, 2);
  expect_rejected(bad, 16, "version 2");
  bad = good;
  StoreLe16(bad.data() + 4, 0);
  expect_rejected(bad, 16, "version 0");
  bad = good;
  StoreLe16(bad.data() + 18, 1);
  expect_rejected(bad, 16, "reserved");
  bad = good;
  StoreLe16(bad.data() + 16, 0x4);
  expect_rejected(bad, 16, "unknown flag");
  bad = good;
  StoreLe16(bad.data() + 16, kFlagError);
  expect_rejected(bad, 16, "error flag on a request");
  expect_rejected(good, 15, "payload_len above the limit");
  bad = good;
  StoreLe32(bad.data() + 20, 0xffffffffu);
  expect_rejected(bad, kDefaultMaxFrameBytes, "4 GiB payload_len");
  expect_rejected(good.substr(0, 23), 16, "short header");
  expect_rejected(good + "x", 16, "long header");
}

TEST(FrameTest, ErrorPayloadRoundTripsEveryCode) {
  for (int c = 1; c <= static_cast<int>(StatusCode::kInternal); ++c) {
    const Status sent(static_cast<StatusCode>(c), "why " + std::to_string(c));
    EXPECT_EQ(DecodeErrorPayload(EncodeErrorPayload(sent)), sent);
  }
  const Status empty_message(StatusCode::kNotFound, "");
  EXPECT_EQ(DecodeErrorPayload(EncodeErrorPayload(empty_message)), empty_message);
}

TEST(FrameTest, ErrorPayloadIsNeverTrustedAsOk) {
  EXPECT_EQ(DecodeErrorPayload("").code(), StatusCode::kInternal);
  EXPECT_EQ(DecodeErrorPayload(std::string(1, '\0') + "ok?").code(), StatusCode::kInternal);
  const Status unknown = DecodeErrorPayload(std::string(1, '\xc8') + "from the future");
  EXPECT_EQ(unknown.code(), StatusCode::kInternal);
  EXPECT_NE(unknown.message().find("from the future"), std::string::npos);
  EXPECT_EQ(DecodeErrorPayload(EncodeErrorPayload(Status::Ok())).code(), StatusCode::kInternal);
}

TEST(FrameTest, ErrorMessageIsCapped) {
  const Status big(StatusCode::kBusy, std::string(kMaxErrorMessageBytes + 100, 'm'));
  const Status back = DecodeErrorPayload(EncodeErrorPayload(big));
  EXPECT_EQ(back.code(), StatusCode::kBusy);
  EXPECT_EQ(back.message().size(), kMaxErrorMessageBytes);
}

TEST(ByteCodecTest, ReaderIsStrict) {
  ByteWriter w;
  w.PutU8(1);
  w.PutU16(0x0203);
  w.PutU32(0x04050607);
  w.PutU64(0x08090a0b0c0d0e0full);
  w.PutString("abc");
  const std::string bytes = w.Take();
  ASSERT_EQ(bytes.size(), 1u + 2 + 4 + 8 + 4 + 3);

  ByteReader r(bytes, "test");
  uint8_t a = 0;
  uint16_t b = 0;
  uint32_t c = 0;
  uint64_t d = 0;
  std::string e;
  ASSERT_TRUE(r.GetU8("a", &a).ok());
  ASSERT_TRUE(r.GetU16("b", &b).ok());
  ASSERT_TRUE(r.GetU32("c", &c).ok());
  ASSERT_TRUE(r.GetU64("d", &d).ok());
  ASSERT_TRUE(r.GetString("e", &e).ok());
  EXPECT_TRUE(r.Finish().ok());
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 0x0203);
  EXPECT_EQ(c, 0x04050607u);
  EXPECT_EQ(d, 0x08090a0b0c0d0e0full);
  EXPECT_EQ(e, "abc");

  // A string whose length runs past the end leaves the output untouched.
  ByteReader short_reader(std::string_view(bytes).substr(15, 6), "test");
  std::string out = "unchanged";
  EXPECT_EQ(short_reader.GetString("e", &out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(out, "unchanged");
}

}  // namespace
}  // namespace ferry::rpc
