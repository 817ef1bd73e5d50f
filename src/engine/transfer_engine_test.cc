// The facade's contract, with engines in this process (the two-process flows are in
// tests/integration/engine_test.cc).
#include "ferry/transfer_engine.h"

#include <gtest/gtest.h>

#include <poll.h>
#include <unistd.h>

#include <cstring>
#include <thread>

namespace ferry {
namespace {

using namespace std::chrono_literals;

BatchStatus WaitBatch(TransferEngine& engine, BatchId batch) {
  Result<BatchStatus> s = engine.waitBatch(batch, 5s);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : BatchStatus{};
}

TEST(TransferEngineTest, InitValidatesItsOptions) {
  TransferEngine engine;
  EXPECT_EQ(engine.init("zookeeper://h:1", "", "127.0.0.1", 0).code(),
            StatusCode::kInvalidArgument);
  // With P2PHANDSHAKE the name is the address peers use: a port other than the RPC port, an
  // empty port, text that is no host (an unbracketed "a:b" is a host and a port), brackets
  // around something that is not IPv6, and a wildcard host (nobody can dial it) are refused (a
  // bare host gets the port: P2PNameTakesTheRpcPort).
  for (const char* bad : {"127.0.0.1:1", "not a host", "host:port", "[::1]:1", "abc:def",
                          "1.2.3.4:", "[::1]:", "1:2:3", "[abc]", "[1.2.3.4]", "[::1"}) {
    TransferEngine p2p_named;
    Status s = p2p_named.init("P2PHANDSHAKE", bad, "127.0.0.1", 0);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad << ": " << s;
  }
  for (const char* wildcard : {"0.0.0.0", "::", "[::]", "0:0::0", "*"}) {
    TransferEngine p2p_named;
    Status s = p2p_named.init("P2PHANDSHAKE", wildcard, "127.0.0.1", 0);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << wildcard << ": " << s;
    EXPECT_NE(s.message().find("advertise_host"), std::string::npos) << s;
  }
  // Every call but init() fails cleanly, naming the cause, before init() and after it failed.
  Status s;
  TransferEngine bad_transport;
  EngineOptions options;
  options.transports = {"carrier-pigeon"};
  s = bad_transport.init(options);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("tcp"), std::string::npos) << s;
  TransferEngine never_started;
  for (TransferEngine* e : {&never_started, &bad_transport}) {
    char byte = 0;
    Status opened = e->openSegment("127.0.0.1:1").status();
    EXPECT_EQ(opened.code(), StatusCode::kInvalidArgument) << opened;
    EXPECT_NE(opened.message().find("init()"), std::string::npos) << opened;
    EXPECT_EQ(e->registerLocalMemory(&byte, 1).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(e->unregisterLocalMemory(&byte).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(e->allocateManagedBuffer(4096).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(e->allocateBatchID(1).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(e->submitTransfer(1, {}).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(e->waitBatch(1, 1ms).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(e->cancelBatch(1).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(e->sendNotify(1, {"", "x"}).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(e->rpcPort(), 0);
    EXPECT_EQ(e->completionFd(), -1);
    EXPECT_EQ(e->localSegmentName(), "");
    EXPECT_TRUE(e->getNotifies().empty());
  }
  TransferEngine ok;
  ASSERT_TRUE(ok.init("P2PHANDSHAKE", "", "127.0.0.1", 0).ok());
  EXPECT_EQ(ok.init("P2PHANDSHAKE", "", "127.0.0.1", 0).code(), StatusCode::kBusy);
  EXPECT_EQ(ok.localSegmentName(), "127.0.0.1:" + std::to_string(ok.rpcPort()));
}

// With P2PHANDSHAKE a bare host is a name: the engine appends its RPC port (as Mooncake does),
// and a peer reaches it by that name.
TEST(TransferEngineTest, P2PNameTakesTheRpcPort) {
  for (const std::string host : {"127.0.0.1", "::1", "[::1]", "fe80::1"}) {
    TransferEngine engine;
    Status s = engine.init("P2PHANDSHAKE", host, "127.0.0.1", 0);
    ASSERT_TRUE(s.ok()) << host << ": " << s;
    std::string bare = "[" + host + "]";
    if (host == "127.0.0.1" || host.front() == '[') bare = host;
    EXPECT_EQ(engine.localSegmentName(), bare + ":" + std::to_string(engine.rpcPort()));
  }
  TransferEngine target, initiator;
  ASSERT_TRUE(target.init("P2PHANDSHAKE", "localhost", "127.0.0.1", 0).ok());
  ASSERT_EQ(target.localSegmentName(), "localhost:" + std::to_string(target.rpcPort()));
  ASSERT_TRUE(initiator.init("P2PHANDSHAKE", "", "127.0.0.1", 0).ok());
  std::vector<unsigned char> remote(4096, 0), local(4096, 3);
  ASSERT_TRUE(target.registerLocalMemory(remote.data(), remote.size()).ok());
  ASSERT_TRUE(initiator.registerLocalMemory(local.data(), local.size()).ok());
  Result<SegmentId> seg = initiator.openSegment(target.localSegmentName());
  ASSERT_TRUE(seg.ok()) << seg.status();
  Result<BatchId> batch = initiator.allocateBatchID(1);
  ASSERT_TRUE(initiator
                  .submitTransfer(*batch, {{OpCode::kWrite, local.data(), *seg,
                                            reinterpret_cast<uint64_t>(remote.data()), 4096}})
                  .ok());
  EXPECT_EQ(WaitBatch(initiator, *batch).state, TransferState::kCompleted);
  EXPECT_EQ(remote[4095], 3);
  EXPECT_TRUE(initiator.freeBatchID(*batch).ok());
}

TEST(TransferEngineTest, ManagedBuffersAreRegisteredSharedMemory) {
  TransferEngine engine;
  ASSERT_TRUE(engine.init("P2PHANDSHAKE", "", "127.0.0.1", 0).ok());
  Result<void*> buffer = engine.allocateManagedBuffer(3 << 20);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  std::memset(*buffer, 0x42, 3 << 20);
  // Registered already: a second registration of it overlaps.
  EXPECT_EQ(engine.registerLocalMemory(*buffer, 4096).code(), StatusCode::kOverlap);
  EXPECT_EQ(engine.allocateManagedBuffer(0).status().code(), StatusCode::kInvalidArgument);
  // Device memory: Unavailable without a CUDA device (tests/gpu allocates it where there is one);
  // a device kind without an index is not one device.
  EXPECT_EQ(engine.allocateManagedBuffer(4096, "cuda:0").status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(engine.allocateManagedBuffer(4096, "cuda").status().code(),
            StatusCode::kInvalidArgument);
  Status no_window = engine.allocateManagedBuffer(4096, "cxl").status();
  EXPECT_EQ(no_window.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_window.message().find("cxl"), std::string::npos) << no_window;
  std::vector<char> plain(4096);
  EXPECT_EQ(engine.freeManagedBuffer(plain.data()).code(), StatusCode::kNotFound);
  EXPECT_TRUE(engine.freeManagedBuffer(*buffer).ok());
  EXPECT_EQ(engine.freeManagedBuffer(*buffer).code(), StatusCode::kNotFound);

  TransferEngine tcp_only;
  EngineOptions options;
  options.transports = {"tcp"};
  ASSERT_TRUE(tcp_only.init(options).ok());
  EXPECT_EQ(tcp_only.allocateManagedBuffer(4096).status().code(), StatusCode::kInvalidArgument);
}

TEST(TransferEngineTest, RegistrationRulesAndOverlapCheck) {
  TransferEngine engine;
  ASSERT_TRUE(engine.init("P2PHANDSHAKE", "", "127.0.0.1", 0).ok());
  std::vector<char> buf(1 << 16);
  EXPECT_TRUE(engine.checkOverlap(buf.data(), buf.size()).ok());
  ASSERT_TRUE(engine.registerLocalMemory(buf.data(), 4096, "cpu:0").ok());
  EXPECT_EQ(engine.registerLocalMemory(buf.data(), 4096).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(engine.registerLocalMemory(buf.data() + 100, 8192).code(), StatusCode::kOverlap);
  EXPECT_EQ(engine.checkOverlap(buf.data() + 10, 10).code(), StatusCode::kOverlap);
  EXPECT_EQ(engine.registerLocalMemory(buf.data() + 8192, 10, "gpu:0").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.registerLocalMemory(nullptr, 10).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(
      engine.registerLocalMemoryBatch({{buf.data() + 8192, 1024}, {buf.data() + 16384, 1024}})
          .ok());
  EXPECT_TRUE(engine.unregisterLocalMemoryBatch({buf.data() + 8192, buf.data() + 16384}).ok());
  EXPECT_TRUE(engine.unregisterLocalMemory(buf.data()).ok());
  EXPECT_EQ(engine.unregisterLocalMemory(buf.data()).code(), StatusCode::kNotFound);
}

// EngineOptions::max_segment_buffers bounds a descriptor on both sides: registrations that
// would pass it are refused whole, and a peer's descriptor over it is refused when opened.
TEST(TransferEngineTest, MaxSegmentBuffersBoundsRegistrationAndPeerDescriptors) {
  EngineOptions options;
  options.transports = {"tcp"};
  options.max_segment_buffers = 0;
  TransferEngine zero;
  EXPECT_EQ(zero.init(options).code(), StatusCode::kInvalidArgument);

  options.max_segment_buffers = 4;
  TransferEngine big;
  ASSERT_TRUE(big.init(options).ok());
  std::vector<char> buf(1 << 16);
  std::vector<BufferEntry> five;
  for (size_t i = 0; i < 5; ++i) five.push_back({buf.data() + i * 4096, 1024});
  Status s = big.registerLocalMemoryBatch(five);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("over the limit of 4 (EngineOptions::max_segment_buffers)"),
            std::string::npos)
      << s;
  EXPECT_TRUE(big.checkOverlap(buf.data(), buf.size()).ok());  // nothing of the batch stayed
  five.pop_back();
  ASSERT_TRUE(big.registerLocalMemoryBatch(five).ok());
  EXPECT_EQ(big.registerLocalMemory(buf.data() + 8 * 4096, 1024).code(),
            StatusCode::kInvalidArgument);

  options.max_segment_buffers = 3;
  TransferEngine small;
  ASSERT_TRUE(small.init(options).ok());
  Result<SegmentId> opened = small.openSegment(big.localSegmentName());
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find(
                "buffers: 4 entries, over the limit of 3 (EngineOptions::max_segment_buffers)"),
            std::string::npos)
      << opened.status();
  options.max_segment_buffers = 4;
  TransferEngine fits;
  ASSERT_TRUE(fits.init(options).ok());
  EXPECT_TRUE(fits.openSegment(big.localSegmentName()).ok());
}

TEST(TransferEngineTest, OwnSegmentIsACheckedMemcpy) {
  TransferEngine engine;
  ASSERT_TRUE(engine.init("P2PHANDSHAKE", "", "127.0.0.1", 0).ok());
  std::vector<unsigned char> a(4096, 1), b(4096, 2);
  ASSERT_TRUE(engine.registerLocalMemory(a.data(), a.size()).ok());
  ASSERT_TRUE(engine.registerLocalMemory(b.data(), b.size()).ok());
  Result<SegmentId> self = engine.openSegment(engine.localSegmentName());
  ASSERT_TRUE(self.ok()) << self.status();
  Result<BatchId> batch = engine.allocateBatchID(2);
  ASSERT_TRUE(
      engine
          .submitTransfer(
              *batch,
              {{OpCode::kWrite, a.data(), *self, reinterpret_cast<uint64_t>(b.data()) + 96, 100},
               {OpCode::kWrite, a.data(), *self, reinterpret_cast<uint64_t>(b.data()) + 4000, 200}})
          .ok());
  BatchStatus s = WaitBatch(engine, *batch);
  EXPECT_EQ(s.completed, 1u);
  EXPECT_EQ(s.failed, 1u);  // the second leaves b
  EXPECT_EQ(b[96], 1);
  EXPECT_EQ(b[95], 2);
  EXPECT_EQ(b[4000], 2);  // nothing written by the refused one
  Result<TransferStatus> second = engine.getTransferStatus(*batch, 1);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->state, TransferState::kFailed);
  EXPECT_FALSE(second->reason.ok());
  EXPECT_EQ(engine.getTransferStatus(*batch, 2).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(engine.freeBatchID(*batch).ok());
  EXPECT_EQ(engine.freeBatchID(*batch).code(), StatusCode::kNotFound);
}

// The completion eventfd counts each time a batch's last open task ends: once per batch, again
// for a batch that got more tasks after it ended; cancelling an ended batch adds nothing.
TEST(TransferEngineTest, CompletionFdCountsEndedBatches) {
  TransferEngine engine;
  EXPECT_EQ(engine.completionFd(), -1);  // before init
  ASSERT_TRUE(engine.init("P2PHANDSHAKE", "", "127.0.0.1", 0).ok());
  const int fd = engine.completionFd();
  ASSERT_GE(fd, 0);
  auto take = [fd](std::chrono::milliseconds wait) -> uint64_t {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(wait.count())) != 1) return 0;
    uint64_t count = 0;
    return ::read(fd, &count, sizeof(count)) == sizeof(count) ? count : 0;
  };
  EXPECT_EQ(take(0ms), 0u);
  std::vector<unsigned char> a(4096, 1), b(4096, 2);
  ASSERT_TRUE(engine.registerLocalMemory(a.data(), a.size()).ok());
  ASSERT_TRUE(engine.registerLocalMemory(b.data(), b.size()).ok());
  Result<SegmentId> self = engine.openSegment(engine.localSegmentName());
  ASSERT_TRUE(self.ok()) << self.status();
  const TransferRequest copy{OpCode::kWrite, a.data(), *self, reinterpret_cast<uint64_t>(b.data()),
                             64};
  Result<BatchId> first = engine.allocateBatchID(3);
  Result<BatchId> second = engine.allocateBatchID(1);
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_TRUE(engine.submitTransfer(*first, {copy, copy}).ok());
  ASSERT_TRUE(engine.submitTransfer(*second, {copy}).ok());
  EXPECT_EQ(WaitBatch(engine, *first).state, TransferState::kCompleted);
  EXPECT_EQ(WaitBatch(engine, *second).state, TransferState::kCompleted);
  EXPECT_EQ(take(5s), 2u);
  EXPECT_TRUE(engine.cancelBatch(*second).ok());  // ended: changes nothing
  EXPECT_EQ(engine.getBatchTransferStatus(*second)->state, TransferState::kCompleted);
  ASSERT_TRUE(engine.submitTransfer(*first, {copy}).ok());
  EXPECT_EQ(WaitBatch(engine, *first).state, TransferState::kCompleted);
  EXPECT_EQ(take(5s), 1u);
  EXPECT_EQ(take(0ms), 0u);
  // A local copy never goes to a transport.
  Result<TransferStatus> t = engine.getTransferStatus(*first, 2);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->started_at.time_since_epoch().count(), 0);
  EXPECT_LE(t->submitted_at, t->ended_at);
  EXPECT_NE(t->ended_at.time_since_epoch().count(), 0);
  EXPECT_EQ(engine.cancelBatch(9999).code(), StatusCode::kNotFound);
}

TEST(TransferEngineTest, BatchesAreBoundedAndRequestsCopied) {
  TransferEngine target, initiator;
  ASSERT_TRUE(target.init("P2PHANDSHAKE", "", "127.0.0.1", 0).ok());
  ASSERT_TRUE(initiator.init("P2PHANDSHAKE", "", "127.0.0.1", 0).ok());
  std::vector<unsigned char> remote(1 << 20, 0), local(1 << 20, 9);
  ASSERT_TRUE(target.registerLocalMemory(remote.data(), remote.size()).ok());
  ASSERT_TRUE(initiator.registerLocalMemory(local.data(), local.size()).ok());
  Result<SegmentId> seg = initiator.openSegment(target.localSegmentName());
  ASSERT_TRUE(seg.ok()) << seg.status();
  EXPECT_EQ(initiator.allocateBatchID(0).status().code(), StatusCode::kInvalidArgument);
  Result<BatchId> batch = initiator.allocateBatchID(2);
  {
    std::vector<TransferRequest> requests = {
        {OpCode::kWrite, local.data(), *seg, reinterpret_cast<uint64_t>(remote.data()), 1 << 19}};
    ASSERT_TRUE(initiator.submitTransfer(*batch, requests).ok());
  }  // the vector is gone; the engine kept a copy
  std::vector<TransferRequest> two(
      2, {OpCode::kWrite, local.data(), *seg, reinterpret_cast<uint64_t>(remote.data()), 16});
  EXPECT_EQ(initiator.submitTransfer(*batch, two).code(), StatusCode::kAgain);
  EXPECT_EQ(initiator.submitTransfer(9999, two).code(), StatusCode::kNotFound);
  BatchStatus s = WaitBatch(initiator, *batch);
  EXPECT_EQ(s.state, TransferState::kCompleted) << s.first_error;
  EXPECT_EQ(s.transferred_bytes, 1u << 19);
  EXPECT_EQ(remote[(1 << 19) - 1], 9);
  EXPECT_EQ(remote[1 << 19], 0);
  EXPECT_TRUE(initiator.freeBatchID(*batch).ok());
  Result<uint64_t> alive = initiator.probeSegment(*seg);
  EXPECT_TRUE(alive.ok()) << alive.status();
  EXPECT_TRUE(initiator.sendNotify(*seg, {"", "hello"}).ok());
  std::vector<NotifyMessage> got = target.getNotifies();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].name, initiator.localSegmentName());
  EXPECT_EQ(got[0].payload, "hello");
  EXPECT_TRUE(target.getNotifies().empty());
  EXPECT_TRUE(initiator.syncSegmentCache().ok());
  EXPECT_EQ(initiator.openSegment("127.0.0.1:1").status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ferry
