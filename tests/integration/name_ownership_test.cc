// Names are owned (issue 18): over etcd, redis and ferry-metadata-server, each started on
// 127.0.0.1 by the test, a segment name held by a live engine (a ferry-test-peer process) is not
// taken by a second engine unless it is told to; once taken over, the first engine's lease
// refreshes, memory calls and clean stop leave the new holder's entries alone, so a third engine
// still reaches the new holder by name; and a holder that does not answer (frozen) loses its name to the next
// engine without being told.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "ferry/transfer_engine.h"
#include "peer_client.h"
#include "test_servers.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;
using testing::Fnv;
using testing::Peer;
using testing::TempDir;

using testing::StoreKind;

class NameOwnershipTest : public ::testing::TestWithParam<StoreKind> {
 protected:
  static constexpr size_t kBytes = 1 << 20;

  void SetUp() override {
    auto dir = TempDir::Create("names");
    ASSERT_TRUE(dir.ok());
    dir_ = std::make_unique<TempDir>(std::move(dir).value());
    Result<testing::RunningStore> store = testing::StartStore(GetParam());
    ASSERT_TRUE(store.ok()) << store.status();
    connection_ = store->connection;
    server_ = std::move(store->server);
  }

  EngineOptions Options(const std::string& name, bool take_over) const {
    EngineOptions options;
    options.metadata_conn = connection_;
    options.local_server_name = name;
    options.take_over_name = take_over;
    options.transports = {"tcp"};
    options.request_timeout = 1s;  // bounds the probe of a frozen holder
    options.task_timeout = 8s;
    options.lease_ttl = 3s;
    return options;
  }

  // A ferry-test-peer holding `name`; its leases last `lease_ms`.
  Peer StartPeer(const std::string& name, int lease_ms) {
    return testing::StartTestPeer(
        {"FERRY_PEER_TRANSPORTS=tcp", "FERRY_PEER_LEASE_TTL_MS=" + std::to_string(lease_ms)},
        connection_, name, kBytes, dir_->path());
  }

  // Writes a pattern from `from` to `remote` of the segment `name`, opened afresh; true when
  // the batch completed.
  bool WriteByName(TransferEngine& from, const std::string& name, uint64_t remote,
                   std::vector<unsigned char>& pattern) {
    if (Status s = from.syncSegmentCache(name); !s.ok() && s.code() != StatusCode::kNotFound) {
      ADD_FAILURE() << s;
    }
    Result<SegmentId> target = from.openSegment(name);
    EXPECT_TRUE(target.ok()) << target.status();
    if (!target.ok()) return false;
    Status registered = from.registerLocalMemory(pattern.data(), pattern.size(), "cpu");
    EXPECT_TRUE(registered.ok()) << registered;
    if (!registered.ok()) return false;
    Result<BatchId> batch = from.allocateBatchID(1);
    EXPECT_TRUE(batch.ok()) << batch.status();
    if (!batch.ok()) return false;
    Status s = from.submitTransfer(
        *batch, {TransferRequest{OpCode::kWrite, pattern.data(), *target, remote, pattern.size()}});
    EXPECT_TRUE(s.ok()) << s;
    Result<BatchStatus> done = from.waitBatch(*batch, 20s);
    EXPECT_TRUE(done.ok()) << done.status();
    EXPECT_TRUE(from.freeBatchID(*batch).ok());
    EXPECT_TRUE(from.unregisterLocalMemory(pattern.data()).ok());
    if (done.ok() && done->state != TransferState::kCompleted) ADD_FAILURE() << done->first_error;
    return done.ok() && done->state == TransferState::kCompleted;
  }

  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<testing::TestServer> server_;
  std::string connection_;
};

std::vector<unsigned char> Pattern(size_t n, unsigned seed) {
  std::vector<unsigned char> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<unsigned char>(i * 13 + seed);
  return out;
}

TEST_P(NameOwnershipTest, ALiveHolderKeepsItsNameUnlessTakenOverAndADeadOneLosesIt) {
  const std::string name = "dup-" + testing::StoreKindName(GetParam());
  Peer first = StartPeer(name, 3000);
  ASSERT_TRUE(first.process && first.addr != 0);

  // A second engine under the live holder's name is refused, naming the holder.
  {
    TransferEngine second;
    Status s = second.init(Options(name, /*take_over=*/false));
    EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << s;
    EXPECT_NE(s.message().find("127.0.0.1:"), std::string::npos) << s;
    EXPECT_NE(s.message().find("incarnation"), std::string::npos) << s;
    EXPECT_NE(s.message().find("take_over_name"), std::string::npos) << s;
  }
  // The refused engine's stop left the holder's entries: a third engine reaches it by name.
  TransferEngine third;
  ASSERT_TRUE(third.init(Options("", false)).ok());
  std::vector<unsigned char> one = Pattern(64 << 10, 1);
  EXPECT_TRUE(WriteByName(third, name, first.addr, one));
  EXPECT_EQ(first.Sum(0, one.size()), Fnv(one.data(), one.size()));

  // Told to, a second engine takes the name over from the live holder.
  // (Its lease outlasts the test: its refresh does not rewrite entries someone deleted before
  // the checks below look.)
  TransferEngine second;
  EngineOptions take_over = Options(name, /*take_over=*/true);
  take_over.lease_ttl = 120s;
  ASSERT_TRUE(second.init(take_over).ok());
  std::vector<unsigned char> landing(kBytes, 0);
  ASSERT_TRUE(second.registerLocalMemory(landing.data(), landing.size(), "cpu").ok());
  if (GetParam() != StoreKind::kEtcd) {
    // redis and http refresh by rewriting: the first engine's next round finds the name taken
    // and gives it up (etcd's keep-alive finds it too, but its keys live on its lease).
    EXPECT_TRUE(testing::WaitFor(
        [&] { return first.process->LogTail().find("taken over") != std::string::npos; }, 10s))
        << first.process->LogTail();
  }
  // The first engine, which lost the name, keeps working for itself: its memory calls succeed
  // and publish nothing under the name (once it knows; logged once), so the name cannot flip
  // back to it when the store briefly lacks the new holder's entries.
  EXPECT_EQ(first.Ask("unregister"), "ok");
  EXPECT_EQ(first.Ask("register"), "ok");
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        return first.process->LogTail().find("no longer publishes under it") != std::string::npos;
      },
      10s))
      << first.process->LogTail();
  // The first engine stops cleanly: its deletes are conditional, so the second's entries stay.
  EXPECT_TRUE(first.process->WriteLine("exit").ok());
  EXPECT_TRUE(testing::WaitFor([&] { return !first.process->running(); }, 20s));
  std::vector<unsigned char> two = Pattern(128 << 10, 2);
  EXPECT_TRUE(WriteByName(third, name, reinterpret_cast<uint64_t>(landing.data()), two));
  EXPECT_EQ(std::memcmp(landing.data(), two.data(), two.size()), 0);
  // And a fresh engine, which never cached the name, finds the second one too.
  {
    TransferEngine fresh;
    ASSERT_TRUE(fresh.init(Options("", false)).ok());
    std::vector<unsigned char> three = Pattern(32 << 10, 3);
    EXPECT_TRUE(WriteByName(fresh, name, reinterpret_cast<uint64_t>(landing.data()), three));
    EXPECT_EQ(std::memcmp(landing.data(), three.data(), three.size()), 0);
  }

  // A holder that does not answer (frozen; its entries outlive the test) is taken over without
  // being told.
  const std::string frozen_name = "frozen-" + testing::StoreKindName(GetParam());
  Peer frozen = StartPeer(frozen_name, 60000);
  ASSERT_TRUE(frozen.process && frozen.addr != 0);
  ASSERT_TRUE(testing::FreezeProcess(frozen.process->pid(), 10s));
  TransferEngine successor;
  Status s = successor.init(Options(frozen_name, /*take_over=*/false));
  ASSERT_TRUE(s.ok()) << s;
  std::vector<unsigned char> landing2(kBytes, 0);
  ASSERT_TRUE(successor.registerLocalMemory(landing2.data(), landing2.size(), "cpu").ok());
  std::vector<unsigned char> four = Pattern(16 << 10, 4);
  EXPECT_TRUE(WriteByName(third, frozen_name, reinterpret_cast<uint64_t>(landing2.data()), four));
  EXPECT_EQ(std::memcmp(landing2.data(), four.data(), four.size()), 0);
  frozen.process->Kill();
}

INSTANTIATE_TEST_SUITE_P(Stores, NameOwnershipTest,
                         ::testing::Values(StoreKind::kEtcd, StoreKind::kRedis, StoreKind::kHttp),
                         [](const auto& info) { return testing::StoreKindName(info.param); });

}  // namespace
}  // namespace ferry
