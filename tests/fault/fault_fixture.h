// What the fault tests share: an initiator engine in this process, a ferry-test-peer target in
// another, a picture of what the target's buffer must hold, and one way to run a batch and see
// how each task ended.
//
// PeerImage is the check that nothing lands where it should not: the target's buffer is cut
// into lanes; a lane a completed write filled must hold exactly those bytes, a lane no task
// touched must hold what it held, and only a lane whose write failed may hold anything (a write
// that failed part way may have landed part of its bytes; the task's FAILED says so).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "ferry/transfer_engine.h"
#include "netns.h"
#include "peer_client.h"
#include "test_servers.h"

namespace ferry::fault {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

inline constexpr size_t kPeerBytes = 8 << 20;
inline constexpr size_t kLane = 512 << 10;
inline constexpr size_t kLanes = kPeerBytes / kLane;

inline double MillisSince(SteadyClock::time_point start) {
  return std::chrono::duration<double, std::milli>(SteadyClock::now() - start).count();
}

// A figure for tests/fault/README.md, printed so that it shows in the ctest output.
template <typename... Args>
void Figure(const char* format, Args... args) {
  std::printf("[fault figure] ");
  std::printf(format, args...);
  std::printf("\n");
  std::fflush(stdout);
}

// What the target's buffer should hold, lane by lane.
class PeerImage {
 public:
  PeerImage() : bytes_(kPeerBytes, 0), known_(kLanes, true) {}
  // A write of [offset, offset + n) completed with `data`.
  void Completed(uint64_t offset, const unsigned char* data, size_t n) {
    std::memcpy(bytes_.data() + offset, data, n);
    Mark(offset, n, true);
  }
  // A write of [offset, offset + n) failed: those lanes may hold anything from now on.
  void Failed(uint64_t offset, size_t n) { Mark(offset, n, false); }
  bool known(uint64_t offset) const { return known_[offset / kLane]; }
  const unsigned char* expected(uint64_t offset) const { return bytes_.data() + offset; }

  // "" when every known lane of the peer holds what it should; else which lanes do not.
  std::string Mismatches(testing::Peer& peer) const {
    std::string bad;
    for (size_t lane = 0; lane < kLanes; ++lane) {
      if (!known_[lane]) continue;
      const uint64_t want = testing::Fnv(bytes_.data() + lane * kLane, kLane);
      if (peer.Sum(lane * kLane, kLane) != want) bad += " " + std::to_string(lane);
    }
    return bad.empty() ? "" : "lanes holding bytes no completed write put there:" + bad;
  }

 private:
  void Mark(uint64_t offset, size_t n, bool known) {
    for (size_t lane = offset / kLane; lane * kLane < offset + n; ++lane) known_[lane] = known;
  }
  std::vector<unsigned char> bytes_;
  std::vector<bool> known_;
};

// Fills `n` bytes at `p` with a pattern no other call with another `seed` makes.
inline void Fill(unsigned char* p, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    p[i] = static_cast<unsigned char>(x >> 24);
  }
}

struct BatchResult {
  std::vector<TransferStatus> tasks;
  double ms = 0;    // from submit until waitBatch saw every task end
  bool ended = false;  // every task ended within the bound
};

// Submits `requests` as one batch and waits, at most `bound`, for every task to end.
inline BatchResult RunBatch(TransferEngine& engine, const std::vector<TransferRequest>& requests,
                            std::chrono::milliseconds bound) {
  BatchResult out;
  Result<BatchId> batch = engine.allocateBatchID(requests.size());
  EXPECT_TRUE(batch.ok()) << batch.status();
  if (!batch.ok()) return out;
  const auto start = SteadyClock::now();
  Status submitted = engine.submitTransfer(*batch, requests);
  EXPECT_TRUE(submitted.ok()) << submitted;
  Result<BatchStatus> waited = engine.waitBatch(*batch, bound);
  out.ms = MillisSince(start);
  out.ended = waited.ok();
  EXPECT_TRUE(waited.ok()) << "tasks still open after " << bound.count() << " ms: "
                           << waited.status();
  for (size_t i = 0; i < requests.size(); ++i) {
    Result<TransferStatus> s = engine.getTransferStatus(*batch, i);
    out.tasks.push_back(s.ok() ? *s : TransferStatus{});
  }
  if (waited.ok()) EXPECT_TRUE(engine.freeBatchID(*batch).ok());
  return out;
}

inline std::string Describe(const TransferStatus& s) {
  std::string text(TransferStateName(s.state));
  if (!s.reason.ok()) text += " (" + s.reason.ToString() + ")";
  return text;
}


// An initiator engine in namespace a (10.99.0.1), a ferry-test-peer in namespace b (10.99.0.2),
// tcp between them over the veth pair. Each test starts the engine with its own options.
// Skips, with the reason, where namespaces and iptables cannot be made.
class NetFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string unsupported = testing::NetworkFaultsUnsupported();
    if (!unsupported.empty()) GTEST_SKIP() << unsupported;
    auto dir = testing::TempDir::Create("fault");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::make_unique<testing::TempDir>(std::move(dir).value());
    auto pair = testing::NetnsPair::Create(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(pair.ok()) << pair.status();
    pair_ = std::move(pair).value();
    // The engine's threads are made by this thread while it is in namespace a, and stay there.
    in_a_ = std::make_unique<testing::InNamespace>(pair_->a());
    ASSERT_TRUE(in_a_->ok()) << "cannot enter namespace " << pair_->a();
  }

  void TearDown() override {
    peer_.process.reset();  // killed before its namespace goes
    engine_.reset();
    in_a_.reset();
    pair_.reset();
  }

  // The initiator: tcp only, another host than the peer.
  void StartEngine(std::chrono::milliseconds task_timeout,
                   std::chrono::milliseconds request_timeout) {
    EngineOptions options;
    options.host = testing::NetnsPair::kAddressA;
    options.host_id = "fault-initiator";
    options.transports = {"tcp"};
    options.task_timeout = task_timeout;
    options.request_timeout = request_timeout;
    engine_ = std::make_unique<TransferEngine>();
    Status s = engine_->init(options);
    ASSERT_TRUE(s.ok()) << s;
    local_.assign(2 * kPeerBytes, 0);
    s = engine_->registerLocalMemory(local_.data(), local_.size());
    ASSERT_TRUE(s.ok()) << s;
  }

  // The target, in namespace b, P2P metadata (its descriptor comes over its RPC port).
  void StartPeer() {
    std::vector<std::string> argv = pair_->ExecPrefix(testing::NetnsPair::kB);
    for (std::string a :
         {std::string("env"), std::string("FERRY_PEER_HOST=") + testing::NetnsPair::kAddressB,
          std::string("FERRY_PEER_HOST_ID=fault-target"), std::string("FERRY_PEER_TRANSPORTS=tcp"),
          testing::BinDir() + "/ferry-test-peer", std::string("P2PHANDSHAKE"), std::string(""),
          std::string("0"), std::to_string(kPeerBytes)}) {
      argv.push_back(a);
    }
    auto child = testing::ChildProcess::SpawnPiped(argv, dir_->path() + "/peer.log");
    ASSERT_TRUE(child.ok()) << child.status();
    peer_.process = std::move(child).value();
    Result<std::string> ready = peer_.process->ReadLine(20s);
    ASSERT_TRUE(ready.ok()) << ready.status() << "\n" << peer_.process->LogTail();
    ASSERT_TRUE(peer_.ParseReady(*ready)) << *ready;
    Result<SegmentId> target = engine_->openSegment(peer_.name);
    ASSERT_TRUE(target.ok()) << target.status();
    target_ = *target;
  }

  // The peer's RPC port (its segment name is "10.99.0.2:<port>").
  uint16_t PeerRpcPort() const {
    return static_cast<uint16_t>(std::stoi(peer_.name.substr(peer_.name.rfind(':') + 1)));
  }

  // A write of lane range [first, first + lanes) from the source half of local_, filled anew.
  TransferRequest Write(size_t first, size_t lanes = 1) {
    unsigned char* src = local_.data() + first * kLane;
    Fill(src, lanes * kLane, ++seed_);
    return {OpCode::kWrite, src, target_, peer_.addr + first * kLane, lanes * kLane};
  }
  // A read of lane range [first, first + lanes) into the destination half of local_, cleared.
  TransferRequest Read(size_t first, size_t lanes = 1) {
    unsigned char* dst = local_.data() + kPeerBytes + first * kLane;
    std::memset(dst, 0, lanes * kLane);
    return {OpCode::kRead, dst, target_, peer_.addr + first * kLane, lanes * kLane};
  }

  // Writes lanes 0..3 and reads them back (two batches: the tasks of one batch run in no
  // order): opens the data connections, so that what follows does not pay for them.
  void WarmUp() {
    std::vector<TransferRequest> w = {Write(0, 4)};
    ASSERT_EQ(Account(w, RunBatch(*engine_, w, 10s)), 1u);
    std::vector<TransferRequest> r = {Read(0, 4)};
    ASSERT_EQ(Account(r, RunBatch(*engine_, r, 10s)), 1u);
  }

  // Records what each task of `result` did to the image; checks every completed read against
  // it (so a batch must not both write and read one lane). Returns how many tasks completed.
  size_t Account(const std::vector<TransferRequest>& requests, const BatchResult& result) {
    size_t completed = 0;
    for (size_t i = 0; i < requests.size() && i < result.tasks.size(); ++i) {
      const TransferRequest& r = requests[i];
      const uint64_t offset = r.target_offset - peer_.addr;
      const bool ok = result.tasks[i].state == TransferState::kCompleted;
      completed += ok ? 1 : 0;
      if (r.opcode == OpCode::kWrite) {
        if (ok) {
          image_.Completed(offset, static_cast<unsigned char*>(r.source), r.length);
        } else {
          image_.Failed(offset, r.length);
        }
      } else if (ok && image_.known(offset)) {
        EXPECT_EQ(0, std::memcmp(r.source, image_.expected(offset), r.length))
            << "a read of lane " << offset / kLane << " reported COMPLETED with wrong bytes";
      }
    }
    return completed;
  }

  // Runs `requests` until a batch of them completes entirely, at most `bound` in all: how long
  // the path took to work again, and how many batches failed meanwhile.
  struct Recovery {
    bool recovered = false;
    double ms = 0;
    int failed_batches = 0;
  };
  Recovery RecoverWith(const std::function<std::vector<TransferRequest>()>& make,
                       std::chrono::milliseconds bound, std::chrono::milliseconds per_batch) {
    Recovery out;
    const auto start = SteadyClock::now();
    out.recovered = testing::WaitFor(
        [&] {
          std::vector<TransferRequest> requests = make();
          BatchResult r = RunBatch(*engine_, requests, per_batch);
          if (Account(requests, r) == requests.size()) return true;
          ++out.failed_batches;
          return false;
        },
        bound, 1ms);
    out.ms = MillisSince(start);
    return out;
  }

  std::unique_ptr<testing::TempDir> dir_;
  std::unique_ptr<testing::NetnsPair> pair_;
  std::unique_ptr<testing::InNamespace> in_a_;
  std::unique_ptr<TransferEngine> engine_;
  std::vector<unsigned char> local_;  // [0, kPeerBytes): sources; [kPeerBytes, 2x): read targets
  testing::Peer peer_;
  SegmentId target_ = 0;
  PeerImage image_;
  uint32_t seed_ = 0;
};

}  // namespace ferry::fault
