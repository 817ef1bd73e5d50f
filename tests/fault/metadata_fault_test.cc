// The metadata store (etcd, redis, ferry-metadata-server; real ones, started by the test) killed
// while two engines move data, and started again.
//
// What must hold: transfers to a peer already opened go on while the store is down, and after
// it is back, without one failure (the data path needs the store only to learn descriptors it
// does not have); and publication resumes: the target's descriptor is back in the store, so an
// engine that never saw it opens it and moves data.
//
// The outage outlasts the target's lease (its keys' TTL), so the store may come back without
// them (redis and ferry-metadata-server drop keys whose TTL passed while they were down), and
// the initiator's descriptor cache is short (100 ms), so it asks the store again and again,
// also in the moment after the restart before the target has written its keys again.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "fault_fixture.h"

namespace ferry::fault {
namespace {

using testing::ChildProcess;
using testing::EtcdServer;
using testing::MetadataServer;
using testing::Peer;
using testing::RedisServer;
using testing::TempDir;
using testing::TestServer;

constexpr auto kPeerLeaseTtl = 1000ms;
constexpr size_t kTransferBytes = 256 << 10;

enum class Store { kEtcd, kRedis, kHttp };

std::string StoreName(Store s) {
  switch (s) {
    case Store::kEtcd:
      return "etcd";
    case Store::kRedis:
      return "redis";
    case Store::kHttp:
      return "http";
  }
  return "?";
}

// Counts of one phase of the traffic.
struct Phase {
  std::atomic<uint64_t> completed{0};
  std::atomic<uint64_t> failed{0};
  std::mutex mu;
  std::string first_failure;  // guarded by mu
};

class StoreOutageTest : public ::testing::TestWithParam<Store> {
 protected:
  void SetUp() override {
    auto dir = TempDir::Create("fault-store");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::make_unique<TempDir>(std::move(dir).value());
    switch (GetParam()) {
      case Store::kEtcd: {
        auto s = EtcdServer::Start();
        ASSERT_TRUE(s.ok()) << s.status();
        connection_ = "etcd://" + (*s)->endpoint();
        server_ = std::move(s).value();
        break;
      }
      case Store::kRedis: {
        auto s = RedisServer::Start();
        ASSERT_TRUE(s.ok()) << s.status();
        connection_ = "redis://" + (*s)->endpoint();
        server_ = std::move(s).value();
        break;
      }
      case Store::kHttp: {
        auto s = MetadataServer::Start();
        ASSERT_TRUE(s.ok()) << s.status();
        connection_ = "http://" + (*s)->endpoint() + "/metadata";
        server_ = std::move(s).value();
        break;
      }
    }
  }

  void TearDown() override {
    StopTraffic();
    peer_.process.reset();
    fresh_.reset();
    engine_.reset();
  }

  Status StartEngine(std::unique_ptr<TransferEngine>* engine, std::vector<unsigned char>* memory,
                     const std::string& host_id) {
    EngineOptions options;
    options.metadata_conn = connection_;
    options.host_id = host_id;
    options.transports = {"tcp"};
    options.task_timeout = 5s;
    options.request_timeout = 1s;
    options.lease_ttl = kPeerLeaseTtl;
    options.segment_cache_ttl = 100ms;
    *engine = std::make_unique<TransferEngine>();
    RETURN_IF_ERROR((*engine)->init(options));
    memory->assign(2 * kPeerBytes, 0);
    return (*engine)->registerLocalMemory(memory->data(), memory->size());
  }

  void StartPeer() {
    std::vector<std::string> argv = {
        "/usr/bin/env", "FERRY_PEER_HOST_ID=fault-target", "FERRY_PEER_TRANSPORTS=tcp",
        "FERRY_PEER_LEASE_TTL_MS=" + std::to_string(kPeerLeaseTtl.count()),
        testing::BinDir() + "/ferry-test-peer", connection_, "fault-target-" + StoreName(GetParam()),
        "0", std::to_string(kPeerBytes)};
    auto child = ChildProcess::SpawnPiped(argv, dir_->path() + "/peer.log");
    ASSERT_TRUE(child.ok()) << child.status();
    peer_.process = std::move(child).value();
    Result<std::string> ready = peer_.process->ReadLine(20s);
    ASSERT_TRUE(ready.ok()) << ready.status() << "\n" << peer_.process->LogTail();
    ASSERT_TRUE(peer_.ParseReady(*ready)) << *ready;
  }

  // One write of lane `lane` and a read of it back, compared; Ok or why not.
  static Status WriteRead(TransferEngine& engine, std::vector<unsigned char>& memory,
                          SegmentId target, uint64_t remote, size_t lane, uint32_t seed) {
    unsigned char* src = memory.data() + lane * kLane;
    unsigned char* dst = memory.data() + kPeerBytes + lane * kLane;
    Fill(src, kTransferBytes, seed);
    std::memset(dst, 0, kTransferBytes);
    for (const TransferRequest& r :
         {TransferRequest{OpCode::kWrite, src, target, remote + lane * kLane, kTransferBytes},
          TransferRequest{OpCode::kRead, dst, target, remote + lane * kLane, kTransferBytes}}) {
      ASSIGN_OR_RETURN(BatchId batch, engine.allocateBatchID(1));
      RETURN_IF_ERROR(engine.submitTransfer(batch, {r}));
      ASSIGN_OR_RETURN(BatchStatus done, engine.waitBatch(batch, 10s));
      RETURN_IF_ERROR(engine.freeBatchID(batch));
      if (done.state != TransferState::kCompleted) {
        return done.first_error.ok() ? InternalError("task ended without a reason")
                                     : done.first_error;
      }
    }
    if (std::memcmp(src, dst, kTransferBytes) != 0) {
      return InternalError("lane " + std::to_string(lane) + " read back other bytes");
    }
    return Status::Ok();
  }

  // Transfers without pause on a thread of their own, counted into *phase_ (switchable).
  void StartTraffic() {
    traffic_ = std::thread([this] {
      uint32_t seed = 1;
      while (!stop_.load()) {
        Phase* phase = phase_.load();
        const size_t lane = seed % 8;
        Status s = WriteRead(*engine_, memory_, target_, peer_.addr, lane, seed);
        ++seed;
        if (s.ok()) {
          phase->completed.fetch_add(1);
          last_lane_.store(lane);
        } else {
          phase->failed.fetch_add(1);
          std::lock_guard<std::mutex> lock(phase->mu);
          if (phase->first_failure.empty()) phase->first_failure = s.ToString();
        }
      }
    });
  }
  void StopTraffic() {
    stop_.store(true);
    if (traffic_.joinable()) traffic_.join();
  }
  static std::string FirstFailure(Phase& p) {
    std::lock_guard<std::mutex> lock(p.mu);
    return p.first_failure;
  }

  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<TestServer> server_;
  std::string connection_;
  std::unique_ptr<TransferEngine> engine_;
  std::vector<unsigned char> memory_;
  std::unique_ptr<TransferEngine> fresh_;
  std::vector<unsigned char> fresh_memory_;
  Peer peer_;
  SegmentId target_ = 0;
  std::thread traffic_;
  std::atomic<bool> stop_{false};
  Phase before_, down_, after_;
  std::atomic<Phase*> phase_{&before_};
  std::atomic<size_t> last_lane_{0};
};

TEST_P(StoreOutageTest, TransfersGoOnAndPublicationResumes) {
  ASSERT_TRUE(StartEngine(&engine_, &memory_, "fault-initiator").ok());
  StartPeer();
  ASSERT_TRUE(peer_.process);
  Result<SegmentId> target = engine_->openSegment(peer_.name);
  ASSERT_TRUE(target.ok()) << target.status();
  target_ = *target;
  StartTraffic();
  ASSERT_TRUE(testing::WaitFor([&] { return before_.completed.load() >= 5; }, 20s))
      << FirstFailure(before_);

  // Down for longer than the target's lease: its keys' TTL passes while nobody can refresh them.
  server_->Kill();
  const auto down_at = SteadyClock::now();
  phase_.store(&down_);
  const auto outage = 2 * kPeerLeaseTtl;
  EXPECT_TRUE(testing::WaitFor(
      [&] { return SteadyClock::now() - down_at >= outage && down_.completed.load() >= 10; },
      outage + 20s));
  const double down_ms = MillisSince(down_at);

  Status relaunched = server_->Relaunch();
  ASSERT_TRUE(relaunched.ok()) << relaunched;
  const auto up_at = SteadyClock::now();
  phase_.store(&after_);
  // Publication resumed: an engine that never saw the target finds it in the store and moves
  // data to it (the target rewrites its keys within a third of its lease). Its own start may
  // have to wait too: a restarted redis answers LOADING until it read its data back.
  Result<SegmentId> found = NotFoundError("not tried");
  uint32_t fresh_seed = 1000;
  const bool republished = testing::WaitFor(
      [&] {
        if (fresh_ == nullptr) {
          Status started = StartEngine(&fresh_, &fresh_memory_, "fault-fresh");
          if (!started.ok()) {
            fresh_.reset();
            found = started.WithContext("starting a new engine");
            return false;
          }
        }
        found = fresh_->openSegment(peer_.name);
        return found.ok() && WriteRead(*fresh_, fresh_memory_, *found, peer_.addr,
                                       12, ++fresh_seed).ok();
      },
      15s, 20ms);
  const double republished_ms = MillisSince(up_at);
  EXPECT_TRUE(republished) << "the target's descriptor is not back in the store "
                           << republished_ms << " ms after the restart: " << found.status();
  EXPECT_TRUE(testing::WaitFor([&] { return after_.completed.load() >= 20; }, 20s));
  StopTraffic();

  Figure("%s down %.0f ms: transfers before %llu ok / %llu failed, while down %llu / %llu, after "
         "restart %llu / %llu; descriptor readable by a new engine %.0f ms after restart",
         StoreName(GetParam()).c_str(), down_ms,
         static_cast<unsigned long long>(before_.completed.load()),
         static_cast<unsigned long long>(before_.failed.load()),
         static_cast<unsigned long long>(down_.completed.load()),
         static_cast<unsigned long long>(down_.failed.load()),
         static_cast<unsigned long long>(after_.completed.load()),
         static_cast<unsigned long long>(after_.failed.load()), republished_ms);
  EXPECT_EQ(before_.failed.load(), 0u) << FirstFailure(before_);
  EXPECT_EQ(down_.failed.load(), 0u) << FirstFailure(down_);
  EXPECT_EQ(after_.failed.load(), 0u) << FirstFailure(after_);
  // What the traffic and the new engine wrote last is on the target.
  const size_t lane = last_lane_.load();
  EXPECT_EQ(peer_.Sum(lane * kLane, kTransferBytes),
            testing::Fnv(memory_.data() + lane * kLane, kTransferBytes));
  if (republished) {
    EXPECT_EQ(peer_.Sum(12 * kLane, kTransferBytes),
              testing::Fnv(fresh_memory_.data() + 12 * kLane, kTransferBytes));
  }
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreOutageTest,
                         ::testing::Values(Store::kEtcd, Store::kRedis, Store::kHttp),
                         [](const ::testing::TestParamInfo<Store>& info) {
                           return StoreName(info.param);
                         });

}  // namespace
}  // namespace ferry::fault
