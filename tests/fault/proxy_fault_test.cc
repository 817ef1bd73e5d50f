// Faults a kernel rule cannot make, made by a TCP proxy (tests/support/fault_proxy.h) between the
// initiator and the target's tcp data port: delay, a connection cut in the middle of a frame,
// and flipped bits.
//
// Placement: the proxy runs in this process but in the target's namespace (b); an iptables
// REDIRECT there sends every tcp connection arriving over the veth to it, except those to the
// target's RPC port, and the proxy forwards each to its original destination (SO_ORIGINAL_DST).
// Neither engine knows the proxy is there.
//
// A transfer that reports COMPLETED must have moved exactly the right bytes, whatever the proxy
// did: every completed write is checked on the target, every completed read against the image.
#include <gtest/gtest.h>

#include "fault_fixture.h"
#include "fault_proxy.h"
#include "netns.h"

namespace ferry::fault {
namespace {

using testing::FaultProxy;
using testing::InNamespace;
using testing::IptablesRule;

class ProxyFaultTest : public NetFaultTest {
 protected:
  // After StartPeer: data connections made from now on go through the proxy.
  void StartProxy() {
    {
      InNamespace in_b(pair_->b());
      ASSERT_TRUE(in_b.ok());
      auto proxy = FaultProxy::Start("0.0.0.0");
      ASSERT_TRUE(proxy.ok()) << proxy.status();
      proxy_ = std::move(proxy).value();
    }
    auto rule = IptablesRule::Add(pair_->b(), "-t nat PREROUTING -i " + pair_->veth_b() +
                                                  " -p tcp ! --dport " +
                                                  std::to_string(PeerRpcPort()) +
                                                  " -j REDIRECT --to-ports " +
                                                  std::to_string(proxy_->port()));
    ASSERT_TRUE(rule.ok()) << rule.status();
    redirect_ = std::move(rule).value();
  }

  void TearDown() override {
    peer_.process.reset();
    engine_.reset();
    proxy_.reset();
    redirect_.reset();
    NetFaultTest::TearDown();
  }

  // Every connection the proxy holds finished and every chunk it read was written on or
  // dropped: nothing more can reach the target through it.
  bool ProxyDrained(uint64_t closed_at_least) const {
    const FaultProxy::Stats s = proxy_->stats();
    return s.held == 0 && s.closed >= closed_at_least;
  }

  // Writes lane `lane` alone and checks the target at once: 1 when it completed with the right
  // bytes, 0 when it failed (FAILED / TIMEOUT, with a reason), -1 when it completed with wrong
  // bytes on the target (silent corruption).
  int WriteAndCheck(size_t lane, std::chrono::milliseconds bound) {
    std::vector<TransferRequest> w = {Write(lane)};
    BatchResult r = RunBatch(*engine_, w, bound);
    if (Account(w, r) == 0) {
      EXPECT_FALSE(r.tasks.at(0).reason.ok());
      return 0;
    }
    const bool right = peer_.Sum(lane * kLane, kLane) ==
                       testing::Fnv(static_cast<unsigned char*>(w[0].source), kLane);
    return right ? 1 : -1;
  }
  // Reads lane `lane` alone: as WriteAndCheck, against the image.
  int ReadAndCheck(size_t lane, std::chrono::milliseconds bound) {
    EXPECT_TRUE(image_.known(lane * kLane));
    std::vector<TransferRequest> rq = {Read(lane)};
    BatchResult r = RunBatch(*engine_, rq, bound);
    if (r.tasks.at(0).state != TransferState::kCompleted) {
      EXPECT_FALSE(r.tasks.at(0).reason.ok());
      return 0;
    }
    return std::memcmp(rq[0].source, image_.expected(lane * kLane), kLane) == 0 ? 1 : -1;
  }

  std::unique_ptr<FaultProxy> proxy_;
  std::unique_ptr<IptablesRule> redirect_;
};

TEST_F(ProxyFaultTest, DelayedLinkCompletesEveryByte) {
  StartEngine(/*task_timeout=*/20s, /*request_timeout=*/5s);
  StartPeer();
  StartProxy();
  auto timed = [&](size_t first) {  // a write, then a read of what it wrote
    std::vector<TransferRequest> w = {Write(first, 4)};
    BatchResult wr = RunBatch(*engine_, w, 25s);
    EXPECT_EQ(Account(w, wr), 1u) << Describe(wr.tasks.at(0));
    std::vector<TransferRequest> r = {Read(first, 4)};
    BatchResult rd = RunBatch(*engine_, r, 25s);
    EXPECT_EQ(Account(r, rd), 1u) << Describe(rd.tasks.at(0));
    return wr.ms + rd.ms;
  };
  const double plain_ms = timed(0);
  proxy_->SetDelay(50ms);  // every 64 KiB chunk, each way
  const double delayed_ms = timed(4);
  EXPECT_GT(proxy_->stats().accepted, 0u) << "nothing went through the proxy";
  Figure("proxy latency 50 ms each way: 2 MiB written + read in %.0f ms (no delay %.0f ms)",
         delayed_ms, plain_ms);
  EXPECT_EQ(image_.Mismatches(peer_), "");
}

TEST_F(ProxyFaultTest, DelayPastTheDeadlineLandsNothing) {
  constexpr auto kTaskTimeout = 1000ms;
  StartEngine(kTaskTimeout, /*request_timeout=*/1000ms);
  StartPeer();
  StartProxy();
  // Opens the data connections (and their clock hellos) while the proxy is fast.
  std::vector<TransferRequest> warm = {Write(0, 4)};
  ASSERT_EQ(Account(warm, RunBatch(*engine_, warm, 10s)), 1u);
  const uint64_t closed_before = proxy_->stats().closed;
  const uint64_t forwarded_before = proxy_->stats().forwarded[FaultProxy::kToServer];

  // Every chunk now reaches the target half a second after the task's deadline.
  proxy_->SetDelay(kTaskTimeout + 500ms);
  std::vector<TransferRequest> late = {Write(4, 2)};
  BatchResult r = RunBatch(*engine_, late, kTaskTimeout + 3s);
  ASSERT_TRUE(r.ended);
  EXPECT_EQ(r.tasks[0].state, TransferState::kTimeout) << Describe(r.tasks[0]);
  EXPECT_LE(r.ms, kTaskTimeout.count() + 500.0);
  // The initiator reset the connection at the deadline; the proxy still delivers what it held,
  // late, and then passes the reset on. Wait for that, then look at the target.
  EXPECT_TRUE(testing::WaitFor([&] { return ProxyDrained(closed_before + 1); }, 10s))
      << "the proxy still holds " << proxy_->stats().held << " chunks";
  proxy_->SetDelay(0ms);
  Figure("delay past deadline: task %s after %.0f ms (task_timeout %lld ms); %llu bytes reached "
         "the target's port after it",
         std::string(TransferStateName(r.tasks[0].state)).c_str(), r.ms,
         static_cast<long long>(kTaskTimeout.count()),
         static_cast<unsigned long long>(proxy_->stats().forwarded[FaultProxy::kToServer] -
                                         forwarded_before));
  const Recovery recovery = RecoverWith([&] { return std::vector{Write(6)}; }, 10s, 5s);
  EXPECT_TRUE(recovery.recovered);
  // The late bytes reached the target's socket after the deadline: none may have landed.
  std::vector<unsigned char> zeros(2 * kLane, 0);
  EXPECT_EQ(peer_.Sum(4 * kLane, 2 * kLane), testing::Fnv(zeros.data(), zeros.size()))
      << "bytes of a write reported TIMEOUT landed after its deadline";
  EXPECT_EQ(image_.Mismatches(peer_), "");
}

TEST_F(ProxyFaultTest, ConnectionCutMidFrameEndsCleanly) {
  StartEngine(/*task_timeout=*/5s, /*request_timeout=*/2s);
  StartPeer();
  StartProxy();
  std::vector<TransferRequest> warm = {Write(0, 2)};
  ASSERT_EQ(Account(warm, RunBatch(*engine_, warm, 10s)), 1u);

  // 100 KiB and 7 bytes into the next bytes towards the target: inside a 256 KiB write slice.
  proxy_->CutAfter(FaultProxy::kToServer, (100 << 10) + 7);
  std::vector<TransferRequest> w = {Write(2, 2)};
  BatchResult wr = RunBatch(*engine_, w, 10s);
  ASSERT_TRUE(wr.ended);
  Account(w, wr);
  // The same towards the initiator: inside a read's answer.
  proxy_->CutAfter(FaultProxy::kToClient, (100 << 10) + 7);
  std::vector<TransferRequest> rd = {Read(0, 2)};
  BatchResult rr = RunBatch(*engine_, rd, 10s);
  ASSERT_TRUE(rr.ended);
  Account(rd, rr);  // a completed read is checked against the image
  EXPECT_EQ(proxy_->stats().cuts, 2u) << "a cut did not happen: the test did not test";
  Figure("cut mid-frame: write %s in %.0f ms; read %s in %.0f ms",
         Describe(wr.tasks[0]).c_str(), wr.ms, Describe(rr.tasks[0]).c_str(), rr.ms);

  const Recovery recovery =
      RecoverWith([&] { return std::vector{Write(4, 2), Read(0, 2)}; }, 10s, 10s);
  EXPECT_TRUE(recovery.recovered);
  EXPECT_EQ(image_.Mismatches(peer_), "");
}

TEST_F(ProxyFaultTest, CorruptedBytesAreNeverWrittenSilently) {
  StartEngine(/*task_timeout=*/3s, /*request_timeout=*/1s);
  StartPeer();
  StartProxy();
  std::vector<TransferRequest> warm = {Write(0, 8)};
  ASSERT_EQ(Account(warm, RunBatch(*engine_, warm, 10s)), 1u);

  // One bit in every MiB towards the target: about every other 512 KiB write is hit, somewhere
  // in its headers or payload, and a retry may pass.
  constexpr int kRounds = 6;
  constexpr uint64_t kEvery = 1 << 20;
  proxy_->CorruptEvery(FaultProxy::kToServer, kEvery);
  int writes[3] = {0, 0, 0};  // silent, failed, right
  for (int i = 0; i < kRounds; ++i) ++writes[WriteAndCheck(8 + static_cast<size_t>(i), 10s) + 1];
  proxy_->CorruptEvery(FaultProxy::kToServer, 0);
  // And towards the initiator, in the answers to reads of lanes whose bytes are known.
  proxy_->CorruptEvery(FaultProxy::kToClient, kEvery);
  int reads[3] = {0, 0, 0};
  for (int i = 0; i < kRounds; ++i) ++reads[ReadAndCheck(static_cast<size_t>(i), 10s) + 1];
  proxy_->CorruptEvery(FaultProxy::kToClient, 0);

  const FaultProxy::Stats s = proxy_->stats();
  EXPECT_GT(s.corrupted[FaultProxy::kToServer], 0u);
  EXPECT_GT(s.corrupted[FaultProxy::kToClient], 0u);
  Figure("corruption: %llu bytes flipped towards the target, %llu towards the initiator; writes "
         "%d right, %d failed, %d silently corrupted; reads %d right, %d failed, %d silently "
         "corrupted",
         static_cast<unsigned long long>(s.corrupted[FaultProxy::kToServer]),
         static_cast<unsigned long long>(s.corrupted[FaultProxy::kToClient]), writes[2],
         writes[1], writes[0], reads[2], reads[1], reads[0]);
  EXPECT_EQ(writes[0], 0) << "writes reported COMPLETED with corrupted bytes on the target";
  EXPECT_EQ(reads[0], 0) << "reads reported COMPLETED with corrupted bytes";

  const Recovery recovery =
      RecoverWith([&] { return std::vector{Write(14), Read(0)}; }, 10s, 5s);
  EXPECT_TRUE(recovery.recovered);
  // A flipped address or length bit must not have put bytes anywhere else either.
  EXPECT_EQ(image_.Mismatches(peer_), "");
}

}  // namespace
}  // namespace ferry::fault
