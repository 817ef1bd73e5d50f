// Two real processes over loopback: this test's engine (the initiator) and ferry-test-peer
// (the target), with P2P handshake, etcd, redis and HTTP metadata, over tcp, and over shm and
// rdma (libfabric tcp;ofi_rxm) with P2P handshake.
#include <gtest/gtest.h>

#include <signal.h>

#include <atomic>
#include <cinttypes>
#include <condition_variable>
#include <functional>
#include <mutex>
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
    if (GetParam().meta == Meta::kP2P) {
      connection_ = "P2PHANDSHAKE";
    } else {
      const testing::StoreKind kind = GetParam().meta == Meta::kEtcd    ? testing::StoreKind::kEtcd
                                      : GetParam().meta == Meta::kRedis ? testing::StoreKind::kRedis
                                                                        : testing::StoreKind::kHttp;
      Result<testing::RunningStore> store = testing::StartStore(kind);
      ASSERT_TRUE(store.ok()) << store.status();
      connection_ = store->connection;
      server_ = std::move(store->server);
    }
    EngineOptions options;
    options.metadata_conn = connection_;
    options.task_timeout = 8s;
    options.request_timeout = 2s;
    options.slice_size = 64 << 10;
    options.transports = {GetParam().transport};
    if (rdma()) options.rdma_provider = "tcp;ofi_rxm";
    Status init = engine_.init(options);
    if (rdma() && !init.ok()) GTEST_SKIP() << "no rdma here: " << init;
    ASSERT_TRUE(init.ok()) << init;
    local_.assign(kPeerBytes, 0);
    ASSERT_TRUE(engine_.registerLocalMemory(local_.data(), local_.size()).ok());
  }

  // Starts a peer; `port` 0 picks one. The segment name is host:port for P2P, fixed otherwise.
  Peer StartPeer(uint16_t port) {
    Peer peer;
    const Meta meta = GetParam().meta;
    const std::string name = meta == Meta::kP2P ? "" : "peer-" + MetaName(meta);
    std::vector<std::string> argv = {testing::BinDir() + "/ferry-test-peer", connection_, name,
                                     std::to_string(port), std::to_string(kPeerBytes)};
    if (rdma()) argv.insert(argv.begin(), {"/usr/bin/env", "FERRY_PEER_RDMA_PROVIDER=tcp;ofi_rxm"});
    auto child = ChildProcess::SpawnPiped(argv, dir_->path() + "/peer.log");
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
    Result<BatchStatus> summary = engine_.waitBatch(*batch, 30s);
    EXPECT_TRUE(summary.ok()) << summary.status();
    // Every task ended: the batch frees at once, whatever its transports still hold.
    Status freed = engine_.freeBatchID(*batch);
    EXPECT_TRUE(freed.ok()) << freed;
    return summary.ok() ? *summary : BatchStatus{};
  }

  static bool rdma() { return std::string(GetParam().transport) == "rdma"; }

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
  ASSERT_TRUE(engine_.waitBatch(*batch, 10s).ok());
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
  std::atomic<int> failed_after{0};  // writes that ended after unregister returned
  std::atomic<bool> unregistered{false};
  std::mutex mu;
  std::condition_variable changed;
  std::thread writer([&] {
    while (!stop) {
      const bool after = unregistered.load();
      BatchStatus s = Run({Req(OpCode::kWrite, 0, *target, peer.addr, 1 << 20)});
      std::lock_guard lock(mu);
      if (s.state == TransferState::kCompleted) completed++;
      if (after && s.state == TransferState::kFailed) failed_after++;
      changed.notify_all();
    }
  });
  auto wait_until = [&](const std::function<bool()>& done) {
    std::unique_lock lock(mu);
    return changed.wait_for(lock, 20s, done);
  };
  ASSERT_TRUE(wait_until([&] { return completed >= 3; }));
  ASSERT_EQ(peer.Ask("unregister"), "ok");
  unregistered = true;
  // Zero the peer's buffer through a fresh view: after unregister, it must stay as it is.
  const uint64_t after_unregister = peer.Sum(0, peer.length);
  // Writes keep coming; wait until several submitted after unregister have been refused.
  EXPECT_TRUE(wait_until([&] { return failed_after >= 3; }));
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
  Result<BatchStatus> s = engine_.waitBatch(*batch, 20s);
  ASSERT_TRUE(s.ok()) << s.status();
  if (rdma()) {
    // One-sided RMA over tcp;ofi_rxm cannot always tell a dead peer from a slow one: the
    // provider reports nothing, and the slices end at their deadline.
    EXPECT_NE(s->state, TransferState::kCompleted) << s->first_error;
    EXPECT_LT(std::chrono::steady_clock::now() - start, 9s);
  } else {
    // A dead peer is told apart from a slow one: FAILED, well before the 8 s deadline.
    EXPECT_EQ(s->state, TransferState::kFailed) << s->first_error;
    EXPECT_LT(std::chrono::steady_clock::now() - start, 8s);
  }
  EXPECT_TRUE(engine_.freeBatchID(*batch).ok());
}

TEST_P(EngineTest, RequestsPlannedForADeadProcessNeverLandInItsSuccessor) {
  // The target restarts on the same name, port and address (its buffer is mapped at a fixed
  // address, as a restarted worker re-creating its KV pool would). Writes planned against the
  // old incarnation must fail Stale, and not one of their bytes may land in the new process.
  Result<uint16_t> port = testing::PickFreePort();
  ASSERT_TRUE(port.ok());
  Peer first = StartPeer(*port);
  ASSERT_TRUE(first.process);
  Result<SegmentId> target = engine_.openSegment(first.name);
  ASSERT_TRUE(target.ok());
  std::memset(local_.data(), 0x11, 4096);
  ASSERT_EQ(Run({Req(OpCode::kWrite, 0, *target, first.addr, 4096)}).state,
            TransferState::kCompleted);

  // Freeze it, plan a batch against it, then replace it while those writes are on their way.
  ASSERT_TRUE(testing::FreezeProcess(first.process->pid(), 10s));
  std::memset(local_.data(), 0x5c, 4 << 20);
  std::vector<TransferRequest> planned;
  for (int i = 0; i < 64; ++i) {
    planned.push_back(Req(OpCode::kWrite, 0, *target, first.addr + i * (64 << 10), 64 << 10));
  }
  Result<BatchId> batch = engine_.allocateBatchID(planned.size());
  ASSERT_TRUE(engine_.submitTransfer(*batch, planned).ok());
  first.process->Kill();
  Peer second = StartPeer(*port);
  ASSERT_TRUE(second.process);
  ASSERT_EQ(second.name, first.name);
  ASSERT_EQ(second.addr, first.addr);
  Result<BatchStatus> old_plan = engine_.waitBatch(*batch, 30s);
  ASSERT_TRUE(old_plan.ok()) << old_plan.status();
  // shm pins a region it was granted before through the target's lease table, without asking
  // the target (README, "Same-host pins without a round trip"): a frozen process's leased
  // region stays writable, so these writes may complete into the first process before it is
  // killed. Whatever did not complete failed; none lands in the successor (checked below, and
  // the request planned against the cached descriptor must reach it and be refused Stale).
  const bool leased = std::string(GetParam().transport) == "shm";
  if (!leased) {
    EXPECT_EQ(old_plan->completed, 0u) << "a write planned for the dead process completed";
  }
  for (size_t i = 0; i < planned.size(); ++i) {
    Result<TransferStatus> t = engine_.getTransferStatus(*batch, i);
    ASSERT_TRUE(t.ok());
    if (leased && t->state == TransferState::kCompleted) continue;
    EXPECT_EQ(t->state, TransferState::kFailed) << i << ": " << t->reason;
  }
  EXPECT_TRUE(engine_.freeBatchID(*batch).ok());

  // A request planned against the cached (old) descriptor is refused as Stale, not re-aimed.
  std::memset(local_.data(), 0x22, 4096);
  const uint64_t offset = 8192;
  BatchStatus stale = Run({Req(OpCode::kWrite, 0, *target, second.addr + offset, 4096)});
  if (stale.state != TransferState::kCompleted) {  // a watching store may already have the new one
    EXPECT_EQ(stale.first_error.code(), StatusCode::kStale) << stale.first_error;
  }
  std::vector<unsigned char> zeros(second.length, 0);
  if (stale.state != TransferState::kCompleted) {
    EXPECT_EQ(second.Sum(0, second.length), Fnv(zeros.data(), zeros.size()));
  }
  // The cache was refreshed: the next request plans against the new process and lands.
  BatchStatus fresh = Run({Req(OpCode::kWrite, 0, *target, second.addr + offset, 4096)});
  EXPECT_EQ(fresh.state, TransferState::kCompleted) << fresh.first_error;
  EXPECT_EQ(second.Sum(offset, 4096), Fnv(local_.data(), 4096));
  // Nothing of the old plan (0x5c) landed anywhere else in the new process.
  EXPECT_EQ(second.Sum(offset + 4096, second.length - offset - 4096),
            Fnv(zeros.data(), second.length - offset - 4096));
  EXPECT_EQ(second.Sum(0, offset), Fnv(zeros.data(), offset));
}

TEST_P(EngineTest, ReRegisteredRegionFailsStaleThenTheNextRequestLands) {
  Peer peer = StartPeer(0);
  ASSERT_TRUE(peer.process);
  Result<SegmentId> target = engine_.openSegment(peer.name);
  ASSERT_TRUE(target.ok());
  std::memset(local_.data(), 0x31, 4096);
  ASSERT_EQ(Run({Req(OpCode::kWrite, 0, *target, peer.addr, 4096)}).state,
            TransferState::kCompleted);
  ASSERT_EQ(peer.Ask("unregister"), "ok");
  ASSERT_EQ(peer.Ask("register"), "ok");  // same range, a new generation
  std::memset(local_.data(), 0x32, 4096);
  BatchStatus s = Run({Req(OpCode::kWrite, 0, *target, peer.addr + 4096, 4096)});
  if (s.state != TransferState::kCompleted) {  // a watching store may have the new one already
    EXPECT_EQ(s.first_error.code(), StatusCode::kStale) << s.first_error;
    std::vector<unsigned char> zeros(4096, 0);
    EXPECT_EQ(peer.Sum(4096, 4096), Fnv(zeros.data(), 4096));
  }
  BatchStatus again = Run({Req(OpCode::kWrite, 0, *target, peer.addr + 4096, 4096)});
  EXPECT_EQ(again.state, TransferState::kCompleted) << again.first_error;
  EXPECT_EQ(peer.Sum(4096, 4096), Fnv(local_.data(), 4096));
}

INSTANTIATE_TEST_SUITE_P(Setups, EngineTest,
                         ::testing::Values(Setup{Meta::kP2P, "tcp"}, Setup{Meta::kEtcd, "tcp"},
                                           Setup{Meta::kRedis, "tcp"}, Setup{Meta::kHttp, "tcp"},
                                           Setup{Meta::kP2P, "shm"}, Setup{Meta::kP2P, "rdma"}),
                         [](const auto& info) {
                           return MetaName(info.param.meta) + "_" + info.param.transport;
                         });

}  // namespace
}  // namespace ferry
