#include "transport/tcp/tcp_protocol.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <string>

namespace ferry::tcp {
namespace {

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
}

TEST(TcpProtocolTest, RequestWithoutDeadlineCarriesAllOnes) {
  RequestHeader h = SampleRequest();
  h.deadline = kNoDeadline;
  std::array<uint8_t, kRequestHeaderSize> bytes{};
  EncodeRequestHeader(h, bytes);
  EXPECT_TRUE(std::all_of(bytes.begin() + 48, bytes.end(), [](uint8_t b) { return b == 0xff; }));
  RequestHeader out;
  ASSERT_TRUE(DecodeRequestHeader(bytes, &out).ok());
  EXPECT_EQ(out.deadline, kNoDeadline);
}

TEST(TcpProtocolTest, RejectsBadRequestFrames) {
  auto broken = [](auto mutate) {
    std::array<uint8_t, kRequestHeaderSize> bytes{};
    EncodeRequestHeader(SampleRequest(), bytes);
    mutate(bytes);
    RequestHeader out;
    return DecodeRequestHeader(bytes, &out).code();
  };
  EXPECT_EQ(broken([](auto& b) { b[0] ^= 1; }), StatusCode::kInvalidArgument);  // magic
  EXPECT_EQ(broken([](auto& b) { b[4] = kProtocolVersion + 1; }),
            StatusCode::kInvalidArgument);                                     // version
  EXPECT_EQ(broken([](auto& b) { b[4] = 1; }), StatusCode::kInvalidArgument);  // version 1
  EXPECT_EQ(broken([](auto& b) { b[5] = 2; }), StatusCode::kInvalidArgument);  // op
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
    uint64_t c = 0;
    return DecodeHello(b, kHelloMagic, &c).code();
  };
  EXPECT_EQ(broken([](auto& b) { b[4] = kProtocolVersion - 1; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(broken([](auto& b) { b[5] = 1; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(broken([](auto& b) { b[7] = 1; }), StatusCode::kInvalidArgument);
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
