#include "transport/tcp/tcp_protocol.h"

#include <gtest/gtest.h>

#include <array>

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
  EXPECT_EQ(broken([](auto& b) { b[4] = 2; }), StatusCode::kInvalidArgument);   // version
  EXPECT_EQ(broken([](auto& b) { b[5] = 2; }), StatusCode::kInvalidArgument);   // op
  EXPECT_EQ(broken([](auto& b) { b[7] = 1; }), StatusCode::kInvalidArgument);   // reserved
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
}

}  // namespace
}  // namespace ferry::tcp
