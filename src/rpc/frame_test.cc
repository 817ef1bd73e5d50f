#include "rpc/frame.h"

#include <gtest/gtest.h>

#include <string>

#include "common/crc32c.h"
#include "common/wire_codec.h"

namespace ferry::rpc {
namespace {

std::string HeaderBytes(const FrameHeader& h) {
  std::string bytes(kFrameHeaderSize, '\0');
  EncodeFrameHeader(h, bytes.data());
  return bytes;
}

// Recomputes the header checksum of an edited header, so that the field checks behind it run.
std::string Resealed(std::string bytes) {
  StoreLe32(bytes.data() + 28, Crc32c(bytes.data(), 28));
  return bytes;
}

TEST(FrameTest, HeaderLayoutIsLittleEndianByteForByte) {
  FrameHeader h;
  h.type = 0x0102;
  h.request_id = 0x0807060504030201ull;
  h.flags = kFlagResponse | kFlagError;
  h.payload_len = 0x0a0b0c0d;
  h.payload_crc = 0x11223344;
  std::string expected(
      "FRY1"                              // magic 0x31595246, little-endian
      "\x02\x00"                          // version 2
      "\x02\x01"                          // type
      "\x01\x02\x03\x04\x05\x06\x07\x08"  // request_id
      "\x03\x00"                          // flags
      "\x00\x00"                          // reserved
      "\x0d\x0c\x0b\x0a"                  // payload_len
      "\x44\x33\x22\x11",                 // payload_crc
      28);
  const uint32_t header_crc = Crc32c(expected);  // of bytes 0..27
  expected.append(
      {static_cast<char>(header_crc & 0xff), static_cast<char>((header_crc >> 8) & 0xff),
       static_cast<char>((header_crc >> 16) & 0xff), static_cast<char>(header_crc >> 24)});
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
  EXPECT_EQ(back->payload_crc, Crc32c("hello"));
  EXPECT_EQ(back->type, 7);
  EXPECT_EQ(back->request_id, 9u);
  EXPECT_TRUE(VerifyFramePayload(*back, "hello").ok());
}

// Corruption in transit: any one flipped bit of a header, or any flipped payload byte, is
// caught, and the error names the checksum.
TEST(FrameTest, EveryFlippedHeaderBitIsRejectedAsAChecksumMismatch) {
  FrameHeader h;
  h.type = 3;
  h.request_id = 77;
  h.flags = kFlagResponse;
  Result<std::string> frame = EncodeFrame(h, "payload");
  ASSERT_TRUE(frame.ok());
  const std::string header = frame->substr(0, kFrameHeaderSize);
  ASSERT_TRUE(DecodeFrameHeader(header, 100).ok());
  for (size_t byte = 4; byte < kFrameHeaderSize; ++byte) {  // 0..3: the magic, checked first
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = header;
      bad[byte] = static_cast<char>(bad[byte] ^ (1 << bit));
      Result<FrameHeader> r = DecodeFrameHeader(bad, 100);
      ASSERT_FALSE(r.ok()) << byte << ":" << bit;
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(r.status().message().find("checksum mismatch"), std::string::npos) << r.status();
    }
  }
  std::string bad_magic = header;
  bad_magic[1] = static_cast<char>(bad_magic[1] ^ 0x10);
  EXPECT_FALSE(DecodeFrameHeader(bad_magic, 100).ok());
}

TEST(FrameTest, AFlippedPayloadByteFailsTheChecksum) {
  FrameHeader h;
  h.type = 3;
  Result<std::string> frame = EncodeFrame(h, std::string(1000, 'p'));
  ASSERT_TRUE(frame.ok());
  Result<FrameHeader> back = DecodeFrameHeader(frame->substr(0, kFrameHeaderSize), 1000);
  ASSERT_TRUE(back.ok());
  std::string payload = frame->substr(kFrameHeaderSize);
  ASSERT_TRUE(VerifyFramePayload(*back, payload).ok());
  for (size_t at : {size_t{0}, size_t{500}, size_t{999}}) {
    std::string bad = payload;
    bad[at] = static_cast<char>(bad[at] ^ 0x01);
    const Status s = VerifyFramePayload(*back, bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << at;
    EXPECT_NE(s.message().find("payload checksum mismatch"), std::string::npos) << s;
  }
  EXPECT_FALSE(VerifyFramePayload(*back, payload.substr(1)).ok());  // a lost byte, too
}

TEST(FrameTest, PrefixRefusesAnotherVersionBeforeAWholeHeader) {
  FrameHeader h;
  const std::string good = HeaderBytes(h);
  EXPECT_TRUE(FramePrefixError(good.substr(0, 3)).ok());  // too little to judge yet
  EXPECT_TRUE(FramePrefixError(good.substr(0, kFramePrefixSize)).ok());
  EXPECT_TRUE(FramePrefixError(good).ok());
  std::string v1 = good;
  StoreLe16(v1.data() + 4, 1);
  const Status old = FramePrefixError(v1.substr(0, kFramePrefixSize));
  EXPECT_EQ(old.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(old.message().find("version 1"), std::string::npos) << old;
  EXPECT_FALSE(FramePrefixError("GGGG").ok());
}

TEST(FrameTest, ClosingNoticeCarriesItsReason) {
  const std::string notice = EncodeClosingNotice(InvalidArgumentError("checksum mismatch"));
  Result<FrameHeader> h = DecodeFrameHeader(notice.substr(0, kFrameHeaderSize), 1 << 20);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_TRUE(h->is_notice());
  EXPECT_TRUE(h->is_response());
  const std::string payload = notice.substr(kFrameHeaderSize);
  EXPECT_TRUE(VerifyFramePayload(*h, payload).ok());
  EXPECT_EQ(DecodeErrorPayload(payload), InvalidArgumentError("checksum mismatch"));
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
  // Each edit is resealed (its checksum recomputed), so the check of the field itself runs.
  std::string bad = good;
  bad[0] = 'X';
  expect_rejected(Resealed(bad), 16, "magic");
  bad = good;
  StoreLe16(bad.data() + 4, 1);
  expect_rejected(Resealed(bad), 16, "version 1");
  bad = good;
  StoreLe16(bad.data() + 4, 3);
  expect_rejected(Resealed(bad), 16, "version 3");
  bad = good;
  StoreLe16(bad.data() + 18, 1);
  expect_rejected(Resealed(bad), 16, "reserved");
  bad = good;
  StoreLe16(bad.data() + 16, 0x4);
  expect_rejected(Resealed(bad), 16, "unknown flag");
  bad = good;
  StoreLe16(bad.data() + 16, kFlagError);
  expect_rejected(Resealed(bad), 16, "error flag on a request");
  expect_rejected(good, 15, "payload_len above the limit");
  bad = good;
  StoreLe32(bad.data() + 20, 0xffffffffu);
  expect_rejected(Resealed(bad), kDefaultMaxFrameBytes, "4 GiB payload_len");
  bad = good;
  StoreLe32(bad.data() + 28, LoadLe32(bad.data() + 28) + 1);
  expect_rejected(bad, 16, "header checksum");
  expect_rejected(good.substr(0, kFrameHeaderSize - 1), 16, "short header");
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

}  // namespace
}  // namespace ferry::rpc
