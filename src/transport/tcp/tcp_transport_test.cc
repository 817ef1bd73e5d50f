// TcpTransport over real sockets on 127.0.0.1: data movement, access checks, validation and
// loopback numbers. Failure handling is in tcp_transport_fault_test.cc.
#include "transport/tcp/tcp_transport.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <iostream>
#include <thread>
#include <vector>

#include "transport/tcp/tcp_transport_fixture.h"

namespace ferry::tcp {
namespace {

TEST_F(TcpTransportTest, DescribesItselfAndKeepsLifecycleRules) {
  TcpTransport tcp(Options());
  EXPECT_EQ(tcp.name(), "tcp");
  EXPECT_TRUE(tcp.capabilities().reaches_other_hosts);
  EXPECT_FALSE(tcp.capabilities().reaches_device_memory);
  EXPECT_TRUE(tcp.capabilities().stages_device_memory);
  Result<std::string> key =
      tcp.RegisterMemory(Addr(remote_.data()), 64, Location::Cpu(), MemoryAccess::kRemote);
  ASSERT_TRUE(key.ok());
  EXPECT_TRUE(key->empty());
  // Device memory is registered (stages_device_memory): its target stages every access to it
  // through the context (IsStagedAddress), never touching the address.
  EXPECT_TRUE(tcp.RegisterMemory(1, 64, Location::Cuda(0), MemoryAccess::kRemote).ok());
  EXPECT_TRUE(tcp.UnregisterMemory(Addr(remote_.data()), 64).ok());
  EXPECT_EQ(tcp.OnExchange("x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tcp.Connect(SegmentDesc{}).status().code(), StatusCode::kBusy);

  Result<std::string> endpoint = tcp.Start(&target_ctx_, {"a", "127.0.0.1"});
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  EXPECT_EQ(endpoint->rfind("127.0.0.1:", 0), 0u) << *endpoint;
  EXPECT_EQ(tcp.Start(&target_ctx_, {"a", "127.0.0.1"}).status().code(), StatusCode::kBusy);
  tcp.Stop();
  tcp.Stop();
  EXPECT_EQ(tcp.Start(&target_ctx_, {"a", "127.0.0.1"}).status().code(), StatusCode::kBusy);

  TcpTransportOptions bad = Options();
  bad.connections_per_peer = 0;
  TcpTransport invalid(bad);
  EXPECT_EQ(invalid.Start(&target_ctx_, {"a", "127.0.0.1"}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(TcpTransportTest, ConnectNamesThePeerWhenItsEndpointIsMissingOrMalformed) {
  StartInitiator();
  SegmentDesc desc;
  desc.name = "bob";
  Result<std::shared_ptr<PeerLink>> missing = initiator_->Connect(desc);
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("bob"), std::string::npos);
  for (const char* bad : {"nonsense", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:70000", ":80"}) {
    desc.transports["tcp"] = bad;
    Result<std::shared_ptr<PeerLink>> link = initiator_->Connect(desc);
    EXPECT_EQ(link.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(link.status().message().find("bob"), std::string::npos) << link.status();
  }
}

TEST_F(TcpTransportTest, WritesThenReadsBackOddSizesAndAlignments) {
  StartTarget();
  StartInitiator();
  std::shared_ptr<PeerLink> link = ConnectTo(endpoint_);
  ASSERT_NE(link, nullptr);
  const std::vector<std::pair<size_t, size_t>> cases = {// {length, remote offset}
                                                        {1, 1},
                                                        {4095, 4099},
                                                        {64 * 1024 + 3, 2 * kMiB + 7},
                                                        {8 * kMiB, 16 * kMiB + 13}};
  std::vector<std::vector<uint8_t>> sources;
  std::vector<std::vector<uint8_t>> sinks;
  SliceBatch writes(&initiator_ctx_);
  SliceBatch reads(&initiator_ctx_);
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto [length, offset] = cases[i];
    sources.emplace_back(length + 3);
    Fill(sources.back().data() + 3, length, static_cast<uint32_t>(i + 1));
    sinks.emplace_back(length + 5, 0);
    writes.Add(Make(OpCode::kWrite, sources.back().data() + 3, offset, length));
    reads.Add(Make(OpCode::kRead, sinks.back().data() + 5, offset, length));
  }
  Run(*link, writes);
  ExpectAllOk(writes);
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto [length, offset] = cases[i];
    EXPECT_EQ(std::memcmp(remote_.data() + offset, sources[i].data() + 3, length), 0) << i;
    EXPECT_EQ(remote_[offset - 1], 0xAA) << i;       // nothing before the range...
    EXPECT_EQ(remote_[offset + length], 0xAA) << i;  // ...or after it
  }
  Run(*link, reads);
  ExpectAllOk(reads);
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(std::memcmp(sinks[i].data() + 5, sources[i].data() + 3, cases[i].first), 0) << i;
  }
  // One pin per access, every one released.
  EXPECT_TRUE(target_ctx_.WaitNoPins(2s));
  EXPECT_EQ(target_ctx_.pin_calls(), 2 * cases.size());
  EXPECT_EQ(initiator_ctx_.duplicate_completions(), 0u);
}

// stripe_size groups consecutive slices of one Submit on a connection until they hold that many
// bytes: a batch of small slices stays on one connection, while a large request, cut by the
// engine into 256 KiB slices, spreads over the pool (connections open lazily, on their slot's
// first slice, so connections_opened counts the connections that carried slices). Every slice
// goes whole (one pin each) and lands intact. stripe_size must be a multiple of 4096.
TEST_F(TcpTransportTest, ALargeRequestSpreadsOverTheConnectionsAndSmallSlicesStayTogether) {
  for (const uint64_t bad_size : {uint64_t{0}, uint64_t{4096 + 512}}) {
    TcpTransportOptions bad = Options();
    bad.stripe_size = bad_size;
    TcpTransport invalid(bad);
    const Status status = invalid.Start(&target_ctx_, {"a", "127.0.0.1"}).status();
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << bad_size;
    EXPECT_NE(status.message().find("stripe_size"), std::string::npos) << status;
  }
  TcpTransportOptions o = Options();
  o.connections_per_peer = 4;
  o.stripe_size = kMiB;
  StartTarget();
  StartInitiator(o);
  std::shared_ptr<PeerLink> link = ConnectTo(endpoint_);
  ASSERT_NE(link, nullptr);
  // 16 slices of 4 KiB (64 KiB, under one stripe): one run, one connection.
  std::vector<uint8_t> small(64 * 1024);
  Fill(small.data(), small.size(), 5);
  SliceBatch smalls(&initiator_ctx_);
  for (size_t i = 0; i < 16; ++i) {
    smalls.Add(Make(OpCode::kWrite, small.data() + i * 4096, i * 4096, 4096));
  }
  Run(*link, smalls);
  ExpectAllOk(smalls);
  EXPECT_EQ(std::memcmp(remote_.data(), small.data(), small.size()), 0);
  EXPECT_EQ(initiator_->stats().connections_opened, 1u);
  // 4 MiB in 256 KiB slices: four runs of 1 MiB, one per connection.
  constexpr size_t kSlice = 256 * 1024;
  constexpr size_t kLength = 4 * kMiB;
  constexpr uint64_t kAt = 5 * kMiB + 7;
  std::vector<uint8_t> source(kLength);
  Fill(source.data(), source.size(), 23);
  std::vector<uint8_t> sink(kLength, 0);
  SliceBatch write(&initiator_ctx_);
  SliceBatch read(&initiator_ctx_);
  for (size_t at = 0; at < kLength; at += kSlice) {
    write.Add(Make(OpCode::kWrite, source.data() + at, kAt + at, kSlice));
    read.Add(Make(OpCode::kRead, sink.data() + at, kAt + at, kSlice));
  }
  Run(*link, write);
  ExpectAllOk(write);
  EXPECT_EQ(initiator_->stats().connections_opened, 4u);
  EXPECT_EQ(target_->stats().connections_accepted, 4u);
  EXPECT_EQ(std::memcmp(remote_.data() + kAt, source.data(), kLength), 0);
  EXPECT_EQ(remote_[kAt - 1], 0xAA);
  EXPECT_EQ(remote_[kAt + kLength], 0xAA);
  Run(*link, read);
  ExpectAllOk(read);
  EXPECT_EQ(sink, source);
  EXPECT_TRUE(target_ctx_.WaitNoPins(2s));
  EXPECT_EQ(target_ctx_.pin_calls(), smalls.ptrs.size() + 2 * write.ptrs.size());
  EXPECT_EQ(initiator_ctx_.duplicate_completions(), 0u);
}

TEST_F(TcpTransportTest, ManySmallSlicesFromSeveralThreads) {
  StartTarget();
  StartInitiator();
  std::shared_ptr<PeerLink> link = ConnectTo(endpoint_);
  ASSERT_NE(link, nullptr);
  constexpr size_t kThreads = 4;
  constexpr size_t kPerThread = 512;
  constexpr size_t kSize = 4096;
  std::vector<uint8_t> source(kThreads * kPerThread * kSize);
  Fill(source.data(), source.size(), 7);
  std::vector<SliceBatch> batches;
  for (size_t t = 0; t < kThreads; ++t) batches.emplace_back(&initiator_ctx_);
  std::atomic<int> submit_errors{0};
  std::vector<std::thread> threads;
  for (size_t t = 0; t < kThreads; ++t) {
    for (size_t i = 0; i < kPerThread; ++i) {
      const size_t offset = (t * kPerThread + i) * kSize;
      batches[t].Add(Make(OpCode::kWrite, source.data() + offset, offset + 1, kSize));
    }
    threads.emplace_back([&, t] {
      std::span<Slice* const> all(batches[t].ptrs);
      size_t oldest = 0;  // this thread's oldest slice not yet seen complete
      for (size_t at = 0; at < all.size();) {
        const size_t n = std::min<size_t>(32, all.size() - at);
        Status s = initiator_->Submit(*link, all.subspan(at, n));
        if (s.code() == StatusCode::kAgain) {
          // The queue is full: one of ours completing frees a place (or another thread's).
          if (oldest < at && !initiator_ctx_.WaitAll({all[oldest++]}, 5s)) ++submit_errors;
          if (oldest >= at) std::this_thread::yield();
          continue;
        }
        if (!s.ok()) ++submit_errors;
        at += n;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(submit_errors.load(), 0);
  for (auto& batch : batches) {
    ASSERT_TRUE(initiator_ctx_.WaitAll(batch.ptrs, 20s));
    ExpectAllOk(batch);
  }
  EXPECT_EQ(std::memcmp(remote_.data() + 1, source.data(), source.size()), 0);
  EXPECT_EQ(initiator_ctx_.duplicate_completions(), 0u);
  EXPECT_TRUE(target_ctx_.WaitNoPins(2s));
}

TEST_F(TcpTransportTest, RejectedAccessesWriteNothingAndKeepTheConnectionInStep) {
  TcpTransportOptions one = Options();
  one.connections_per_peer = 1;  // every request below shares one pipelined connection
  StartTarget();
  StartInitiator(one);
  std::vector<uint8_t> unregistered(8192, 0x55);
  std::vector<uint8_t> private_region(8192, 0x66);
  target_ctx_.AddRegion(private_region.data(), private_region.size(), kGeneration,
                        /*remote_accessible=*/false);
  std::shared_ptr<PeerLink> link = ConnectTo(endpoint_);
  ASSERT_NE(link, nullptr);
  std::vector<uint8_t> source(64 * 1024);
  Fill(source.data(), source.size(), 3);
  std::vector<uint8_t> sink(4096, 0);

  SliceBatch batch(&initiator_ctx_);
  Slice* out_of_range = batch.Add(Make(OpCode::kWrite, source.data(), kRemoteSize - 10, 4096));
  Slice* old_generation = batch.Add(Make(OpCode::kWrite, source.data(), 0, 64 * 1024));
  old_generation->remote_generation = kGeneration - 1;
  Slice* old_incarnation = batch.Add(Make(OpCode::kWrite, source.data(), 4096, 4096));
  old_incarnation->peer_incarnation = kTargetIncarnation + 1;
  Slice* nowhere = batch.Add(Make(OpCode::kWrite, source.data(), 0, 4096));
  nowhere->remote_addr = Addr(unregistered.data());
  Slice* not_remote = batch.Add(Make(OpCode::kWrite, source.data(), 0, 4096));
  not_remote->remote_addr = Addr(private_region.data());
  Slice* stale_read = batch.Add(Make(OpCode::kRead, sink.data(), 0, 4096));
  stale_read->remote_generation = kGeneration + 1;
  Slice* good = batch.Add(Make(OpCode::kWrite, source.data(), 8 * kMiB, 4096));
  Run(*link, batch);

  EXPECT_EQ(initiator_ctx_.StatusOf(out_of_range).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(initiator_ctx_.StatusOf(old_generation).code(), StatusCode::kStale);
  EXPECT_EQ(initiator_ctx_.StatusOf(old_incarnation).code(), StatusCode::kStale);
  EXPECT_EQ(initiator_ctx_.StatusOf(nowhere).code(), StatusCode::kNotFound);
  EXPECT_EQ(initiator_ctx_.StatusOf(not_remote).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(initiator_ctx_.StatusOf(stale_read).code(), StatusCode::kStale);
  EXPECT_TRUE(initiator_ctx_.StatusOf(good).ok()) << initiator_ctx_.StatusOf(good);

  // Only the good write landed.
  for (size_t i = 0; i < remote_.size(); ++i) {
    const bool in_good = i >= 8 * kMiB && i < 8 * kMiB + 4096;
    if (!in_good && remote_[i] != 0xAA) {
      ADD_FAILURE() << "remote byte " << i << " changed";
      break;
    }
  }
  EXPECT_EQ(std::memcmp(remote_.data() + 8 * kMiB, source.data(), 4096), 0);
  EXPECT_TRUE(
      std::all_of(unregistered.begin(), unregistered.end(), [](uint8_t b) { return b == 0x55; }));
  EXPECT_TRUE(std::all_of(private_region.begin(), private_region.end(),
                          [](uint8_t b) { return b == 0x66; }));
  EXPECT_TRUE(std::all_of(sink.begin(), sink.end(), [](uint8_t b) { return b == 0; }));
  EXPECT_EQ(target_->stats().rejected_accesses, 6u);
  EXPECT_EQ(target_->stats().bad_frames, 0u);
  EXPECT_EQ(initiator_->stats().connections_opened, 1u);
  EXPECT_TRUE(target_ctx_.WaitNoPins(2s));
  EXPECT_EQ(target_ctx_.pin_calls(), 7u);
}

TEST_F(TcpTransportTest, RejectsBadSubmissionsWithoutQueuingAnything) {
  StartTarget();
  StartInitiator();
  std::shared_ptr<PeerLink> link = ConnectTo(endpoint_);
  ASSERT_NE(link, nullptr);
  std::vector<uint8_t> source(16);
  SliceBatch batch(&initiator_ctx_);
  batch.Add(Make(OpCode::kWrite, source.data(), 0, 16));
  batch.Add(Make(OpCode::kWrite, source.data(), 0, (uint64_t{1} << 30) + 1));  // over 1 GiB
  EXPECT_EQ(initiator_->Submit(*link, batch.ptrs).code(), StatusCode::kInvalidArgument);
  Slice* null_slice = nullptr;
  EXPECT_EQ(initiator_->Submit(*link, std::span<Slice* const>(&null_slice, 1)).code(),
            StatusCode::kInvalidArgument);
  class ForeignLink final : public PeerLink {};
  ForeignLink foreign;
  EXPECT_EQ(initiator_->Submit(foreign, std::span<Slice* const>(batch.ptrs).first(1)).code(),
            StatusCode::kInvalidArgument);
  // A good slice submitted afterwards completes; the refused ones never do.
  SliceBatch good(&initiator_ctx_);
  good.Add(Make(OpCode::kWrite, source.data(), 0, 16));
  Run(*link, good);
  ExpectAllOk(good);
  EXPECT_EQ(initiator_ctx_.completions(), 1u);
  EXPECT_EQ(target_ctx_.pin_calls(), 1u);
}

TEST_F(TcpTransportTest, IdleConnectionsCloseAfterIdleTimeoutAndReopenOnUse) {
  TcpTransportOptions o = Options();
  o.connections_per_peer = 1;
  o.idle_timeout = 200ms;
  StartTarget();
  StartInitiator(o);
  const size_t baseline_fds = testing::OpenFdCount();
  std::shared_ptr<PeerLink> link = ConnectTo(endpoint_);
  ASSERT_NE(link, nullptr);
  std::vector<uint8_t> source(4096, 7);
  SliceBatch first(&initiator_ctx_);
  first.Add(Make(OpCode::kWrite, source.data(), 0, 4096));
  Run(*link, first);
  ExpectAllOk(first);
  const auto finished = Clock::now();
  EXPECT_EQ(testing::OpenFdCount(), baseline_fds + 2);  // both ends of the connection
  ASSERT_TRUE(WaitFor([&] { return initiator_->stats().idle_closes == 1; }, 5s));
  EXPECT_GE(Clock::now() - finished, 190ms);  // not before idle_timeout
  // Both ends close: the target sees the initiator's close.
  EXPECT_TRUE(WaitFor([&] { return testing::OpenFdCount() == baseline_fds; }, 5s))
      << testing::OpenFdCount() << " fds open, " << baseline_fds << " before";
  // The link opens a new connection on next use.
  SliceBatch second(&initiator_ctx_);
  second.Add(Make(OpCode::kWrite, source.data(), 4096, 4096));
  Run(*link, second);
  ExpectAllOk(second);
  EXPECT_EQ(initiator_->stats().connections_opened, 2u);
  EXPECT_EQ(initiator_->stats().connections_failed, 0u);
}

// Links the engine drops (closeSegment, a peer restart) leave no connection behind, whether
// they were idle or had slices in flight.
TEST_F(TcpTransportTest, DroppedLinksReleaseEveryDescriptor) {
  TcpTransportOptions two = Options();
  two.connections_per_peer = 2;
  two.stripe_size = 4096;  // each slice its own run: both connections carry some
  StartTarget();
  StartInitiator(two);
  std::vector<uint8_t> source(64 * 1024);
  Fill(source.data(), source.size(), 13);
  std::vector<uint8_t> sink(64 * 1024);
  const size_t baseline_fds = testing::OpenFdCount();
  constexpr int kLinks = 200;
  std::vector<std::unique_ptr<SliceBatch>> batches;
  for (int i = 0; i < kLinks; ++i) {
    std::shared_ptr<PeerLink> link = ConnectTo(endpoint_);
    ASSERT_NE(link, nullptr);
    auto& batch = batches.emplace_back(std::make_unique<SliceBatch>(&initiator_ctx_));
    // Disjoint target ranges: the slices of a link may run at once on its two connections.
    const uint64_t at = static_cast<uint64_t>(i) * 64 * 1024;
    const uint64_t read_at = static_cast<uint64_t>(kLinks + i) * 64 * 1024;
    batch->Add(Make(OpCode::kWrite, source.data(), at, 32 * 1024));
    batch->Add(Make(OpCode::kRead, sink.data(), read_at, sink.size()));
    batch->Add(Make(OpCode::kWrite, source.data(), at + 32 * 1024, 4096));
    ASSERT_TRUE(initiator_->Submit(*link, batch->ptrs).ok());
    // Every other link is dropped with its slices still on their way.
    if (i % 2 == 0) ASSERT_TRUE(initiator_ctx_.WaitAll(batch->ptrs, 10s));
  }
  for (auto& batch : batches) {
    ASSERT_TRUE(initiator_ctx_.WaitAll(batch->ptrs, 10s));
    for (Slice* s : batch->ptrs) {
      const Status status = initiator_ctx_.StatusOf(s);
      EXPECT_TRUE(status.ok() || status.code() == StatusCode::kCanceled) << status;
    }
  }
  EXPECT_TRUE(WaitFor([&] { return testing::OpenFdCount() == baseline_fds; }, 5s))
      << testing::OpenFdCount() << " fds open, " << baseline_fds << " before";
  EXPECT_GE(initiator_->stats().connections_opened, static_cast<uint64_t>(kLinks));
  EXPECT_EQ(initiator_->stats().connections_failed, 0u);
  EXPECT_TRUE(target_ctx_.WaitNoPins(2s));
  EXPECT_EQ(initiator_ctx_.duplicate_completions(), 0u);
}

// Regression: a response left in the initiator's read-ahead buffer at the end of a read turn,
// with nothing more arriving, used to wait for a readiness event that never came. One byte per
// turn makes every connection yield after each read and write, on both sides.
TEST_F(TcpTransportTest, ConnectionsThatYieldEveryTurnNeverStall) {
  TcpTransportOptions tiny = Options(1000ms);
  tiny.bytes_per_turn = 1;
  StartTarget(tiny);
  tiny.connections_per_peer = 1;
  StartInitiator(tiny);
  std::shared_ptr<PeerLink> link = ConnectTo(endpoint_);
  ASSERT_NE(link, nullptr);
  std::vector<uint8_t> source(2 * kMiB);
  Fill(source.data(), source.size(), 21);
  std::vector<uint8_t> sink(2 * kMiB, 0);
  SliceBatch batch(&initiator_ctx_);
  uint64_t at = 0;
  for (int i = 0; i < 12; ++i) {
    const uint64_t length = i % 3 == 0 ? 256 * 1024 + i : 3000 + i;  // direct and buffered
    batch.Add(Make(OpCode::kWrite, source.data() + at, at, length));
    batch.Add(Make(OpCode::kRead, sink.data() + at, at, length));
    at += length;
  }
  Slice* stale = batch.Add(Make(OpCode::kRead, sink.data() + at, at, 100));  // with a message
  stale->remote_generation = kGeneration + 1;
  batch.Add(Make(OpCode::kRead, sink.data() + at, at, 10));  // the last answer is tiny
  Run(*link, batch, 5s);
  for (Slice* s : batch.ptrs) {
    const Status status = initiator_ctx_.StatusOf(s);
    EXPECT_EQ(status.ok(), s != stale) << status;
  }
  EXPECT_EQ(std::memcmp(sink.data(), source.data(), at), 0);
}

// Not a pass/fail check: loopback numbers for the report.
TEST_F(TcpTransportTest, MeasuresLoopbackThroughput) {
  StartTarget();
  StartInitiator();
  std::shared_ptr<PeerLink> link = ConnectTo(endpoint_);
  ASSERT_NE(link, nullptr);
  const size_t rounds = kSanitized ? 4 : 16;
  std::vector<uint8_t> local(kRemoteSize);
  Fill(local.data(), local.size(), 5);
  for (OpCode op : {OpCode::kWrite, OpCode::kRead}) {
    const auto start = Clock::now();
    for (size_t r = 0; r < rounds; ++r) {
      SliceBatch batch(&initiator_ctx_);
      for (size_t i = 0; i < kRemoteSize / kMiB; ++i) {
        batch.Add(Make(op, local.data() + i * kMiB, i * kMiB, kMiB));
      }
      Run(*link, batch);
      ExpectAllOk(batch);
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::cout << "[ info ] tcp loopback " << (op == OpCode::kWrite ? "WRITE" : "READ")
              << " 1 MiB slices: " << (rounds * kRemoteSize) / seconds / 1e9 << " GB/s\n";
  }
  constexpr size_t kSmall = 4096;
  const size_t ops = kSanitized ? 4096 : 32768;
  for (OpCode op : {OpCode::kWrite, OpCode::kRead}) {
    const auto start = Clock::now();
    for (size_t done = 0; done < ops; done += 1024) {
      SliceBatch batch(&initiator_ctx_);
      for (size_t i = 0; i < 1024; ++i) {
        batch.Add(Make(op, local.data() + i * kSmall, i * kSmall, kSmall));
      }
      Run(*link, batch);
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::cout << "[ info ] tcp loopback " << (op == OpCode::kWrite ? "WRITE" : "READ")
              << " 4 KiB slices: " << ops / seconds / 1e3 << " k ops/s\n";
  }
}

}  // namespace
}  // namespace ferry::tcp
