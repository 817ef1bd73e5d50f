// Checksums on the tcp data protocol (tcp_protocol.h): bytes corrupted in transit are caught on
// either side, the slice they belong to fails (never completes OK) with a reason naming the
// checksum, and the connection closes. Real transports on 127.0.0.1 against a raw socket that
// plays the other side and corrupts what it sends. Also how the target parses many requests
// from one read-ahead buffer: coalesced WRITEs, and requests read ahead past its answer cap.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <string>
#include <thread>
#include <vector>

#include "common/crc32c.h"
#include "common/wait_for.h"
#include "transport/tcp/target_connection.h"
#include "transport/tcp/tcp_transport_fixture.h"

namespace ferry::tcp {
namespace {

RequestHeader WriteHeader(uint64_t id, uint64_t addr, const std::vector<uint8_t>& payload) {
  RequestHeader h;
  h.op = WireOp::kWrite;
  h.request_id = id;
  h.remote_addr = addr;
  h.length = payload.size();
  h.incarnation = kTargetIncarnation;
  h.generation = kGeneration;
  h.payload_crc = Crc32c(payload.data(), payload.size());
  return h;
}

bool SendRequest(const RawSocket& s, const RequestHeader& h, const std::vector<uint8_t>& payload) {
  std::array<uint8_t, kRequestHeaderSize> bytes{};
  EncodeRequestHeader(h, bytes);
  return s.SendAll(bytes.data(), bytes.size()) && s.SendAll(payload.data(), payload.size());
}

TEST_F(TcpTransportTest, TargetFailsAWriteWhosePayloadWasCorruptedInTransit) {
  StartTarget();
  RawSocket client = RawSocket::ConnectLoopback(PortOf(endpoint_));
  ASSERT_GE(client.fd(), 0);
  ASSERT_NE(SendHello(client), 0u);
  std::vector<uint8_t> payload(64 * 1024);
  Fill(payload.data(), payload.size(), 5);
  // An intact WRITE is answered OK ...
  ASSERT_TRUE(SendRequest(client, WriteHeader(1, Addr(remote_.data()), payload), payload));
  std::array<uint8_t, kResponseHeaderSize> bytes{};
  ASSERT_TRUE(RecvExactly(client, bytes.data(), bytes.size()));
  ResponseHeader ok;
  ASSERT_TRUE(DecodeResponseHeader(bytes, &ok).ok());
  EXPECT_EQ(ok.request_id, 1u);
  EXPECT_EQ(ok.code, StatusCode::kOk);
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), remote_.begin()));
  // ... one whose payload lost a bit on the way is not: the target says why and closes.
  const RequestHeader h = WriteHeader(2, Addr(remote_.data() + kMiB), payload);
  payload[40000] ^= 0x08;
  ASSERT_TRUE(SendRequest(client, h, payload));
  const std::string why = ReadClosingNotice(client);
  EXPECT_NE(why.find("payload of WRITE request 2"), std::string::npos) << why;
  EXPECT_NE(why.find("checksum mismatch"), std::string::npos) << why;
  char byte = 0;
  EXPECT_EQ(client.RecvSome(&byte, 1, 2s), 0);
  EXPECT_EQ(target_->stats().bad_frames, 1u);
}

// Small WRITEs arrive coalesced (all their frames in one send, so the target parses them from
// one read-ahead buffer): those before a corrupted payload land and are answered OK, the
// corrupted one fails with the closing notice naming it, and none after it is applied.
TEST_F(TcpTransportTest, CoalescedSmallWritesStopAtTheOneWhosePayloadWasCorrupted) {
  StartTarget();
  RawSocket client = RawSocket::ConnectLoopback(PortOf(endpoint_));
  ASSERT_GE(client.fd(), 0);
  ASSERT_NE(SendHello(client), 0u);
  constexpr size_t kCount = 24;
  constexpr size_t kBad = 9;  // request ids 1..kCount; this one's payload is corrupted
  std::vector<uint8_t> stream;
  std::vector<std::vector<uint8_t>> payloads;
  for (size_t i = 1; i <= kCount; ++i) {
    std::vector<uint8_t>& payload = payloads.emplace_back(1000 + 97 * i);
    Fill(payload.data(), payload.size(), static_cast<uint32_t>(i));
    std::array<uint8_t, kRequestHeaderSize> header{};
    EncodeRequestHeader(WriteHeader(i, Addr(remote_.data() + i * 8192), payload), header);
    stream.insert(stream.end(), header.begin(), header.end());
    stream.insert(stream.end(), payload.begin(), payload.end());
    if (i == kBad) stream[stream.size() - 10] ^= 0x40;  // after its checksum was computed
  }
  ASSERT_TRUE(client.SendAll(stream.data(), stream.size()));
  for (size_t i = 1; i < kBad; ++i) {
    std::array<uint8_t, kResponseHeaderSize> bytes{};
    ASSERT_TRUE(RecvExactly(client, bytes.data(), bytes.size()));
    ResponseHeader r;
    ASSERT_TRUE(DecodeResponseHeader(bytes, &r).ok());
    EXPECT_EQ(r.request_id, i);
    EXPECT_EQ(r.code, StatusCode::kOk);
    EXPECT_TRUE(std::equal(payloads[i - 1].begin(), payloads[i - 1].end(),
                           remote_.begin() + static_cast<std::ptrdiff_t>(i * 8192)))
        << i;
  }
  const std::string why = ReadClosingNotice(client);
  EXPECT_NE(why.find("payload of WRITE request " + std::to_string(kBad)), std::string::npos) << why;
  EXPECT_NE(why.find("checksum mismatch"), std::string::npos) << why;
  uint8_t more = 0;
  EXPECT_EQ(client.RecvSome(&more, 1, 5s), 0);  // nothing after the notice: the target closes
  for (size_t i = kBad + 1; i <= kCount; ++i) {
    EXPECT_TRUE(std::all_of(remote_.begin() + static_cast<std::ptrdiff_t>(i * 8192),
                            remote_.begin() + static_cast<std::ptrdiff_t>(i * 8192 + 4096),
                            [](uint8_t b) { return b == 0xAA; }))
        << "request " << i << " after the corrupted one was applied";
  }
  EXPECT_TRUE(target_ctx_.WaitNoPins(2s));
  EXPECT_EQ(target_->stats().bad_frames, 1u);
}

// More requests than the target answers at once (TargetConnection::kMaxQueuedResponses), all in
// one send that fits its read-ahead buffer: the target reaches its cap with requests in that
// buffer and none left in the socket, so no readiness event will announce them again. It must go
// on by itself as the initiator takes answers: every request is answered, in order and OK. 300
// small WRITEs (parsed from the buffer; their answers alone reach the cap), which land, then 500
// READs of 64 KiB (their answers fill the cap and the socket). With the default bytes_per_turn
// the target goes on when answers leave (EPOLLOUT); with 16 KiB its turn ends after the first
// recv while every answer of that turn leaves in it, so it must schedule its own next turn.
TEST_F(TcpTransportTest, ThrottledTargetResumesTheRequestsItReadAhead) {
  constexpr size_t kWrites = 300;
  constexpr size_t kReads = 500;
  constexpr size_t kWriteLength = 40;
  constexpr size_t kReadLength = 64 * 1024;
  constexpr size_t kWriteAt = kReads * kReadLength + 4096;  // after the range the READs read
  static_assert(kWriteAt + kWrites * kWriteLength < kRemoteSize);
  static_assert(kWrites > TargetConnection::kMaxQueuedResponses);
  static_assert(kReads > TargetConnection::kMaxQueuedResponses);
  static_assert(kWrites * (kRequestHeaderSize + kWriteLength) + kReads * kRequestHeaderSize <=
                64 * 1024);  // one read-ahead buffer (target_connection.cc)
  Fill(remote_.data(), kReads * kReadLength, 17);
  size_t pins = 0;
  for (const uint64_t bytes_per_turn : {Options().bytes_per_turn, uint64_t{16 * 1024}}) {
    SCOPED_TRACE(bytes_per_turn);
    TcpTransportOptions o = Options();
    o.bytes_per_turn = bytes_per_turn;
    StartTarget(o);
    RawSocket client = RawSocket::ConnectLoopback(PortOf(endpoint_));
    ASSERT_GE(client.fd(), 0);
    ASSERT_NE(SendHello(client), 0u);
    std::vector<uint8_t> stream;
    std::vector<std::vector<uint8_t>> payloads;
    for (size_t i = 0; i < kWrites; ++i) {  // request ids 1..kWrites
      std::vector<uint8_t>& payload = payloads.emplace_back(kWriteLength);
      Fill(payload.data(), payload.size(), static_cast<uint32_t>(bytes_per_turn + i));
      std::array<uint8_t, kRequestHeaderSize> header{};
      EncodeRequestHeader(
          WriteHeader(i + 1, Addr(remote_.data() + kWriteAt + i * kWriteLength), payload), header);
      stream.insert(stream.end(), header.begin(), header.end());
      stream.insert(stream.end(), payload.begin(), payload.end());
    }
    for (size_t i = 0; i < kReads; ++i) {  // request ids kWrites+1..kWrites+kReads
      RequestHeader h;
      h.op = WireOp::kRead;
      h.request_id = kWrites + 1 + i;
      h.remote_addr = Addr(remote_.data() + i * kReadLength);
      h.length = kReadLength;
      h.incarnation = kTargetIncarnation;
      h.generation = kGeneration;
      std::array<uint8_t, kRequestHeaderSize> header{};
      EncodeRequestHeader(h, header);
      stream.insert(stream.end(), header.begin(), header.end());
    }
    ASSERT_TRUE(client.SendAll(stream.data(), stream.size()));
    std::vector<uint8_t> body(kReadLength);
    for (uint64_t want = 1; want <= kWrites + kReads; ++want) {
      std::array<uint8_t, kResponseHeaderSize> bytes{};
      ASSERT_TRUE(RecvExactly(client, bytes.data(), bytes.size())) << "stalled before " << want;
      ResponseHeader r;
      ASSERT_TRUE(DecodeResponseHeader(bytes, &r).ok());
      ASSERT_EQ(r.request_id, want);
      ASSERT_EQ(r.code, StatusCode::kOk) << want;
      ASSERT_EQ(r.message_length, 0u) << want;
      if (want <= kWrites) {
        ASSERT_EQ(r.payload_length, 0u) << want;
        continue;
      }
      ASSERT_EQ(r.payload_length, kReadLength) << want;
      ASSERT_TRUE(RecvExactly(client, body.data(), body.size())) << want;
      const uint8_t* const from = remote_.data() + (want - kWrites - 1) * kReadLength;
      ASSERT_TRUE(std::equal(body.begin(), body.end(), from)) << "READ " << want;
    }
    for (size_t i = 0; i < kWrites; ++i) {
      EXPECT_TRUE(
          std::equal(payloads[i].begin(), payloads[i].end(),
                     remote_.begin() + static_cast<std::ptrdiff_t>(kWriteAt + i * kWriteLength)))
          << "WRITE " << i + 1;
    }
    EXPECT_EQ(remote_[kWriteAt + kWrites * kWriteLength], 0xAA);
    pins += kWrites + kReads;
    EXPECT_TRUE(target_ctx_.WaitNoPins(2s));
    EXPECT_EQ(target_ctx_.pin_calls(), pins);
    EXPECT_EQ(target_->stats().bad_frames, 0u);
  }
}

TEST_F(TcpTransportTest, TargetRefusesACorruptedRequestHeaderBeforeTouchingMemory) {
  StartTarget();
  for (size_t at : {size_t{5}, size_t{17}, size_t{26}, size_t{41}, size_t{57}}) {
    SCOPED_TRACE(at);
    RawSocket client = RawSocket::ConnectLoopback(PortOf(endpoint_));
    ASSERT_GE(client.fd(), 0);
    ASSERT_NE(SendHello(client), 0u);
    std::vector<uint8_t> payload(4096, 0x42);
    std::array<uint8_t, kRequestHeaderSize> header{};
    EncodeRequestHeader(WriteHeader(1, Addr(remote_.data()), payload), header);
    header[at] ^= 0x01;  // op, address, length, generation, checksum: none may be believed
    ASSERT_TRUE(client.SendAll(header.data(), header.size()));
    ASSERT_TRUE(client.SendAll(payload.data(), payload.size()));
    const std::string why = ReadClosingNotice(client);
    EXPECT_NE(why.find("header checksum mismatch"), std::string::npos) << why;
  }
  EXPECT_EQ(target_->stats().bad_frames, 5u);
  EXPECT_EQ(target_ctx_.pin_calls(), 0u);
  EXPECT_TRUE(
      std::all_of(remote_.begin(), remote_.begin() + 8192, [](uint8_t b) { return b == 0xAA; }));
}

// A fake target that answers the hello, then runs `serve` on the connection.
class FakeTarget {
 public:
  template <typename Serve>
  explicit FakeTarget(Serve serve) : listener_(RawSocket::ListenLoopback(&port_)) {
    thread_ = std::thread([this, serve] {
      RawSocket peer = listener_.Accept(5s);
      if (peer.fd() < 0 || !AnswerHello(peer)) return;
      serve(peer);
      char byte = 0;
      (void)peer.RecvSome(&byte, 1, 5s);  // until the initiator closes
    });
  }
  ~FakeTarget() { thread_.join(); }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  uint16_t port_ = 0;
  RawSocket listener_;
  std::thread thread_;
};

TEST_F(TcpTransportTest, InitiatorFailsAReadWhosePayloadWasCorruptedInTransit) {
  constexpr size_t kSize = 256 * 1024;  // read partly through the read-ahead buffer, partly direct
  std::vector<uint8_t> good(kSize);
  Fill(good.data(), kSize, 9);
  FakeTarget target([&](const RawSocket& peer) {
    std::array<uint8_t, kRequestHeaderSize> request{};
    RequestHeader h;
    if (!RecvExactly(peer, request.data(), request.size()) ||
        !DecodeRequestHeader(request, &h).ok() || !h.payload_checksum) {
      return;
    }
    ResponseHeader r;
    r.request_id = h.request_id;
    r.payload_length = h.length;
    r.body_crc = Crc32c(good.data(), good.size());
    std::array<uint8_t, kResponseHeaderSize> reply{};
    EncodeResponseHeader(r, reply);
    std::vector<uint8_t> sent = good;
    sent[kSize - 3] ^= 0x40;  // one bit, near the end
    (void)peer.SendAll(reply.data(), reply.size());
    (void)peer.SendAll(sent.data(), sent.size());
  });
  StartInitiator();
  std::shared_ptr<PeerLink> link = ConnectTo(target.endpoint());
  ASSERT_NE(link, nullptr);
  std::vector<uint8_t> sink(kSize, 0);
  SliceBatch batch(&initiator_ctx_);
  batch.Add(Make(OpCode::kRead, sink.data(), 0, kSize));
  Run(*link, batch, 5s);
  const Status s = initiator_ctx_.StatusOf(batch.ptrs[0]);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("payload of READ request 1"), std::string::npos) << s;
  EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s;
  EXPECT_EQ(initiator_->stats().bad_frames, 1u);
}

TEST_F(TcpTransportTest, InitiatorFailsEverySliceWithTheTargetsClosingNotice) {
  const std::string reason = "tcp bad frame: payload of WRITE request 1 checksum mismatch (test)";
  FakeTarget target([&](const RawSocket& peer) {
    // Takes both WRITEs whole, then closes with a notice instead of answering them.
    for (int i = 0; i < 2; ++i) {
      std::array<uint8_t, kRequestHeaderSize> request{};
      RequestHeader h;
      if (!RecvExactly(peer, request.data(), request.size()) ||
          !DecodeRequestHeader(request, &h).ok()) {
        return;
      }
      std::vector<uint8_t> payload(h.length);
      if (!RecvExactly(peer, payload.data(), payload.size())) return;
    }
    ResponseHeader notice;
    notice.request_id = kNoticeRequestId;
    notice.code = StatusCode::kUnavailable;
    notice.message_length = static_cast<uint16_t>(reason.size());
    notice.body_crc = Crc32c(reason);
    std::array<uint8_t, kResponseHeaderSize> bytes{};
    EncodeResponseHeader(notice, bytes);
    (void)peer.SendAll(bytes.data(), bytes.size());
    (void)peer.SendAll(reason.data(), reason.size());
  });
  TcpTransportOptions o = Options();
  o.connections_per_peer = 1;
  StartInitiator(o);
  std::shared_ptr<PeerLink> link = ConnectTo(target.endpoint());
  ASSERT_NE(link, nullptr);
  std::vector<uint8_t> source(4096, 0x11);
  SliceBatch batch(&initiator_ctx_);
  batch.Add(Make(OpCode::kWrite, source.data(), 0, 4096));
  batch.Add(Make(OpCode::kWrite, source.data(), 8192, 4096));
  Run(*link, batch, 5s);
  for (Slice* slice : batch.ptrs) {
    const Status s = initiator_ctx_.StatusOf(slice);
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
    EXPECT_NE(s.message().find(reason), std::string::npos) << s;
  }
}

TEST_F(TcpTransportTest, ACorruptedHelloIsReportedByTheTargetsNotice) {
  // The real target refuses a hello whose checksum is wrong; the initiator side (raw here)
  // reads why in place of the reply.
  StartTarget();
  RawSocket client = RawSocket::ConnectLoopback(PortOf(endpoint_));
  ASSERT_GE(client.fd(), 0);
  std::array<uint8_t, kHelloSize> hello{};
  EncodeHello(kHelloMagic, SteadyNowNanos(), hello);
  hello[9] ^= 0x80;
  ASSERT_TRUE(client.SendAll(hello.data(), hello.size()));
  const std::string why = ReadClosingNotice(client);
  EXPECT_NE(why.find("hello header checksum mismatch"), std::string::npos) << why;
  EXPECT_EQ(target_->stats().bad_frames, 1u);
}

TEST_F(TcpTransportTest, ChecksummedTransfersOfEverySizeArriveIntact) {
  StartTarget();
  StartInitiator();
  std::shared_ptr<PeerLink> link = ConnectTo(endpoint_);
  ASSERT_NE(link, nullptr);
  std::vector<uint8_t> source(4 * kMiB);
  Fill(source.data(), source.size(), 21);
  std::vector<uint8_t> sink(4 * kMiB, 0);
  uint64_t at = 0;
  SliceBatch writes(&initiator_ctx_);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // remote offset, length
  for (uint64_t length :
       {uint64_t{1}, uint64_t{7}, uint64_t{4096}, uint64_t{65537}, uint64_t{kMiB + 3}}) {
    writes.Add(Make(OpCode::kWrite, source.data() + at, at, length));
    ranges.emplace_back(at, length);
    at += length + 13;
  }
  Run(*link, writes);
  ExpectAllOk(writes);
  SliceBatch reads(&initiator_ctx_);
  for (const auto& [offset, length] : ranges) {
    reads.Add(Make(OpCode::kRead, sink.data() + offset, offset, length));
  }
  Run(*link, reads);
  ExpectAllOk(reads);
  for (const auto& [offset, length] : ranges) {
    EXPECT_TRUE(std::equal(source.begin() + offset, source.begin() + offset + length,
                           sink.begin() + offset))
        << offset;
  }
  EXPECT_EQ(target_->stats().bad_frames, 0u);
  EXPECT_EQ(initiator_->stats().bad_frames, 0u);
}

}  // namespace
}  // namespace ferry::tcp
