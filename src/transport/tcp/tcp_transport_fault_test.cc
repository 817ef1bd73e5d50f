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

#include "common/mutex.h"
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
  // Mid-batch: once the first slice is done (the others still move 31 MiB).
  ASSERT_TRUE(initiator_ctx_.WaitAll({batch.ptrs[0]}, 5s));
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
  const uint16_t port = PortOf(endpoint_);
  target_->Stop();
  TcpTransportOptions same_port = Options();
  same_port.port = port;
  StartTarget(same_port);
  // The first try may still meet the dead connection (it fails); the next opens a new one.
  bool ok = false;
  for (int attempt = 0; attempt < 3 && !ok; ++attempt) {
    SliceBatch retry(&initiator_ctx_);
    retry.Add(Make(OpCode::kWrite, source.data(), 4096, 4096));
    Run(*link, retry);
    ok = initiator_ctx_.StatusOf(retry.ptrs[0]).ok();
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
  o.stripe_size = 4096;  // each slice its own run: both connections carry some
  o.window = 2;          // most slices wait in the queue, a few are in flight
  StartInitiator(o);
  std::shared_ptr<PeerLink> link = ConnectTo("127.0.0.1:" + std::to_string(port));
  ASSERT_NE(link, nullptr);
  std::vector<uint8_t> source(4096);
  SliceBatch batch(&initiator_ctx_);
  for (int i = 0; i < 16; ++i) batch.Add(Make(OpCode::kWrite, source.data(), 0, 4096));
  ASSERT_TRUE(initiator_->Submit(*link, batch.ptrs).ok());
  // Both connections open (their hellos are on the wire, unanswered) before the stop.
  ASSERT_TRUE(WaitFor([&] { return initiator_->stats().connections_opened == 2; }, 5s));
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
  const uint16_t port = PortOf(endpoint_);
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
    ASSERT_NE(SendHello(client), 0u);
    ASSERT_TRUE(client.SendAll(frame->data(), frame->size()));
    // Answered only by the closing notice saying why, then the end of the stream.
    EXPECT_NE(ReadClosingNotice(client).find("tcp bad frame"), std::string::npos);
    char byte = 0;
    EXPECT_EQ(client.RecvSome(&byte, 1, 2s), 0);
    EXPECT_EQ(target_->stats().bad_frames, static_cast<uint64_t>(++expected));
  }
  // The first frame must be a hello: a well-formed request before it is a bad frame, and so
  // is a hello of another version.
  header.length = 16;
  std::array<uint8_t, kRequestHeaderSize> request{};
  EncodeRequestHeader(header, request);
  std::array<uint8_t, kHelloSize> old_hello{};
  EncodeHello(kHelloMagic, 1, old_hello);
  old_hello[4] = kProtocolVersion - 1;
  for (std::span<const uint8_t> frame :
       {std::span<const uint8_t>(request), std::span<const uint8_t>(old_hello)}) {
    RawSocket client = RawSocket::ConnectLoopback(port);
    ASSERT_GE(client.fd(), 0);
    ASSERT_TRUE(client.SendAll(frame.data(), frame.size()));
    EXPECT_NE(ReadClosingNotice(client).find("tcp bad frame"), std::string::npos);
    char byte = 0;
    EXPECT_EQ(client.RecvSome(&byte, 1, 2s), 0);
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
    if (!AnswerHello(peer)) return;
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

// A target that stops serving (its loop frozen, as a SIGSTOPped process; its kernel still takes
// bytes) while slices due in 300 ms are queued and on the wire: every one completes Timeout
// within 100 ms of its deadline, and once the target resumes not a byte of them lands, nor of a
// slice without a deadline that failed with their connection.
TEST_F(TcpTransportTest, FrozenTargetTimesSlicesOutAndNoneOfThemLandsAfterwards) {
  std::vector<uint8_t> gate_region(4096, 0);
  target_ctx_.AddRegion(gate_region.data(), gate_region.size(), kGeneration);
  GatedContext gated(&target_ctx_, gate_region.data());
  TcpTransportOptions frozen = Options(10000ms);  // io_timeout far beyond the deadlines
  frozen.io_threads = 1;  // one loop serves every connection: gating it freezes the target
  StartTarget(frozen, &gated);
  TcpTransportOptions o = Options(10000ms);
  o.connections_per_peer = 1;
  o.window = 4;  // some requests go on the wire, the rest wait in the queue
  StartInitiator(o);
  std::shared_ptr<PeerLink> link = ConnectTo(endpoint_);
  std::shared_ptr<PeerLink> gate_link = ConnectTo(endpoint_);
  ASSERT_NE(link, nullptr);
  ASSERT_NE(gate_link, nullptr);
  std::vector<uint8_t> source(kMiB);
  Fill(source.data(), source.size(), 17);
  SliceBatch warm(&initiator_ctx_);  // the connection is open and knows the target's clock
  warm.Add(Make(OpCode::kWrite, source.data(), 0, 4096));
  Run(*link, warm);
  ExpectAllOk(warm);

  std::vector<uint8_t> gate_source(64, 1);
  SliceBatch gate(&initiator_ctx_);
  Slice* gate_slice = gate.Add(Make(OpCode::kWrite, gate_source.data(), 0, 64));
  gate_slice->remote_addr = Addr(gate_region.data());
  ASSERT_TRUE(initiator_->Submit(*gate_link, gate.ptrs).ok());
  ASSERT_TRUE(gated.WaitFrozen(5s));
  const uint64_t pins_frozen = target_ctx_.pin_calls();

  constexpr uint64_t kSize = 64 * 1024;
  const auto deadline = Clock::now() + 300ms;
  SliceBatch due(&initiator_ctx_);
  Slice* patient = due.Add(Make(OpCode::kWrite, source.data(), kMiB, kSize));  // no deadline
  for (uint64_t i = 0; i < 8; ++i) {
    Slice* s =
        due.Add(Make(OpCode::kWrite, source.data() + i * kSize, 2 * kMiB + i * kSize, kSize));
    s->deadline = deadline;
  }
  ASSERT_TRUE(initiator_->Submit(*link, due.ptrs).ok());
  ASSERT_TRUE(initiator_ctx_.WaitAll(due.ptrs, 5s));
  const auto done = Clock::now();
  EXPECT_GE(done, deadline);
  EXPECT_LE(done - deadline, kSanitized ? 300ms : 100ms)
      << std::chrono::duration_cast<std::chrono::milliseconds>(done - deadline).count() << " ms";
  for (Slice* s : due.ptrs) {
    const Status status = initiator_ctx_.StatusOf(s);
    EXPECT_EQ(status.code(), s == patient ? StatusCode::kUnavailable : StatusCode::kTimeout)
        << status;
  }
  EXPECT_EQ(initiator_->stats().deadline_resets, 1u);
  EXPECT_EQ(initiator_->stats().expired_slices, 8u);

  // The target resumes. What must follow its reading the reset connection: the gate write
  // completes, then a write on a new link's connection.
  gated.Open();
  ASSERT_TRUE(initiator_ctx_.WaitAll(gate.ptrs, 5s));
  ExpectAllOk(gate);
  std::shared_ptr<PeerLink> fresh = ConnectTo(endpoint_);
  ASSERT_NE(fresh, nullptr);
  SliceBatch after(&initiator_ctx_);
  after.Add(Make(OpCode::kWrite, source.data(), 8 * kMiB, 4096));
  Run(*fresh, after);
  ExpectAllOk(after);
  EXPECT_TRUE(std::all_of(remote_.begin() + kMiB, remote_.begin() + 2 * kMiB + 8 * kSize,
                          [](uint8_t b) { return b == 0xAA; }));
  EXPECT_EQ(target_ctx_.pin_calls(), pins_frozen + 2);  // the gate's and the fresh write's
  EXPECT_TRUE(target_ctx_.WaitNoPins(2s));
}

// The target's own check: a request whose deadline (in the target's clock) has passed when the
// target reads it is refused with Timeout before anything is pinned or moved.
TEST_F(TcpTransportTest, TargetRefusesRequestsPastTheirDeadline) {
  StartTarget();
  RawSocket client = RawSocket::ConnectLoopback(PortOf(endpoint_));
  ASSERT_GE(client.fd(), 0);
  const uint64_t now = SendHello(client);
  ASSERT_NE(now, 0u);
  const uint64_t ms = 1'000'000;
  struct Case {
    WireOp op;
    uint64_t offset;
    uint64_t deadline;
    StatusCode expected;
  };
  const std::vector<Case> cases = {
      {WireOp::kWrite, 100, now - ms, StatusCode::kTimeout},
      {WireOp::kRead, 100, now - ms, StatusCode::kTimeout},
      {WireOp::kWrite, 8192, 0, StatusCode::kTimeout},
      {WireOp::kWrite, 16384, now + 60'000 * ms, StatusCode::kOk},  // the control
      {WireOp::kWrite, 32768, kNoDeadline, StatusCode::kOk},
  };
  std::vector<uint8_t> payload(4096, 0x33);
  uint64_t id = 0;
  for (const Case& c : cases) {
    RequestHeader h;
    h.op = c.op;
    h.request_id = ++id;
    h.remote_addr = Addr(remote_.data() + c.offset);
    h.length = payload.size();
    h.incarnation = kTargetIncarnation;
    h.generation = kGeneration;
    h.deadline = c.deadline;
    if (c.op == WireOp::kWrite) h.payload_crc = Crc32c(payload.data(), payload.size());
    std::array<uint8_t, kRequestHeaderSize> bytes{};
    EncodeRequestHeader(h, bytes);
    ASSERT_TRUE(client.SendAll(bytes.data(), bytes.size()));
    if (c.op == WireOp::kWrite) ASSERT_TRUE(client.SendAll(payload.data(), payload.size()));
  }
  id = 0;
  for (const Case& c : cases) {
    std::array<uint8_t, kResponseHeaderSize> bytes{};
    ASSERT_TRUE(RecvExactly(client, bytes.data(), bytes.size()));
    ResponseHeader r;
    ASSERT_TRUE(DecodeResponseHeader(bytes, &r).ok());
    EXPECT_EQ(r.request_id, ++id);
    EXPECT_EQ(r.code, c.expected) << id;
    EXPECT_EQ(r.payload_length, 0u);
    std::string message(r.message_length, '\0');
    ASSERT_TRUE(RecvExactly(client, message.data(), message.size()));
  }
  EXPECT_TRUE(
      std::all_of(remote_.begin(), remote_.begin() + 16384, [](uint8_t b) { return b == 0xAA; }));
  EXPECT_EQ(remote_[16384], 0x33);
  EXPECT_EQ(remote_[32768], 0x33);
  EXPECT_EQ(target_->stats().expired_accesses, 3u);
  EXPECT_EQ(target_ctx_.pin_calls(), 2u);
}

// A slice already past its deadline when its turn comes is never sent.
TEST_F(TcpTransportTest, SlicesPastTheirDeadlineAreNeverSent) {
  StartTarget();
  StartInitiator();
  std::shared_ptr<PeerLink> link = ConnectTo(endpoint_);
  ASSERT_NE(link, nullptr);
  std::vector<uint8_t> source(4096, 0x21);
  std::vector<uint8_t> sink(4096, 0);
  SliceBatch late(&initiator_ctx_);
  late.Add(Make(OpCode::kWrite, source.data(), 0, 4096))->deadline = Clock::now() - 1ms;
  late.Add(Make(OpCode::kRead, sink.data(), 0, 4096))->deadline = Clock::now();
  Run(*link, late, 2s);
  for (Slice* s : late.ptrs) {
    EXPECT_EQ(initiator_ctx_.StatusOf(s).code(), StatusCode::kTimeout)
        << initiator_ctx_.StatusOf(s);
  }
  // A later slice on the same link goes through; the late ones never reached the target.
  SliceBatch later(&initiator_ctx_);
  later.Add(Make(OpCode::kWrite, source.data(), 8192, 4096))->deadline = Clock::now() + 10s;
  Run(*link, later);
  ExpectAllOk(later);
  EXPECT_EQ(target_ctx_.pin_calls(), 1u);
  EXPECT_EQ(remote_[0], 0xAA);
  EXPECT_EQ(initiator_->stats().expired_slices, 2u);
  EXPECT_EQ(initiator_->stats().deadline_resets, 0u);
}

// A READ whose payload is still arriving at its deadline: the slice ends Timeout and nothing
// the target sends afterwards is written into local memory.
TEST_F(TcpTransportTest, ReadPayloadAfterTheDeadlineNeverReachesLocalMemory) {
  uint16_t port = 0;
  RawSocket listener = RawSocket::ListenLoopback(&port);
  ASSERT_GE(listener.fd(), 0);
  constexpr size_t kSize = 64 * 1024;
  Mutex mu;
  CondVar cv;
  bool slice_done = false;
  std::thread fake_target([&] {
    RawSocket peer = listener.Accept(5s);
    if (!AnswerHello(peer)) return;
    std::array<uint8_t, kRequestHeaderSize> request{};
    if (!RecvExactly(peer, request.data(), request.size())) return;
    RequestHeader h;
    if (!DecodeRequestHeader(request, &h).ok()) return;
    std::array<uint8_t, kResponseHeaderSize> reply{};
    ResponseHeader r;
    r.request_id = h.request_id;
    r.payload_length = h.length;
    EncodeResponseHeader(r, reply);
    std::vector<uint8_t> payload(kSize, 0x77);
    (void)peer.SendAll(reply.data(), reply.size());
    (void)peer.SendAll(payload.data(), kSize / 2);  // half, before the deadline
    {
      MutexLock lock(mu);
      const auto until = Clock::now() + 5s;
      while (!slice_done && Clock::now() < until) (void)cv.WaitUntil(mu, until);
    }
    (void)peer.SendAll(payload.data() + kSize / 2, kSize / 2);  // the rest, too late
    char byte = 0;
    (void)peer.RecvSome(&byte, 1, 5s);  // until the initiator's reset
  });
  StartInitiator();
  std::shared_ptr<PeerLink> link = ConnectTo("127.0.0.1:" + std::to_string(port));
  ASSERT_NE(link, nullptr);
  std::vector<uint8_t> sink(kSize, 0);
  SliceBatch batch(&initiator_ctx_);
  batch.Add(Make(OpCode::kRead, sink.data(), 0, kSize))->deadline = Clock::now() + 300ms;
  Run(*link, batch, 5s);
  {
    MutexLock lock(mu);
    slice_done = true;
    cv.NotifyAll();
  }
  fake_target.join();  // it sent the rest and saw the connection go
  EXPECT_EQ(initiator_ctx_.StatusOf(batch.ptrs[0]).code(), StatusCode::kTimeout);
  EXPECT_TRUE(std::all_of(sink.begin() + kSize / 2, sink.end(), [](uint8_t b) { return b == 0; }));
  EXPECT_EQ(initiator_->stats().deadline_resets, 1u);
}
}  // namespace
}  // namespace ferry::tcp
