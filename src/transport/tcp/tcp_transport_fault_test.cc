// TcpTransport when things go wrong: dead and hung peers, a target stopped mid-batch,
// reconnects, back-pressure, Stop with work in flight, bad frames in either direction.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <iostream>
#include <span>
#include <thread>
#include <vector>

#include "transport/tcp/tcp_protocol.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/tcp_transport_fixture.h"

namespace ferry::tcp {
namespace {

TEST_F(TcpTransportTest, HungPeerFailsWithinIoTimeout) {
  uint16_t port = 0;
  RawSocket hung = RawSocket::ListenLoopback(&port);  // accepts in the kernel, never answers
  ASSERT_GE(hung.fd(), 0);
  const auto io_timeout = 300ms;
  StartInitiator(Options(io_timeout));
  std::shared_ptr<PeerLink> link = ConnectTo("127.0.0.1:" + std::to_string(port));
  ASSERT_NE(link, nullptr);
  std::vector<uint8_t> source(8 * kMiB, 1);
  std::vector<uint8_t> sink(4096);
  SliceBatch batch(&initiator_ctx_);
  for (int i = 0; i < 4; ++i) batch.Add(Make(OpCode::kWrite, source.data(), 0, 4096));
  batch.Add(Make(OpCode::kRead, sink.data(), 0, 4096));
  batch.Add(Make(OpCode::kWrite, source.data(), 0, source.size()));
  const auto start = Clock::now();
  ASSERT_TRUE(initiator_->Submit(*link, batch.ptrs).ok());
  ASSERT_TRUE(initiator_ctx_.WaitAll(batch.ptrs, 5s));
  const auto took = Clock::now() - start;
  for (Slice* s : batch.ptrs) {
    EXPECT_EQ(initiator_ctx_.StatusOf(s).code(), StatusCode::kUnavailable)
        << initiator_ctx_.StatusOf(s);
  }
  EXPECT_GE(took, io_timeout - 50ms);
  EXPECT_LE(took, io_timeout * 5 / 4 + 500ms);
  EXPECT_GE(initiator_->stats().timeouts, 1u);
}

TEST_F(TcpTransportTest, TargetStoppedMidBatchFailsSlicesThenANewTargetWorks) {
  const auto io_timeout = 1000ms;
  StartTarget(Options(io_timeout));
  StartInitiator(Options(io_timeout));
  std::shared_ptr<PeerLink> link = ConnectTo(endpoint_);
  ASSERT_NE(link, nullptr);
  std::vector<uint8_t> source(kMiB, 9);
  std::vector<std::vector<uint8_t>> sinks(8, std::vector<uint8_t>(kMiB));
  SliceBatch batch(&initiator_ctx_);
  for (size_t i = 0; i < 24; ++i) batch.Add(Make(OpCode::kWrite, source.data(), i * kMiB, kMiB));
  for (size_t i = 0; i < sinks.size(); ++i) {
    batch.Add(Make(OpCode::kRead, sinks[i].data(), (24 + i) * kMiB, kMiB));
  }
  ASSERT_TRUE(initiator_->Submit(*link, batch.ptrs).ok());
  std::this_thread::sleep_for(2ms);
  target_->Stop();
  const auto start = Clock::now();
  ASSERT_TRUE(initiator_ctx_.WaitAll(batch.ptrs, io_timeout * 5 / 4 + 1s));
  EXPECT_LE(Clock::now() - start, io_timeout * 5 / 4 + 500ms);
  size_t failed = 0;
  for (Slice* s : batch.ptrs) {
    const Status status = initiator_ctx_.StatusOf(s);
    EXPECT_TRUE(status.ok() || status.code() == StatusCode::kUnavailable) << status;
    failed += status.ok() ? 0 : 1;
  }
  std::cout << "[ info ] target stopped mid-batch: " << failed << " of " << batch.ptrs.size()
            << " slices failed\n";
  EXPECT_EQ(target_ctx_.active_pins(), 0);

  // The peer comes back (new transport, new port); a new Connect reaches it.
  StartTarget(Options(io_timeout));
  std::shared_ptr<PeerLink> again = ConnectTo(endpoint_);
  ASSERT_NE(again, nullptr);
  std::vector<uint8_t> check(64 * 1024);
  Fill(source.data(), 64 * 1024, 11);
  SliceBatch round(&initiator_ctx_);
  round.Add(Make(OpCode::kWrite, source.data(), 100, 64 * 1024));
  Run(*again, round);
  SliceBatch back(&initiator_ctx_);
  back.Add(Make(OpCode::kRead, check.data(), 100, 64 * 1024));
  Run(*again, back);
  ExpectAllOk(round);
  ExpectAllOk(back);
  EXPECT_EQ(std::memcmp(check.data(), source.data(), check.size()), 0);
}

TEST_F(TcpTransportTest, BrokenConnectionIsReplacedOnNextUse) {
  TcpTransportOptions one = Options();
  one.connections_per_peer = 1;
  StartTarget();
  StartInitiator(one);
  std::shared_ptr<PeerLink> link = ConnectTo(endpoint_);
  ASSERT_NE(link, nullptr);
  std::vector<uint8_t> source(4096, 4);
  SliceBatch first(&initiator_ctx_);
  first.Add(Make(OpCode::kWrite, source.data(), 0, 4096));
  Run(*link, first);
  ExpectAllOk(first);
  // The target restarts on the same port: the pooled connection is dead.
  const uint16_t port =
      static_cast<uint16_t>(std::stoi(endpoint_.substr(endpoint_.rfind(':') + 1)));
  target_->Stop();
  TcpTransportOptions same_port = Options();
  same_port.port = port;
  StartTarget(same_port);
  bool ok = false;
  for (int attempt = 0; attempt < 3 && !ok; ++attempt) {
    SliceBatch retry(&initiator_ctx_);
    retry.Add(Make(OpCode::kWrite, source.data(), 4096, 4096));
    Run(*link, retry);
    ok = initiator_ctx_.StatusOf(retry.ptrs[0]).ok();
    if (!ok) std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(ok);
  EXPECT_EQ(initiator_->stats().connections_opened, 2u);
}

TEST_F(TcpTransportTest, SubmitReturnsAgainWhenTheLinkQueueIsFull) {
  uint16_t port = 0;
  RawSocket hung = RawSocket::ListenLoopback(&port);
  ASSERT_GE(hung.fd(), 0);
  TcpTransportOptions small = Options(300ms);
  small.max_queued_per_peer = 4;
  StartInitiator(small);
  std::shared_ptr<PeerLink> link = ConnectTo("127.0.0.1:" + std::to_string(port));
  ASSERT_NE(link, nullptr);
  std::vector<uint8_t> source(4096);
  SliceBatch batch(&initiator_ctx_);
  for (int i = 0; i < 8; ++i) batch.Add(Make(OpCode::kWrite, source.data(), 0, 4096));
  std::span<Slice* const> all(batch.ptrs);
  EXPECT_TRUE(initiator_->Submit(*link, all.subspan(0, 3)).ok());
  EXPECT_EQ(initiator_->Submit(*link, all.subspan(3, 2)).code(), StatusCode::kAgain);
  EXPECT_TRUE(initiator_->Submit(*link, all.subspan(3, 1)).ok());
  EXPECT_EQ(initiator_->Submit(*link, all.subspan(4, 1)).code(), StatusCode::kAgain);
  EXPECT_EQ(initiator_->Submit(*link, all.subspan(0, 5)).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(initiator_ctx_.WaitAll({all.begin(), all.begin() + 4}, 3s));
  EXPECT_EQ(initiator_ctx_.completions(), 4u);  // nothing refused was queued
  // The failures gave the places back.
  EXPECT_TRUE(initiator_->Submit(*link, all.subspan(4, 4)).ok());
  ASSERT_TRUE(initiator_ctx_.WaitAll(batch.ptrs, 3s));
  EXPECT_EQ(initiator_ctx_.duplicate_completions(), 0u);
}

TEST_F(TcpTransportTest, StopCompletesQueuedAndInFlightSlicesPromptly) {
  uint16_t port = 0;
  RawSocket hung = RawSocket::ListenLoopback(&port);
  ASSERT_GE(hung.fd(), 0);
  TcpTransportOptions o = Options(10000ms);
  o.connections_per_peer = 2;
  o.window = 2;  // most slices wait in the queue, a few are in flight
  StartInitiator(o);
  std::shared_ptr<PeerLink> link = ConnectTo("127.0.0.1:" + std::to_string(port));
  ASSERT_NE(link, nullptr);
  std::vector<uint8_t> source(4096);
  SliceBatch batch(&initiator_ctx_);
  for (int i = 0; i < 16; ++i) batch.Add(Make(OpCode::kWrite, source.data(), 0, 4096));
  ASSERT_TRUE(initiator_->Submit(*link, batch.ptrs).ok());
  std::this_thread::sleep_for(100ms);
  const auto start = Clock::now();
  initiator_->Stop();
  EXPECT_LE(Clock::now() - start, 1s);
  ASSERT_TRUE(initiator_ctx_.WaitAll(batch.ptrs, 1s));
  for (Slice* s : batch.ptrs) {
    const StatusCode code = initiator_ctx_.StatusOf(s).code();
    EXPECT_TRUE(code == StatusCode::kCanceled || code == StatusCode::kUnavailable)
        << StatusCodeName(code);
  }
  EXPECT_EQ(initiator_ctx_.duplicate_completions(), 0u);
  EXPECT_EQ(initiator_->Submit(*link, batch.ptrs).code(), StatusCode::kCanceled);
  link.reset();  // a link that outlives the transport's stop is safe to drop
}

TEST_F(TcpTransportTest, BadRequestFramesCloseTheConnectionAndAreCounted) {
  StartTarget();
  const uint16_t port =
      static_cast<uint16_t>(std::stoi(endpoint_.substr(endpoint_.rfind(':') + 1)));
  std::array<uint8_t, kRequestHeaderSize> garbage{};
  garbage.fill(0x5a);
  std::array<uint8_t, kRequestHeaderSize> wrong_version{};
  RequestHeader header;
  header.op = WireOp::kWrite;
  header.request_id = 1;
  header.remote_addr = Addr(remote_.data());
  header.length = 16;
  header.incarnation = kTargetIncarnation;
  header.generation = kGeneration;
  EncodeRequestHeader(header, wrong_version);
  wrong_version[4] = kProtocolVersion + 1;
  std::array<uint8_t, kRequestHeaderSize> empty{};
  header.length = 0;
  EncodeRequestHeader(header, empty);
  int expected = 0;
  for (const auto* frame : {&garbage, &wrong_version, &empty}) {
    RawSocket client = RawSocket::ConnectLoopback(port);
    ASSERT_GE(client.fd(), 0);
    ASSERT_TRUE(client.SendAll(frame->data(), frame->size()));
    char byte = 0;
    EXPECT_EQ(client.RecvSome(&byte, 1, 2s), 0);  // closed, nothing answered
    EXPECT_EQ(target_->stats().bad_frames, static_cast<uint64_t>(++expected));
  }
  EXPECT_TRUE(
      std::all_of(remote_.begin(), remote_.begin() + 64, [](uint8_t b) { return b == 0xAA; }));
  EXPECT_EQ(target_ctx_.pin_calls(), 0u);
}

TEST_F(TcpTransportTest, BadResponseFrameFailsTheSliceAndIsCounted) {
  uint16_t port = 0;
  RawSocket listener = RawSocket::ListenLoopback(&port);
  ASSERT_GE(listener.fd(), 0);
  std::thread fake_target([&] {
    RawSocket peer = listener.Accept(5s);
    std::array<uint8_t, kRequestHeaderSize> request{};
    size_t got = 0;
    while (got < request.size()) {
      const long n = peer.RecvSome(request.data() + got, request.size() - got, 5s);
      if (n <= 0) return;
      got += static_cast<size_t>(n);
    }
    std::array<uint8_t, kResponseHeaderSize> reply{};
    ResponseHeader header;
    header.request_id = 99;  // answers a request never sent
    EncodeResponseHeader(header, reply);
    (void)peer.SendAll(reply.data(), reply.size());
    char byte = 0;
    (void)peer.RecvSome(&byte, 1, 5s);  // until the initiator closes
  });
  StartInitiator();
  std::shared_ptr<PeerLink> link = ConnectTo("127.0.0.1:" + std::to_string(port));
  ASSERT_NE(link, nullptr);
  std::vector<uint8_t> sink(64);
  SliceBatch batch(&initiator_ctx_);
  batch.Add(Make(OpCode::kRead, sink.data(), 0, 64));
  Run(*link, batch, 5s);
  fake_target.join();
  EXPECT_EQ(initiator_ctx_.StatusOf(batch.ptrs[0]).code(), StatusCode::kUnavailable);
  EXPECT_EQ(initiator_->stats().bad_frames, 1u);
}
}  // namespace
}  // namespace ferry::tcp
