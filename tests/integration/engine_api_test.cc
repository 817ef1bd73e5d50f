// The calls a Mooncake-style Python module needs (getSegmentBuffers, cancelBatch,
// completionFd), against a real target process (ferry-test-peer) over tcp with P2P handshake.
// The peer is named by a bare host ("127.0.0.1"): the engine appends its RPC port.
#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

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

constexpr size_t kPeerBytes = 4 << 20;
constexpr size_t kTaskBytes = 64 << 10;

// The count the engine added to its completion eventfd since the last read (0: none), after
// waiting at most `wait` for it to become readable.
uint64_t TakeCompletions(int fd, std::chrono::milliseconds wait) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(wait.count())) != 1) return 0;
  uint64_t count = 0;
  return ::read(fd, &count, sizeof(count)) == sizeof(count) ? count : 0;
}

// True when a TCP connection of this network namespace to 127.0.0.1:`port` is established
// (/proc/net/tcp: "sl local rem st ...", addresses as HEXIP:HEXPORT).
bool ConnectedTo(uint16_t port) {
  std::ifstream table("/proc/net/tcp");
  std::string line;
  std::getline(table, line);  // header
  char wanted[16];
  std::snprintf(wanted, sizeof(wanted), "0100007F:%04X", port);
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    if (remote == wanted && state == "01") return true;
  }
  return false;
}

class EngineApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = TempDir::Create("engine-api");
    ASSERT_TRUE(dir.ok());
    dir_ = std::make_unique<TempDir>(std::move(dir).value());
    EngineOptions options;
    options.metadata_conn = "P2PHANDSHAKE";
    options.transports = {"tcp"};
    options.task_timeout = 20s;  // far beyond every bound below: nothing here may end by it
    options.request_timeout = 3s;
    ASSERT_TRUE(engine_.init(options).ok());
    local_.assign(kPeerBytes, 0);
    ASSERT_TRUE(engine_.registerLocalMemory(local_.data(), local_.size()).ok());

    auto child = ChildProcess::SpawnPiped({testing::BinDir() + "/ferry-test-peer", "P2PHANDSHAKE",
                                           "127.0.0.1", "0", std::to_string(kPeerBytes)},
                                          dir_->path() + "/peer.log");
    ASSERT_TRUE(child.ok()) << child.status();
    peer_.process = std::move(child).value();
    Result<std::string> ready = peer_.process->ReadLine(20s);
    ASSERT_TRUE(ready.ok()) << ready.status() << "\n" << peer_.process->LogTail();
    ASSERT_TRUE(peer_.ParseReady(*ready)) << *ready;
  }

  void TearDown() override {
    if (peer_.process != nullptr) ::kill(peer_.process->pid(), SIGCONT);  // never left frozen
  }

  std::vector<TransferRequest> Writes(SegmentId target, size_t count, uint64_t remote_offset) {
    std::vector<TransferRequest> out;
    for (size_t i = 0; i < count; ++i) {
      out.push_back({OpCode::kWrite, local_.data() + i * kTaskBytes, target,
                     peer_.addr + remote_offset + i * kTaskBytes, kTaskBytes});
    }
    return out;
  }

  std::unique_ptr<TempDir> dir_;
  TransferEngine engine_;
  std::vector<unsigned char> local_;
  Peer peer_;
};

TEST_F(EngineApiTest, BareHostNameBuffersFiguresAndCompletionFd) {
  // A bare host as the P2P name: the peer appended its RPC port, and that name resolves.
  ASSERT_EQ(peer_.name.rfind("127.0.0.1:", 0), 0u) << peer_.name;
  ASSERT_GT(peer_.name.size(), std::string("127.0.0.1:").size());
  Result<SegmentId> target = engine_.openSegment(peer_.name);
  ASSERT_TRUE(target.ok()) << target.status();

  // The remote-accessible buffer only (the peer's private one is registered, not published
  // for access), as the peer printed it.
  Result<std::vector<SegmentBuffer>> buffers = engine_.getSegmentBuffers(*target);
  ASSERT_TRUE(buffers.ok()) << buffers.status();
  ASSERT_EQ(buffers->size(), 1u);
  const SegmentBuffer first = buffers->front();
  EXPECT_EQ(first.addr, peer_.addr);
  EXPECT_EQ(first.length, peer_.length);
  EXPECT_EQ(first.location.rfind("cpu", 0), 0u) << first.location;
  EXPECT_GT(first.generation, 0u);
  EXPECT_NE(std::find(first.transports.begin(), first.transports.end(), "tcp"),
            first.transports.end());
  EXPECT_EQ(engine_.getSegmentBuffers(*target + 1000).status().code(), StatusCode::kNotFound);

  // A batch ends: the completion fd counts it once; the figures are ordered.
  const int fd = engine_.completionFd();
  ASSERT_GE(fd, 0);
  EXPECT_EQ(TakeCompletions(fd, 0ms), 0u);
  for (size_t i = 0; i < 3 * kTaskBytes; ++i) local_[i] = static_cast<unsigned char>(i * 5 + 1);
  Result<BatchId> batch = engine_.allocateBatchID(3);
  ASSERT_TRUE(batch.ok());
  ASSERT_TRUE(engine_.submitTransfer(*batch, Writes(*target, 3, 0)).ok());
  EXPECT_EQ(TakeCompletions(fd, 10s), 1u);
  Result<BatchStatus> done = engine_.getBatchTransferStatus(*batch);
  ASSERT_TRUE(done.ok());
  ASSERT_EQ(done->state, TransferState::kCompleted) << done->first_error;
  EXPECT_EQ(peer_.Sum(0, 3 * kTaskBytes), Fnv(local_.data(), 3 * kTaskBytes));
  for (size_t i = 0; i < 3; ++i) {
    Result<TransferStatus> t = engine_.getTransferStatus(*batch, i);
    ASSERT_TRUE(t.ok());
    EXPECT_NE(t->submitted_at.time_since_epoch().count(), 0);
    EXPECT_LE(t->submitted_at, t->started_at);
    EXPECT_LE(t->started_at, t->ended_at);
    EXPECT_EQ(t->retries, 0u);
    EXPECT_EQ(t->transport, "tcp");
  }
  // Cancelling a batch that already ended is Ok and changes nothing (no second count either).
  EXPECT_TRUE(engine_.cancelBatch(*batch).ok());
  EXPECT_EQ(engine_.getTransferStatus(*batch, 2)->state, TransferState::kCompleted);
  EXPECT_EQ(engine_.getBatchTransferStatus(*batch)->state, TransferState::kCompleted);
  EXPECT_EQ(TakeCompletions(fd, 0ms), 0u);
  EXPECT_TRUE(engine_.freeBatchID(*batch).ok());
  EXPECT_EQ(engine_.cancelBatch(*batch).code(), StatusCode::kNotFound);

  // Re-registration moves the generation the buffers report (after a refresh of the cache).
  ASSERT_EQ(peer_.Ask("unregister"), "ok");
  ASSERT_EQ(peer_.Ask("register"), "ok");
  ASSERT_TRUE(engine_.syncSegmentCache(peer_.name).ok());
  buffers = engine_.getSegmentBuffers(*target);
  ASSERT_TRUE(buffers.ok()) << buffers.status();
  ASSERT_EQ(buffers->size(), 1u);
  EXPECT_EQ(buffers->front().addr, first.addr);
  EXPECT_GT(buffers->front().generation, first.generation);
}

// Tasks to a frozen peer that wait on it (here, for its descriptor) end CANCELED at once; after
// the peer resumes, none of their bytes lands; a fresh batch then works.
TEST_F(EngineApiTest, CancelEndsWaitingTasksAndNothingLandsAfterResume) {
  Result<SegmentId> target = engine_.openSegment(peer_.name);
  ASSERT_TRUE(target.ok()) << target.status();
  std::vector<unsigned char> zeros(8 * kTaskBytes, 0);
  ASSERT_EQ(peer_.Sum(0, zeros.size()), Fnv(zeros.data(), zeros.size()));

  // Forget the descriptor, so the next plan must fetch it from the peer, then freeze the peer.
  ASSERT_TRUE(engine_.closeSegment(*target).ok());
  ASSERT_TRUE(testing::FreezeProcess(peer_.process->pid(), 10s));
  std::memset(local_.data(), 0xc5, 8 * kTaskBytes);
  const int fd = engine_.completionFd();
  Result<BatchId> batch = engine_.allocateBatchID(8);
  ASSERT_TRUE(batch.ok());
  ASSERT_TRUE(engine_.submitTransfer(*batch, Writes(*target, 8, 0)).ok());
  // The first task's plan is under way: its descriptor fetch reached the frozen peer (the
  // engine's earlier RPC connection went with closeSegment). Cancelled now, it must not hand
  // its slices over when that fetch returns.
  const uint16_t rpc_port =
      static_cast<uint16_t>(std::stoul(peer_.name.substr(peer_.name.rfind(':') + 1)));
  ASSERT_TRUE(testing::WaitFor([&] { return ConnectedTo(rpc_port); }, 5s));
  ASSERT_TRUE(engine_.cancelBatch(*batch).ok());
  // Well within request_timeout (3 s), so not the fetch giving up, and far from the deadline.
  Result<BatchStatus> canceled = engine_.waitBatch(*batch, 1500ms);
  ASSERT_TRUE(canceled.ok()) << canceled.status();
  EXPECT_EQ(canceled->completed, 0u);
  EXPECT_EQ(canceled->failed, 8u);
  EXPECT_EQ(canceled->first_error.code(), StatusCode::kCanceled) << canceled->first_error;
  for (size_t i = 0; i < 8; ++i) {
    Result<TransferStatus> t = engine_.getTransferStatus(*batch, i);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->state, TransferState::kCanceled) << i << ": " << t->reason;
    EXPECT_EQ(t->reason.code(), StatusCode::kCanceled) << t->reason;
    EXPECT_EQ(t->started_at.time_since_epoch().count(), 0) << "went to a transport";
    EXPECT_LE(t->submitted_at, t->ended_at);
  }
  EXPECT_EQ(TakeCompletions(fd, 1s), 1u);
  EXPECT_TRUE(engine_.freeBatchID(*batch).ok()) << "every task ended: frees at once";

  // Resume. The fresh batch below waits for its descriptor behind the canceled tasks' work on
  // the peer's queue (closeSegment again), so when it completed, their work has run.
  ASSERT_EQ(::kill(peer_.process->pid(), SIGCONT), 0);
  ASSERT_TRUE(engine_.closeSegment(*target).ok());
  for (size_t i = 0; i < kTaskBytes; ++i) local_[i] = static_cast<unsigned char>(i * 3 + 7);
  Result<BatchId> fresh = engine_.allocateBatchID(1);
  ASSERT_TRUE(fresh.ok());
  std::vector<TransferRequest> one = Writes(*target, 1, 16 * kTaskBytes);
  ASSERT_TRUE(engine_.submitTransfer(*fresh, one).ok());
  Result<BatchStatus> landed = engine_.waitBatch(*fresh, 10s);
  ASSERT_TRUE(landed.ok()) << landed.status();
  EXPECT_EQ(landed->state, TransferState::kCompleted) << landed->first_error;
  EXPECT_EQ(peer_.Sum(16 * kTaskBytes, kTaskBytes), Fnv(local_.data(), kTaskBytes));
  EXPECT_EQ(peer_.Sum(0, zeros.size()), Fnv(zeros.data(), zeros.size()))
      << "bytes of a canceled write landed";
  EXPECT_TRUE(engine_.freeBatchID(*fresh).ok());
}

// cancelBatch racing submitTransfer (plans on the submitting thread and on the peer's worker):
// every task ends COMPLETED or CANCELED, and every CANCELED one carries a Canceled reason (a plan
// starting after the cancel ended its task must not clear the reason).
TEST_F(EngineApiTest, CancelRacingSubmitLeavesEveryCanceledTaskItsReason) {
  Result<SegmentId> target = engine_.openSegment(peer_.name);
  ASSERT_TRUE(target.ok()) << target.status();
  constexpr size_t kTasks = 512;
  constexpr size_t kBlock = 4096;
  std::vector<TransferRequest> requests;
  for (size_t i = 0; i < kTasks; ++i) {
    const size_t offset = (i % 64) * kBlock;
    requests.push_back(
        {OpCode::kWrite, local_.data() + offset, *target, peer_.addr + offset, kBlock});
  }
  size_t canceled_total = 0;
  for (int round = 0; round < 4; ++round) {
    ASSERT_TRUE(engine_.closeSegment(*target).ok());  // not cached: the plans defer and fetch
    Result<BatchId> batch = engine_.allocateBatchID(kTasks);
    ASSERT_TRUE(batch.ok());
    std::atomic<bool> submitted{false};
    std::thread canceller([&] {
      // Cancels throughout the submission, then once after it.
      bool last = false;
      while (!last) {
        last = submitted.load();
        engine_.cancelBatch(*batch).IgnoreError();
      }
    });
    Status s = engine_.submitTransfer(*batch, requests);
    submitted.store(true);
    canceller.join();
    ASSERT_TRUE(s.ok()) << s;
    Result<BatchStatus> ended = engine_.waitBatch(*batch, 10s);
    ASSERT_TRUE(ended.ok()) << ended.status();
    for (size_t i = 0; i < kTasks; ++i) {
      Result<TransferStatus> t = engine_.getTransferStatus(*batch, i);
      ASSERT_TRUE(t.ok()) << t.status();
      if (t->state == TransferState::kCompleted) continue;
      ASSERT_EQ(t->state, TransferState::kCanceled)
          << "round " << round << " task " << i << ": " << t->reason;
      ASSERT_EQ(t->reason.code(), StatusCode::kCanceled)
          << "round " << round << " task " << i << ": " << t->reason;
      ++canceled_total;
    }
    EXPECT_TRUE(engine_.freeBatchID(*batch).ok());
  }
  // The cancels overlap the submissions: some tasks are still waiting for their descriptor.
  EXPECT_GT(canceled_total, 0u);
}

}  // namespace
}  // namespace ferry
