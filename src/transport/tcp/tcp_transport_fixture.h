// The fixture the tcp transport's tests share: a target and an initiator TcpTransport on
// 127.0.0.1, each with a TestContext standing in for the engine, and a registered 32 MiB
// "remote" region on the target side.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "transport/tcp/tcp_protocol.h"
#include "transport/tcp/tcp_test_context.h"
#include "transport/tcp/tcp_transport.h"
#include "common/sanitizers.h"

namespace ferry::tcp {

using namespace std::chrono_literals;
using testing::GatedContext;
using testing::RawSocket;
using testing::SliceBatch;
using testing::TestContext;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kTargetIncarnation = 0x7a7a7a;
constexpr uint64_t kGeneration = 3;
constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kRemoteSize = 32 * kMiB;


inline void Fill(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed * 131 + i * 31 + (i >> 9));
}

inline uint64_t Addr(const void* p) { return reinterpret_cast<uint64_t>(p); }  // NOLINT

// Reads exactly `size` bytes; false on EOF, error or `timeout` (per read).
inline bool RecvExactly(const RawSocket& s, void* data, size_t size,
                        std::chrono::milliseconds timeout = 5000ms) {
  auto* p = static_cast<uint8_t*>(data);
  for (size_t got = 0; got < size;) {
    const long n = s.RecvSome(p + got, size - got, timeout);
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

// A fake initiator's clock hello: returns the target's clock from its reply (0 on failure).
inline uint64_t SendHello(const RawSocket& s) {
  std::array<uint8_t, kHelloSize> hello{};
  EncodeHello(kHelloMagic, SteadyNowNanos(), hello);
  std::array<uint8_t, kHelloSize> reply{};
  uint64_t clock = 0;
  if (!s.SendAll(hello.data(), hello.size()) || !RecvExactly(s, reply.data(), reply.size()) ||
      !DecodeHello(reply, kHelloReplyMagic, &clock).ok()) {
    return 0;
  }
  return clock;
}

// Reads a target's closing notice (tcp_protocol.h) and returns its message; "" when anything
// else came (or its checksum is wrong).
inline std::string ReadClosingNotice(const RawSocket& s) {
  std::array<uint8_t, kResponseHeaderSize> bytes{};
  ResponseHeader r;
  if (!RecvExactly(s, bytes.data(), bytes.size()) || !DecodeResponseHeader(bytes, &r).ok() ||
      !r.is_notice()) {
    return "";
  }
  std::string message(r.message_length, '\0');
  if (!RecvExactly(s, message.data(), message.size()) || Crc32c(message) != r.body_crc) return "";
  return message;
}

// A fake target's side of the hello: reads it and answers with this host's clock.
inline bool AnswerHello(const RawSocket& s) {
  std::array<uint8_t, kHelloSize> hello{};
  uint64_t clock = 0;
  if (!RecvExactly(s, hello.data(), hello.size()) ||
      !DecodeHello(hello, kHelloMagic, &clock).ok()) {
    return false;
  }
  std::array<uint8_t, kHelloSize> reply{};
  EncodeHello(kHelloReplyMagic, SteadyNowNanos(), reply);
  return s.SendAll(reply.data(), reply.size());
}

inline uint16_t PortOf(const std::string& endpoint) {
  return static_cast<uint16_t>(std::stoi(endpoint.substr(endpoint.rfind(':') + 1)));
}

inline TcpTransportOptions Options(std::chrono::milliseconds io_timeout = 2000ms) {
  TcpTransportOptions o;
  o.io_timeout = io_timeout;
  return o;
}

class TcpTransportTest : public ::testing::Test {
 protected:
  TcpTransportTest()
      : target_ctx_(kTargetIncarnation), initiator_ctx_(0x1111), remote_(kRemoteSize, 0xAA) {
    target_ctx_.AddRegion(remote_.data(), remote_.size(), kGeneration);
  }
  ~TcpTransportTest() override {
    initiator_.reset();
    target_.reset();
  }

  // `ctx`: the target's context (default target_ctx_), borrowed until the target is dropped.
  void StartTarget(TcpTransportOptions o = Options(), TransportContext* ctx = nullptr) {
    target_ = std::make_unique<TcpTransport>(o);
    Result<std::string> endpoint =
        target_->Start(ctx != nullptr ? ctx : &target_ctx_, {"target", "127.0.0.1"});
    ASSERT_TRUE(endpoint.ok()) << endpoint.status();
    endpoint_ = *endpoint;
  }
  void StartInitiator(TcpTransportOptions o = Options()) {
    initiator_ = std::make_unique<TcpTransport>(o);
    Result<std::string> endpoint = initiator_->Start(&initiator_ctx_, {"initiator", "127.0.0.1"});
    ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  }
  std::shared_ptr<PeerLink> ConnectTo(const std::string& endpoint) {
    SegmentDesc desc;
    desc.name = "target";
    desc.incarnation = kTargetIncarnation;
    desc.transports["tcp"] = endpoint;
    Result<std::shared_ptr<PeerLink>> link = initiator_->Connect(desc);
    EXPECT_TRUE(link.ok()) << link.status();
    return link.ok() ? *link : nullptr;
  }
  Slice Make(OpCode op, const void* local, uint64_t remote_offset, uint64_t length) {
    Slice s;
    s.op = op;
    s.local_addr = Addr(local);
    s.remote_addr = Addr(remote_.data() + remote_offset);
    s.length = length;
    s.remote_generation = kGeneration;
    s.peer_incarnation = kTargetIncarnation;
    return s;
  }
  // Submits the whole batch and waits for every completion.
  void Run(PeerLink& link, const SliceBatch& batch, std::chrono::milliseconds timeout = 20s) {
    ASSERT_TRUE(initiator_->Submit(link, batch.ptrs).ok());
    ASSERT_TRUE(initiator_ctx_.WaitAll(batch.ptrs, timeout));
  }
  void ExpectAllOk(const SliceBatch& batch) {
    for (Slice* s : batch.ptrs)
      EXPECT_TRUE(initiator_ctx_.StatusOf(s).ok()) << initiator_ctx_.StatusOf(s);
  }

  TestContext target_ctx_;
  TestContext initiator_ctx_;
  std::vector<uint8_t> remote_;
  std::unique_ptr<TcpTransport> target_;
  std::unique_ptr<TcpTransport> initiator_;
  std::string endpoint_;
};

}  // namespace ferry::tcp
