// Faults in the network between two engines, made by the kernel: a partition (iptables DROP),
// connections refused and reset (REJECT with tcp-reset), a slow link (tc tbf) and random packet
// loss (iptables statistic). The initiator lives in one network namespace, the target process in
// another, joined by a veth pair; the faults are rules in the target's namespace.
//
// Each test checks that every task ends, with a clear state, by its bound; that no byte lands
// where no completed write put it (PeerImage); and that the path works again once the fault is
// gone. Figures for tests/fault/README.md are printed as "[fault figure] ...".
#include <gtest/gtest.h>

#include "fault_fixture.h"
#include "netns.h"

namespace ferry::fault {
namespace {

using testing::IptablesRule;
using testing::NetnsPair;

// Both directions of the veth in namespace b dropped: a partition.
struct Partition {
  std::unique_ptr<IptablesRule> in, out;
};

Result<Partition> Drop(const NetnsPair& pair, const std::string& match = "") {
  Partition p;
  ASSIGN_OR_RETURN(p.in, IptablesRule::Add(pair.b(), "INPUT -i " + pair.veth_b() + match +
                                                          " -j DROP"));
  ASSIGN_OR_RETURN(p.out, IptablesRule::Add(pair.b(), "OUTPUT -o " + pair.veth_b() + match +
                                                           " -j DROP"));
  return p;
}

TEST_F(NetFaultTest, PartitionEndsTasksByTheirDeadlineAndHeals) {
  constexpr auto kTaskTimeout = 2000ms;
  StartEngine(kTaskTimeout, /*request_timeout=*/1000ms);
  StartPeer();
  WarmUp();

  Result<Partition> partition = Drop(*pair_);
  ASSERT_TRUE(partition.ok()) << partition.status();
  // Writes on the connections the warm-up opened, and reads of what is there.
  std::vector<TransferRequest> cut_off = {Write(8), Write(9), Write(10, 2), Read(0), Read(1)};
  BatchResult during = RunBatch(*engine_, cut_off, kTaskTimeout + 3s);
  ASSERT_TRUE(during.ended);
  for (size_t i = 0; i < during.tasks.size(); ++i) {
    const TransferState state = during.tasks[i].state;
    EXPECT_TRUE(state == TransferState::kFailed || state == TransferState::kTimeout)
        << "task " << i << " across a partition: " << Describe(during.tasks[i]);
    EXPECT_FALSE(during.tasks[i].reason.ok()) << "task " << i << " ended without a reason";
  }
  // Ended by the deadline: the timer reports within a few ticks of it.
  EXPECT_LE(during.ms, kTaskTimeout.count() + 500.0);
  Account(cut_off, during);
  Result<uint64_t> dropped = partition->in->Packets();
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_GT(*dropped, 0u) << "the partition dropped nothing: the test did not test";
  Figure("partition: %zu tasks ended in %.0f ms (task_timeout %lld ms): %s; %llu packets dropped",
         during.tasks.size(), during.ms, static_cast<long long>(kTaskTimeout.count()),
         Describe(during.tasks[0]).c_str(), static_cast<unsigned long long>(*dropped));

  // Heal: new transfers succeed, and nothing the partitioned tasks carried landed later.
  ASSERT_TRUE(partition->in->Remove().ok());
  ASSERT_TRUE(partition->out->Remove().ok());
  const Recovery recovery = RecoverWith([&] { return std::vector{Write(6), Read(0)}; }, 15s,
                                        kTaskTimeout + 3s);
  EXPECT_TRUE(recovery.recovered) << "transfers still fail " << recovery.ms << " ms after heal";
  Figure("partition healed: first complete batch %.0f ms after heal, %d failed batches before",
         recovery.ms, recovery.failed_batches);
  std::vector<TransferRequest> after = {Write(8), Write(7), Read(6), Read(0)};
  EXPECT_EQ(Account(after, RunBatch(*engine_, after, 10s)), after.size());
  // Lanes 9..11 were written only across the partition: Account marked them unknown, but
  // nothing could reach the target, so they must still hold zeros.
  for (size_t lane : {9, 10, 11}) {
    EXPECT_EQ(peer_.Sum(lane * kLane, kLane), [] {
      std::vector<unsigned char> zeros(kLane, 0);
      return testing::Fnv(zeros.data(), zeros.size());
    }()) << "lane " << lane << " changed although its write never crossed the partition";
  }
  EXPECT_EQ(image_.Mismatches(peer_), "");
}

TEST_F(NetFaultTest, ResetConnectionsFailWithinASecond) {
  // Long deadlines: a failure in time comes from the resets, not from a timer.
  StartEngine(/*task_timeout=*/10s, /*request_timeout=*/5s);
  StartPeer();
  WarmUp();

  // Every tcp segment into namespace b is answered with a reset: open connections break at
  // their next segment, new ones are refused.
  auto reject = IptablesRule::Add(
      pair_->b(), "INPUT -i " + pair_->veth_b() + " -p tcp -j REJECT --reject-with tcp-reset");
  ASSERT_TRUE(reject.ok()) << reject.status();
  std::vector<TransferRequest> refused = {Write(8), Write(9, 2), Read(0)};
  BatchResult during = RunBatch(*engine_, refused, 15s);
  ASSERT_TRUE(during.ended);
  for (size_t i = 0; i < during.tasks.size(); ++i) {
    EXPECT_EQ(during.tasks[i].state, TransferState::kFailed)
        << "task " << i << ": " << Describe(during.tasks[i]);
  }
  EXPECT_LT(during.ms, 1000.0) << "reset connections took " << during.ms << " ms to fail";
  Account(refused, during);
  Result<uint64_t> resets = (*reject)->Packets();
  ASSERT_TRUE(resets.ok()) << resets.status();
  EXPECT_GT(*resets, 0u);
  Figure("reject (tcp-reset): %zu tasks FAILED in %.0f ms (task_timeout 10000 ms): %s",
         during.tasks.size(), during.ms, Describe(during.tasks[0]).c_str());

  ASSERT_TRUE((*reject)->Remove().ok());
  const Recovery recovery =
      RecoverWith([&] { return std::vector{Write(5), Read(0)}; }, 15s, 10s);
  EXPECT_TRUE(recovery.recovered) << "transfers still fail " << recovery.ms << " ms after heal";
  Figure("reject removed: first complete batch %.0f ms after, %d failed batches before",
         recovery.ms, recovery.failed_batches);
  // The failed writes were refused before a byte reached the target.
  EXPECT_EQ(peer_.Sum(8 * kLane, 3 * kLane), [] {
    std::vector<unsigned char> zeros(3 * kLane, 0);
    return testing::Fnv(zeros.data(), zeros.size());
  }());
  EXPECT_EQ(image_.Mismatches(peer_), "");
}

class SlowAndLossyTest : public NetFaultTest {
 protected:
  // One write and one read of `lanes` lanes; MB/s over both, 0 when either did not complete.
  double WriteThenRead(size_t first, size_t lanes, std::chrono::milliseconds bound) {
    std::vector<TransferRequest> w = {Write(first, lanes)};
    BatchResult wr = RunBatch(*engine_, w, bound);
    std::vector<TransferRequest> r = {Read(first, lanes)};
    BatchResult rd = RunBatch(*engine_, r, bound);
    const size_t completed = Account(w, wr) + Account(r, rd);
    EXPECT_EQ(completed, 2u) << "write: " << Describe(wr.tasks.at(0))
                             << "; read: " << Describe(rd.tasks.at(0));
    if (completed != 2) return 0;
    return 2.0 * static_cast<double>(lanes * kLane) / (1 << 20) / ((wr.ms + rd.ms) / 1000.0);
  }
};

TEST_F(SlowAndLossyTest, SlowLinkCompletesEveryByte) {
  StartEngine(/*task_timeout=*/30s, /*request_timeout=*/5s);
  StartPeer();
  WarmUp();
  constexpr size_t kLanesMoved = 8;  // 4 MiB each way
  const double normal = WriteThenRead(0, kLanesMoved, 30s);

  // 40 Mbit/s (5 MB/s) each way, shaped by a token bucket on both ends of the veth.
  for (NetnsPair::Side side : {NetnsPair::kA, NetnsPair::kB}) {
    const std::string dev = side == NetnsPair::kA ? pair_->veth_a() : pair_->veth_b();
    Status s = pair_->Run(side, "tc qdisc add dev " + dev +
                                    " root tbf rate 40mbit burst 32kb latency 400ms");
    ASSERT_TRUE(s.ok()) << s;
  }
  const double slow = WriteThenRead(kLanesMoved, kLanesMoved, 30s);
  Figure("slow link (tbf 40 Mbit/s): %.1f MB/s, unshaped %.1f MB/s (4 MiB written + read)", slow,
         normal);
  EXPECT_GT(slow, 0);
  EXPECT_EQ(image_.Mismatches(peer_), "");
}

TEST_F(SlowAndLossyTest, RandomLossCompletesEveryByte) {
  StartEngine(/*task_timeout=*/30s, /*request_timeout=*/10s);
  StartPeer();
  // One packet per segment on the wire (no segmentation offload), so that a loss costs a
  // segment, as on a real network, and not up to 64 KiB of them.
  for (NetnsPair::Side side : {NetnsPair::kA, NetnsPair::kB}) {
    const std::string dev = side == NetnsPair::kA ? pair_->veth_a() : pair_->veth_b();
    Status s = pair_->Run(side, "ip link set dev " + dev + " gso_max_segs 1");
    ASSERT_TRUE(s.ok()) << s;
  }
  WarmUp();
  constexpr size_t kLanesMoved = 8;
  const double normal = WriteThenRead(0, kLanesMoved, 30s);

  // 5% of the packets in each direction dropped at random.
  Result<Partition> loss =
      Drop(*pair_, " -m statistic --mode random --probability 0.05");
  ASSERT_TRUE(loss.ok()) << loss.status();
  const double lossy = WriteThenRead(kLanesMoved, kLanesMoved, 30s);
  Result<uint64_t> in = loss->in->Packets();
  Result<uint64_t> out = loss->out->Packets();
  ASSERT_TRUE(in.ok() && out.ok());
  EXPECT_GT(*in + *out, 0u) << "nothing was dropped: the test did not test";
  Figure("random loss 5%%: %.1f MB/s, no loss %.1f MB/s; %llu packets dropped", lossy, normal,
         static_cast<unsigned long long>(*in + *out));
  EXPECT_GT(lossy, 0);
  EXPECT_EQ(image_.Mismatches(peer_), "");
}

}  // namespace
}  // namespace ferry::fault
