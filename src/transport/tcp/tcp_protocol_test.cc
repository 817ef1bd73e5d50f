#include "transport/tcp/tcp_protocol.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <string>

#include "common/crc32c.h"
#include "common/wire_codec.h"

namespace ferry::tcp {
namespace {

// Recomputes the header checksum (the last 4 bytes) of an edited frame, so that the field
// checks behind it run.
template <size_t N>
void Reseal(std::array<uint8_t, N>& b) {
  StoreLe32(b.data() + N - 4, Crc32c(b.data(), N - 4));
}

RequestHeader SampleRequest() {
  RequestHeader h;
  h.op = WireOp::kRead;
  h.request_id = 0x0102030405060708;
  h.remote_addr = 0x7fff00001234;
  h.length = 4095;
  h.incarnation = 0xdeadbeefcafef00d;
  h.generation = 42;
  h.deadline = 0x1122334455667788;
  return h;
}

TEST(TcpProtocolTest, RequestRoundTripsLittleEndian) {
  std::array<uint8_t, kRequestHeaderSize> bytes{};
  EncodeRequestHeader(SampleRequest(), bytes);
  EXPECT_EQ(bytes[0], 'F');
  EXPECT_EQ(bytes[3], 'Q');
  EXPECT_EQ(bytes[8], 0x08);  // request id, least significant byte first
  RequestHeader out;
  ASSERT_TRUE(DecodeRequestHeader(bytes, &out).ok());
  EXPECT_EQ(out.op, WireOp::kRead);
  EXPECT_EQ(out.request_id, SampleRequest().request_id);
  EXPECT_EQ(out.remote_addr, SampleRequest().remote_addr);
  EXPECT_EQ(out.length, 4095u);
  EXPECT_EQ(out.incarnation, SampleRequest().incarnation);
  EXPECT_EQ(out.generation, 42u);
  EXPECT_EQ(out.deadline, SampleRequest().deadline);
  EXPECT_EQ(bytes[48], 0x88);  // the deadline, least significant byte first
  EXPECT_EQ(bytes[55], 0x11);
  EXPECT_EQ(bytes[4], 3);                      // version 3
  EXPECT_EQ(bytes[6], kFlagPayloadChecksum);   // flags
  EXPECT_EQ(LoadLe32(bytes.data() + 56), 0u);  // no payload checksum on a READ
  EXPECT_EQ(LoadLe32(bytes.data() + 60), Crc32c(bytes.data(), 60));
  EXPECT_TRUE(out.payload_checksum);
}

TEST(TcpProtocolTest, WritePayloadChecksumAndFlagRoundTrip) {
  RequestHeader h = SampleRequest();
  h.op = WireOp::kWrite;
  h.payload_crc = 0xa1b2c3d4;
  std::array<uint8_t, kRequestHeaderSize> bytes{};
  EncodeRequestHeader(h, bytes);
  RequestHeader out;
  ASSERT_TRUE(DecodeRequestHeader(bytes, &out).ok());
  EXPECT_EQ(out.payload_crc, 0xa1b2c3d4u);
  EXPECT_EQ(bytes[56], 0xd4);
  h.payload_checksum = false;  // unchecked payloads carry no checksum
  h.payload_crc = 0;
  EncodeRequestHeader(h, bytes);
  ASSERT_TRUE(DecodeRequestHeader(bytes, &out).ok());
  EXPECT_FALSE(out.payload_checksum);
  EXPECT_EQ(bytes[6], 0);
  StoreLe32(bytes.data() + 56, 1);  // ... and one that does is a bad frame
  Reseal(bytes);
  EXPECT_EQ(DecodeRequestHeader(bytes, &out).code(), StatusCode::kInvalidArgument);
}

// Corruption in transit: one flipped bit anywhere in a header (past its magic) is caught by the
// header checksum before any field is believed, and the error names it.
TEST(TcpProtocolTest, EveryFlippedHeaderBitIsAChecksumMismatch) {
  auto expect_caught = [](const Status& s, size_t byte, int bit) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << byte << ":" << bit;
    EXPECT_NE(s.message().find("header checksum mismatch"), std::string::npos) << s;
  };
  std::array<uint8_t, kRequestHeaderSize> request{};
  RequestHeader w = SampleRequest();
  w.op = WireOp::kWrite;
  w.payload_crc = 0x12345678;
  EncodeRequestHeader(w, request);
  ResponseHeader r;
  r.request_id = 5;
  r.payload_length = 4096;
  r.body_crc = 0x9abcdef0;
  std::array<uint8_t, kResponseHeaderSize> response{};
  EncodeResponseHeader(r, response);
  std::array<uint8_t, kHelloSize> hello{};
  EncodeHello(kHelloReplyMagic, 123456789, hello);
  for (int bit = 0; bit < 8; ++bit) {
    for (size_t byte = 4; byte < kRequestHeaderSize; ++byte) {
      auto b = request;
      b[byte] ^= static_cast<uint8_t>(1 << bit);
      RequestHeader out;
      expect_caught(DecodeRequestHeader(b, &out), byte, bit);
    }
    for (size_t byte = 4; byte < kResponseHeaderSize; ++byte) {
      auto b = response;
      b[byte] ^= static_cast<uint8_t>(1 << bit);
      ResponseHeader out;
      expect_caught(DecodeResponseHeader(b, &out), byte, bit);
    }
    for (size_t byte = 4; byte < kHelloSize; ++byte) {
      auto b = hello;
      b[byte] ^= static_cast<uint8_t>(1 << bit);
      uint64_t clock = 0;
      expect_caught(DecodeHello(b, kHelloReplyMagic, &clock), byte, bit);
    }
  }
}

TEST(TcpProtocolTest, ChecksumMismatchNamesWhatAndBothValues) {
  const std::string m = ChecksumMismatch("payload of WRITE request 7", 0xdeadbeef, 0x1);
  EXPECT_NE(m.find("payload of WRITE request 7 checksum mismatch"), std::string::npos) << m;
  EXPECT_NE(m.find("0xdeadbeef"), std::string::npos) << m;
  EXPECT_NE(m.find("0x00000001"), std::string::npos) << m;
  EXPECT_NE(m.find("corrupted in transit"), std::string::npos) << m;
}

TEST(TcpProtocolTest, ClosingNoticeMustCarryAnError) {
  ResponseHeader notice;
  notice.request_id = kNoticeRequestId;
  notice.code = StatusCode::kUnavailable;
  notice.message_length = 10;
  std::array<uint8_t, kResponseHeaderSize> bytes{};
  EncodeResponseHeader(notice, bytes);
  ResponseHeader out;
  ASSERT_TRUE(DecodeResponseHeader(bytes, &out).ok());
  EXPECT_TRUE(out.is_notice());
  EXPECT_EQ(out.code, StatusCode::kUnavailable);
  notice.code = StatusCode::kOk;
  EncodeResponseHeader(notice, bytes);
  EXPECT_EQ(DecodeResponseHeader(bytes, &out).code(), StatusCode::kInvalidArgument);
}

TEST(TcpProtocolTest, FramePrefixJudgesMagicAndVersionEarly) {
  std::array<uint8_t, kHelloSize> hello{};
  EncodeHello(kHelloMagic, 1, hello);
  auto prefix = [&](size_t n) { return std::span<const uint8_t>(hello.data(), n); };
  EXPECT_TRUE(FramePrefixError(prefix(3), kRequestMagic, kHelloMagic).ok());
  EXPECT_TRUE(FramePrefixError(prefix(kFramePrefixSize), kRequestMagic, kHelloMagic).ok());
  EXPECT_FALSE(FramePrefixError(prefix(4), kResponseMagic, kHelloReplyMagic).ok());
  hello[4] = 2;  // a version-2 peer: its hello is 16 bytes, so waiting for 24 would stall
  const Status old = FramePrefixError(prefix(kFramePrefixSize), kRequestMagic, kHelloMagic);
  EXPECT_EQ(old.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(old.message().find("version 2"), std::string::npos) << old;
}

TEST(TcpProtocolTest, RequestWithoutDeadlineCarriesAllOnes) {
  RequestHeader h = SampleRequest();
  h.deadline = kNoDeadline;
  std::array<uint8_t, kRequestHeaderSize> bytes{};
  EncodeRequestHeader(h, bytes);
  EXPECT_TRUE(
      std::all_of(bytes.begin() + 48, bytes.begin() + 56, [](uint8_t b) { return b == 0xff; }));
  RequestHeader out;
  ASSERT_TRUE(DecodeRequestHeader(bytes, &out).ok());
  EXPECT_EQ(out.deadline, kNoDeadline);
}

TEST(TcpProtocolTest, RejectsBadRequestFrames) {
  auto broken = [](auto mutate) {
    std::array<uint8_t, kRequestHeaderSize> bytes{};
    EncodeRequestHeader(SampleRequest(), bytes);
    mutate(bytes);
    Reseal(bytes);  // the field's own check runs, not only the checksum
    RequestHeader out;
    return DecodeRequestHeader(bytes, &out).code();
  };
  EXPECT_EQ(broken([](auto& b) { b[0] ^= 1; }), StatusCode::kInvalidArgument);  // magic
  EXPECT_EQ(broken([](auto& b) { b[4] = kProtocolVersion + 1; }),
            StatusCode::kInvalidArgument);                                     // version
  EXPECT_EQ(broken([](auto& b) { b[4] = 1; }), StatusCode::kInvalidArgument);  // version 1
  EXPECT_EQ(broken([](auto& b) { b[5] = 2; }), StatusCode::kInvalidArgument);  // op
  EXPECT_EQ(broken([](auto& b) { b[6] = 2; }), StatusCode::kInvalidArgument);  // flags
  EXPECT_EQ(broken([](auto& b) { b[7] = 1; }), StatusCode::kInvalidArgument);  // reserved
  EXPECT_EQ(broken([](auto& b) { std::fill(b.begin() + 24, b.begin() + 32, 0); }),
            StatusCode::kInvalidArgument);                                         // length 0
  EXPECT_EQ(broken([](auto& b) { b[28] = 0x40; }), StatusCode::kInvalidArgument);  // > 1 GiB
}

TEST(TcpProtocolTest, ResponseRoundTripsAndRejectsBadFrames) {
  ResponseHeader h;
  h.request_id = 9;
  h.code = StatusCode::kStale;
  h.message_length = 17;
  std::array<uint8_t, kResponseHeaderSize> bytes{};
  EncodeResponseHeader(h, bytes);
  ResponseHeader out;
  ASSERT_TRUE(DecodeResponseHeader(bytes, &out).ok());
  EXPECT_EQ(out.request_id, 9u);
  EXPECT_EQ(out.code, StatusCode::kStale);
  EXPECT_EQ(out.message_length, 17u);
  EXPECT_EQ(out.payload_length, 0u);

  auto broken = [&](auto mutate) {
    std::array<uint8_t, kResponseHeaderSize> b = bytes;
    mutate(b);
    Reseal(b);
    ResponseHeader r;
    return DecodeResponseHeader(b, &r).code();
  };
  EXPECT_EQ(broken([](auto& b) { b[1] ^= 1; }), StatusCode::kInvalidArgument);    // magic
  EXPECT_EQ(broken([](auto& b) { b[5] = 200; }), StatusCode::kInvalidArgument);   // status
  EXPECT_EQ(broken([](auto& b) { b[7] = 0xff; }), StatusCode::kInvalidArgument);  // message
  EXPECT_EQ(broken([](auto& b) { b[16] = 1; }), StatusCode::kInvalidArgument);    // data + error
  EXPECT_EQ(ClampMessage(std::string(5000, 'x')).size(), kMaxMessageBytes);

  // Every length a peer sends is bounded before the receiver sizes anything by it.
  ResponseHeader ok;
  ok.request_id = 1;
  std::array<uint8_t, kResponseHeaderSize> good{};
  EncodeResponseHeader(ok, good);
  auto decode = [](std::array<uint8_t, kResponseHeaderSize> b) {
    Reseal(b);
    ResponseHeader r;
    return DecodeResponseHeader(b, &r).code();
  };
  std::array<uint8_t, kResponseHeaderSize> huge_payload = good;
  huge_payload[20] = 0x01;  // 2^32 bytes with an OK status
  EXPECT_EQ(decode(huge_payload), StatusCode::kInvalidArgument);
  std::array<uint8_t, kResponseHeaderSize> max_message = good;
  max_message[6] = static_cast<uint8_t>(kMaxMessageBytes & 0xff);
  max_message[7] = static_cast<uint8_t>(kMaxMessageBytes >> 8);
  EXPECT_EQ(decode(max_message), StatusCode::kOk);  // the bound itself is fine
  max_message[6] += 1;
  EXPECT_EQ(decode(max_message), StatusCode::kInvalidArgument);
}

TEST(TcpProtocolTest, HelloRoundTripsAndIsStrict) {
  std::array<uint8_t, kHelloSize> bytes{};
  EncodeHello(kHelloMagic, 0x0a0b0c0d0e0f1011, bytes);
  EXPECT_EQ(bytes[0], 'F');
  EXPECT_EQ(bytes[2], 'H');
  EXPECT_EQ(bytes[3], 'L');
  EXPECT_EQ(bytes[8], 0x11);
  EXPECT_TRUE(StartsWithMagic(bytes, kHelloMagic));
  EXPECT_FALSE(StartsWithMagic(std::span<const uint8_t>(bytes.data(), 3), kHelloMagic));
  uint64_t clock = 0;
  ASSERT_TRUE(DecodeHello(bytes, kHelloMagic, &clock).ok());
  EXPECT_EQ(clock, 0x0a0b0c0d0e0f1011u);
  // A hello is not a reply, and the reverse.
  EXPECT_EQ(DecodeHello(bytes, kHelloReplyMagic, &clock).code(), StatusCode::kInvalidArgument);
  auto broken = [&](auto mutate) {
    std::array<uint8_t, kHelloSize> b = bytes;
    mutate(b);
    Reseal(b);
    uint64_t c = 0;
    return DecodeHello(b, kHelloMagic, &c).code();
  };
  EXPECT_EQ(broken([](auto& b) { b[4] = kProtocolVersion - 1; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(broken([](auto& b) { b[5] = 1; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(broken([](auto& b) { b[7] = 1; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(broken([](auto& b) { b[16] = 1; }), StatusCode::kInvalidArgument);
}

TEST(TcpProtocolTest, ClockMappingErrsTowardsEarlyDeadlines) {
  using std::chrono::milliseconds;
  using std::chrono::nanoseconds;
  using TP = std::chrono::steady_clock::time_point;
  const TP t1(std::chrono::seconds(1000));
  const TP t2 = t1 + milliseconds(2);
  // The target's clock is 5 s ahead; it read its clock 0.5 ms after t1 (not the midpoint).
  const int64_t truth = 5'000'000'000;
  const uint64_t tt = SteadyNanos(t1 + std::chrono::microseconds(500)) + truth;
  const ClockMapping m = ClockMapping::FromRoundTrip(t1, tt, t2);
  EXPECT_EQ(m.error_ns, 1'000'000);
  EXPECT_LE(std::abs(m.offset_ns - truth), m.error_ns);
  EXPECT_EQ(m.measured_at, t2);
  // A deadline 1 s after the measurement: in the target's clock, never later than the truth,
  // early by at most twice the error plus the drift allowance (100 us per second).
  const TP deadline = t2 + std::chrono::seconds(1);
  const int64_t exact = static_cast<int64_t>(SteadyNanos(deadline)) + truth;
  const auto mapped = static_cast<int64_t>(m.TargetDeadline(deadline));
  EXPECT_LE(mapped, exact);
  EXPECT_GE(mapped, exact - 2 * m.error_ns - 100'000);
  EXPECT_EQ(m.TargetDeadline(TP::max()), kNoDeadline);
  // A target whose clock started just before the hello maps a deadline before that to 0
  // (before its epoch: refused at once).
  const ClockMapping young = ClockMapping::FromRoundTrip(t1, 10, t2);
  EXPECT_EQ(young.TargetDeadline(t1 - milliseconds(10)), 0u);
  EXPECT_GT(young.TargetDeadline(t2 + milliseconds(10)), 0u);
  // Far deadlines saturate instead of wrapping.
  EXPECT_LT(m.TargetDeadline(TP::max() - nanoseconds(1)), kNoDeadline);
  EXPECT_GT(m.TargetDeadline(TP::max() - nanoseconds(1)), SteadyNanos(deadline));
}

}  // namespace
}  // namespace ferry::tcp
