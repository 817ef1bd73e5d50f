// Two real processes over loopback: this test's engine (the initiator) and ferry-test-peer
// (the target), with P2P handshake, etcd, redis and HTTP metadata, over tcp, and over shm
// with P2P handshake.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstring>
#include <thread>

#include "ferry/transfer_engine.h"
#include "peer_client.h"
#include "test_servers.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;
using testing::ChildProcess;
using testing::Fnv;
using testing::Peer;
using testing::TempDir;

enum class Meta { kP2P, kEtcd, kRedis, kHttp };

std::string MetaName(Meta m) {
  switch (m) {
    case Meta::kP2P:
      return "p2p";
    case Meta::kEtcd:
      return "etcd";
    case Meta::kRedis:
      return "redis";
    case Meta::kHttp:
      return "http";
  }
  return "?";
}

// How one run of the suite is set up: the metadata store and the initiator's one transport
// (the peer installs every transport it can).
struct Setup {
  Meta meta;
  const char* transport;
};

class EngineTest : public ::testing::TestWithParam<Setup> {
 protected:
  static constexpr size_t kPeerBytes = 8 << 20;

  void SetUp() override {
    auto dir = TempDir::Create("engine");
    ASSERT_TRUE(dir.ok());
    dir_ = std::make_unique<TempDir>(std::move(dir).value());
    switch (GetParam().meta) {
      case Meta::kP2P:
        connection_ = "P2PHANDSHAKE";
        break;
      case Meta::kEtcd: {
        auto s = testing::EtcdServer::Start();
        ASSERT_TRUE(s.ok()) << s.status();
        connection_ = "etcd://" + (*s)->endpoint();
        server_ = std::move(s).value();
        break;
      }
      case Meta::kRedis: {
        auto s = testing::RedisServer::Start();
        ASSERT_TRUE(s.ok()) << s.status();
        connection_ = "redis://" + (*s)->endpoint();
        server_ = std::move(s).value();
        break;
      }
      case Meta::kHttp: {
        auto s = testing::MetadataServer::Start();
        ASSERT_TRUE(s.ok()) << s.status();
        connection_ = "http://" + (*s)->endpoint() + "/metadata";
        server_ = std::move(s).value();
        break;
      }
    }
    EngineOptions options;
    options.metadata_conn = connection_;
    options.task_timeout = 8s;
    options.request_timeout = 2s;
    options.slice_size = 64 << 10;
    options.transports = {GetParam().transport};
    ASSERT_TRUE(engine_.init(options).ok());
    local_.assign(kPeerBytes, 0);
    ASSERT_TRUE(engine_.registerLocalMemory(local_.data(), local_.size()).ok());
  }

  // Starts a peer; `port` 0 picks one. The segment name is host:port for P2P, fixed otherwise.
  Peer StartPeer(uint16_t port) {
    Peer peer;
    const Meta meta = GetParam().meta;
    const std::string name = meta == Meta::kP2P ? "" : "peer-" + MetaName(meta);
    auto child = ChildProcess::SpawnPiped({testing::BinDir() + "/ferry-test-peer", connection_,
                                           name, std::to_string(port), std::to_string(kPeerBytes)},
                                          dir_->path() + "/peer.log");
    EXPECT_TRUE(child.ok()) << child.status();
    if (!child.ok()) return peer;
    peer.process = std::move(child).value();
    Result<std::string> ready = peer.process->ReadLine(20s);
    EXPECT_TRUE(ready.ok()) << ready.status() << "\n" << peer.process->LogTail();
    if (!ready.ok()) return peer;
    EXPECT_TRUE(peer.ParseReady(*ready)) << *ready;
    return peer;
  }

  // Runs `requests` as one batch; returns the batch summary once every task ended (bounded).
  BatchStatus Run(const std::vector<TransferRequest>& requests,
                  const NotifyMessage* notify = nullptr) {
    Result<BatchId> batch = engine_.allocateBatchID(requests.size());
    EXPECT_TRUE(batch.ok());
    Status s = notify ? engine_.submitTransferWithNotify(*batch, requests, *notify)
                      : engine_.submitTransfer(*batch, requests);
    EXPECT_TRUE(s.ok()) << s;
    BatchStatus summary;
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    do {
      summary = *engine_.getBatchTransferStatus(*batch);
      if (summary.state != TransferState::kPending) break;
      std::this_thread::sleep_for(1ms);
    } while (std::chrono::steady_clock::now() < deadline);
    for (int i = 0; i < 2000 && !engine_.freeBatchID(*batch).ok(); ++i) {
      std::this_thread::sleep_for(5ms);
    }
    return summary;
  }

  TransferRequest Req(OpCode op, size_t local_off, SegmentId target, uint64_t remote,
                      uint64_t len) {
    return TransferRequest{op, local_.data() + local_off, target, remote, len};
  }

  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<testing::TestServer> server_;
  std::string connection_;
  TransferEngine engine_;
  std::vector<unsigned char> local_;
};

TEST_P(EngineTest, WritesReadsAndVerifies) {
  Peer peer = StartPeer(0);
  ASSERT_TRUE(peer.process);
  Result<SegmentId> target = engine_.openSegment(peer.name);
  ASSERT_TRUE(target.ok()) << target.status();
  const size_t n = 3 << 20;
  for (size_t i = 0; i < n; ++i) local_[i] = static_cast<unsigned char>(i * 7 + 3);
  BatchStatus w = Run({Req(OpCode::kWrite, 0, *target, peer.addr + 5, n - 5),
                       Req(OpCode::kWrite, 0, *target, peer.addr, 1)});
  EXPECT_EQ(w.state, TransferState::kCompleted) << w.first_error;
  EXPECT_EQ(peer.Sum(5, n - 5), Fnv(local_.data(), n - 5));
  std::memset(local_.data() + (4 << 20), 0, n);
  BatchStatus r = Run({Req(OpCode::kRead, 4 << 20, *target, peer.addr + 5, n - 5)});
  EXPECT_EQ(r.state, TransferState::kCompleted) << r.first_error;
  EXPECT_EQ(Fnv(local_.data() + (4 << 20), n - 5), Fnv(local_.data(), n - 5));
  EXPECT_TRUE(engine_.probeSegment(*target).ok());
}

TEST_P(EngineTest, NotificationArrivesAfterItsData) {
  Peer peer = StartPeer(0);
  ASSERT_TRUE(peer.process);
  Result<SegmentId> target = engine_.openSegment(peer.name);
  ASSERT_TRUE(target.ok()) << target.status();
  std::memset(local_.data(), 0xab, 1 << 20);
  NotifyMessage note{"", "kv-ready"};
  BatchStatus w = Run({Req(OpCode::kWrite, 0, *target, peer.addr, 1 << 20)}, &note);
  ASSERT_EQ(w.state, TransferState::kCompleted) << w.first_error;
  // Poll the peer: when the notification shows, the data must already be there.
  std::string seen;
  for (int i = 0; i < 200 && seen.empty(); ++i) {
    for (std::string line = peer.Ask("notifies"); line != "end";
         line = *peer.process->ReadLine(5s)) {
      ASSERT_EQ(line.rfind("notify ", 0), 0u) << line;
      seen = line;
    }
    if (seen.empty()) std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(peer.Sum(0, 1 << 20), Fnv(local_.data(), 1 << 20));
  EXPECT_EQ(seen, "notify " + engine_.localSegmentName() + " kv-ready");
}

TEST_P(EngineTest, OutOfRangeAndPrivateAccessesAreRejectedAndWriteNothing) {
  Peer peer = StartPeer(0);
  ASSERT_TRUE(peer.process);
  Result<SegmentId> target = engine_.openSegment(peer.name);
  ASSERT_TRUE(target.ok());
  std::memset(local_.data(), 0xee, 8192);
  const uint64_t before = peer.Sum(0, peer.length);
  BatchStatus past_end = Run({Req(OpCode::kWrite, 0, *target, peer.addr + peer.length - 10, 100)});
  EXPECT_EQ(past_end.state, TransferState::kFailed);
  EXPECT_EQ(past_end.first_error.code(), StatusCode::kInvalidArgument) << past_end.first_error;
  BatchStatus secret = Run({Req(OpCode::kWrite, 0, *target, peer.private_addr, 4096)});
  EXPECT_EQ(secret.state, TransferState::kFailed);
  EXPECT_EQ(secret.first_error.code(), StatusCode::kPermissionDenied) << secret.first_error;
  // An unregistered local buffer is refused before anything moves.
  std::vector<unsigned char> unregistered(64);
  Result<BatchId> batch = engine_.allocateBatchID(1);
  ASSERT_TRUE(
      engine_
          .submitTransfer(*batch, {{OpCode::kWrite, unregistered.data(), *target, peer.addr, 64}})
          .ok());
  for (int i = 0;
       i < 1000 && engine_.getBatchTransferStatus(*batch)->state == TransferState::kPending; ++i) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(engine_.getTransferStatus(*batch, 0)->state, TransferState::kFailed);
  EXPECT_EQ(peer.Sum(0, peer.length), before);
  EXPECT_EQ(peer.Ask("byte 0"), "byte 0");
}

TEST_P(EngineTest, NoByteLandsAfterUnregisterReturns) {
  Peer peer = StartPeer(0);
  ASSERT_TRUE(peer.process);
  Result<SegmentId> target = engine_.openSegment(peer.name);
  ASSERT_TRUE(target.ok());
  std::memset(local_.data(), 0x77, 1 << 20);
  std::atomic<bool> stop{false};
  std::atomic<int> completed{0};
  std::thread writer([&] {
    while (!stop) {
      BatchStatus s = Run({Req(OpCode::kWrite, 0, *target, peer.addr, 1 << 20)});
      if (s.state == TransferState::kCompleted) completed++;
    }
  });
  while (completed < 3) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(peer.Ask("unregister"), "ok");
  // Zero the peer's buffer through a fresh view: after unregister, it must stay as it is.
  const uint64_t after_unregister = peer.Sum(0, peer.length);
  std::this_thread::sleep_for(500ms);
  stop = true;
  writer.join();
  EXPECT_EQ(peer.Sum(0, peer.length), after_unregister);
  BatchStatus late = Run({Req(OpCode::kWrite, 0, *target, peer.addr, 4096)});
  EXPECT_EQ(late.state, TransferState::kFailed);
}

TEST_P(EngineTest, PeerKilledMidBatchFailsWithinTheDeadline) {
  Peer peer = StartPeer(0);
  ASSERT_TRUE(peer.process);
  Result<SegmentId> target = engine_.openSegment(peer.name);
  ASSERT_TRUE(target.ok());
  std::vector<TransferRequest> many;
  for (int i = 0; i < 64; ++i) {
    many.push_back(Req(OpCode::kWrite, 0, *target, peer.addr, 4 << 20));
  }
  Result<BatchId> batch = engine_.allocateBatchID(many.size());
  ASSERT_TRUE(engine_.submitTransfer(*batch, many).ok());
  peer.process->Kill();
  const auto start = std::chrono::steady_clock::now();
  BatchStatus s;
  do {
    s = *engine_.getBatchTransferStatus(*batch);
    std::this_thread::sleep_for(5ms);
  } while (s.state == TransferState::kPending && std::chrono::steady_clock::now() - start < 20s);
  EXPECT_NE(s.state, TransferState::kPending);
  EXPECT_NE(s.state, TransferState::kCompleted);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);  // task_timeout is 8 s
}

TEST_P(EngineTest, PeerRestartedUnderTheSameNameIsDetectedAndRefreshed) {
  Result<uint16_t> port = testing::PickFreePort();
  ASSERT_TRUE(port.ok());
  Peer first = StartPeer(*port);
  ASSERT_TRUE(first.process);
  Result<SegmentId> target = engine_.openSegment(first.name);
  ASSERT_TRUE(target.ok());
  std::memset(local_.data(), 0x11, 4096);
  ASSERT_EQ(Run({Req(OpCode::kWrite, 0, *target, first.addr, 4096)}).state,
            TransferState::kCompleted);
  first.process->Kill();

  Peer second = StartPeer(*port);
  ASSERT_TRUE(second.process);
  ASSERT_EQ(second.name, first.name);
  // The cached descriptor is the old incarnation's. The write planned against it is refused as
  // STALE by the new process, the descriptor is refreshed once, and the retry lands.
  std::memset(local_.data(), 0x22, 4096);
  const uint64_t offset = 8192;
  BatchStatus s = Run({Req(OpCode::kWrite, 0, *target, second.addr + offset, 4096)});
  EXPECT_EQ(s.state, TransferState::kCompleted) << s.first_error;
  EXPECT_EQ(second.Sum(offset, 4096), Fnv(local_.data(), 4096));
  // Nothing planned against the old descriptor landed elsewhere in the new process.
  std::vector<unsigned char> zeros(second.length - 4096 - offset, 0);
  EXPECT_EQ(second.Sum(offset + 4096, zeros.size()), Fnv(zeros.data(), zeros.size()));
  EXPECT_EQ(second.Sum(0, offset), Fnv(zeros.data(), offset));
}

INSTANTIATE_TEST_SUITE_P(Setups, EngineTest,
                         ::testing::Values(Setup{Meta::kP2P, "tcp"}, Setup{Meta::kEtcd, "tcp"},
                                           Setup{Meta::kRedis, "tcp"}, Setup{Meta::kHttp, "tcp"},
                                           Setup{Meta::kP2P, "shm"}),
                         [](const auto& info) {
                           return MetaName(info.param.meta) + "_" + info.param.transport;
                         });

}  // namespace
}  // namespace ferry
