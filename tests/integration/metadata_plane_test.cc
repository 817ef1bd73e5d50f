// The metadata plane against real servers: the same flows over memory://, etcd, redis and
// ferry-metadata-server (http), each started on 127.0.0.1 by the test.
#include <gtest/gtest.h>

#include <functional>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

#include "core/segment_desc_codec.h"
#include "metadata/segment_directory.h"
#include "metadata/store_factory.h"
#include "test_servers.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;
using testing::EtcdServer;
using testing::MetadataServer;
using testing::RedisServer;
using testing::TestServer;

enum class Kind { kMemory, kEtcd, kRedis, kHttp };

std::string KindName(Kind kind) {
  switch (kind) {
    case Kind::kMemory:
      return "memory";
    case Kind::kEtcd:
      return "etcd";
    case Kind::kRedis:
      return "redis";
    case Kind::kHttp:
      return "http";
  }
  return "?";
}

SegmentDesc MakeDesc(const std::string& name, uint64_t incarnation, int buffers = 1) {
  SegmentDesc desc;
  desc.name = name;
  desc.incarnation = incarnation;
  desc.rpc = {"127.0.0.1", 4000};
  for (int i = 0; i < buffers; ++i) {
    BufferDesc b;
    b.addr = 0x100000 + static_cast<uint64_t>(i) * 0x10000;
    b.length = 0x8000;
    b.location = Location::CpuNuma(0);
    b.generation = static_cast<uint64_t>(i) + 1;
    b.keys["tcp"] = std::string("\x00\x01key", 5);
    desc.buffers.push_back(b);
  }
  return desc;
}

// tests/support's bounded poll, with the limit first as these tests read best.
bool Eventually(std::chrono::milliseconds limit, const std::function<bool()>& done) {
  return testing::WaitFor(done, limit, 10ms);
}

class MetadataPlaneTest : public ::testing::TestWithParam<Kind> {
 protected:
  static constexpr auto kLeaseTtl = 2000ms;

  void SetUp() override {
    switch (GetParam()) {
      case Kind::kMemory: {
        std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
        std::replace(name.begin(), name.end(), '/', '-');
        connection_ = "memory://plane-" + name;
        return;
      }
      case Kind::kEtcd: {
        auto s = EtcdServer::Start();
        ASSERT_TRUE(s.ok()) << s.status();
        connection_ = "etcd://" + (*s)->endpoint();
        server_ = std::move(s).value();
        return;
      }
      case Kind::kRedis: {
        auto s = RedisServer::Start();
        ASSERT_TRUE(s.ok()) << s.status();
        connection_ = "redis://" + (*s)->endpoint();
        server_ = std::move(s).value();
        return;
      }
      case Kind::kHttp: {
        auto s = MetadataServer::Start();
        ASSERT_TRUE(s.ok()) << s.status();
        connection_ = "http://" + (*s)->endpoint() + "/metadata";
        server_ = std::move(s).value();
        return;
      }
    }
  }

  Result<std::unique_ptr<MetadataStore>> TryConnect() {
    StoreOptions options{.request_timeout = 2000ms, .lease_ttl = kLeaseTtl};
    return CreateMetadataStore(connection_, options);
  }

  std::unique_ptr<MetadataStore> Connect() {
    Result<std::unique_ptr<MetadataStore>> store = TryConnect();
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(store).value() : nullptr;
  }

  std::unique_ptr<SegmentDirectory> Directory(MetadataStore* store,
                                              std::chrono::milliseconds ttl = 500ms) {
    Result<std::unique_ptr<SegmentDirectory>> dir =
        SegmentDirectory::Create(store, {.cache_ttl = ttl});
    EXPECT_TRUE(dir.ok()) << dir.status();
    return dir.ok() ? std::move(dir).value() : nullptr;
  }

  std::string connection_;
  std::unique_ptr<TestServer> server_;
};

TEST_P(MetadataPlaneTest, TwoClientsSeeEachOthersSegments) {
  auto a = Connect();
  auto b = Connect();
  ASSERT_TRUE(a && b);
  SegmentPublisher pa(a.get(), "ferry");
  SegmentPublisher pb(b.get(), "ferry");
  ASSERT_TRUE(pa.Publish(MakeDesc("prefill-0", 11)).ok());
  ASSERT_TRUE(pb.Publish(MakeDesc("decode-0", 22, 3)).ok());
  auto dir_a = Directory(a.get());
  auto dir_b = Directory(b.get());
  Result<SegmentHandle> seen_by_a = dir_a->Open("decode-0");
  Result<SegmentHandle> seen_by_b = dir_b->Open("prefill-0");
  ASSERT_TRUE(seen_by_a.ok()) << seen_by_a.status();
  ASSERT_TRUE(seen_by_b.ok()) << seen_by_b.status();
  EXPECT_EQ(*seen_by_a->desc, MakeDesc("decode-0", 22, 3));
  EXPECT_EQ(*seen_by_b->desc, MakeDesc("prefill-0", 11));
  EXPECT_EQ(*b->Get(RpcMetaKey("ferry", "prefill-0")),
            R"({"incarnation":11,"ip_or_host_name":"127.0.0.1","rpc_port":4000})");
}

TEST_P(MetadataPlaneTest, ChangesReachOtherClientsWithinASecond) {
  auto owner = Connect();
  auto reader = Connect();
  ASSERT_TRUE(owner && reader);
  SegmentPublisher publisher(owner.get(), "ferry");
  ASSERT_TRUE(publisher.Publish(MakeDesc("node", 1)).ok());
  // Stores with a watch push the change; the others are bounded by the cache TTL (500 ms).
  auto dir = Directory(reader.get());
  ASSERT_TRUE(dir->Open("node").ok());
  EXPECT_EQ(dir->watching(), GetParam() != Kind::kHttp);
  ASSERT_TRUE(publisher.Publish(MakeDesc("node", 1, 4)).ok());
  EXPECT_TRUE(Eventually(1000ms, [&] {
    Result<SegmentHandle> h = dir->Open("node");
    return h.ok() && h->desc->buffers.size() == 4;
  }));
  ASSERT_TRUE(publisher.Remove().ok());
  EXPECT_TRUE(Eventually(
      1000ms, [&] { return dir->Open("node").status().code() == StatusCode::kNotFound; }));
}

TEST_P(MetadataPlaneTest, CrashedOwnersEntryExpiresWithinItsTtl) {
  if (GetParam() == Kind::kMemory)
    GTEST_SKIP() << "memory leases run on a clock; see its own tests";
  auto owner = Connect();
  auto reader = Connect();
  ASSERT_TRUE(owner && reader);
  SegmentPublisher publisher(owner.get(), "ferry");
  ASSERT_TRUE(publisher.Publish(MakeDesc("doomed", 5)).ok());
  const auto crashed_at = std::chrono::steady_clock::now();
  owner->Abandon();  // stops refreshing, deletes nothing: as if the process died
  EXPECT_TRUE(Eventually(kLeaseTtl + 1500ms, [&] {
    return reader->Get(SegmentDescKey("ferry", "doomed")).status().code() == StatusCode::kNotFound;
  }));
  EXPECT_GE(std::chrono::steady_clock::now() - crashed_at, kLeaseTtl / 2);
}

TEST_P(MetadataPlaneTest, ClientsRecoverAndRepublishAfterTheServerRestarts) {
  if (GetParam() == Kind::kMemory) GTEST_SKIP() << "no server to restart";
  auto owner = Connect();
  auto reader = Connect();
  ASSERT_TRUE(owner && reader);
  SegmentPublisher publisher(owner.get(), "ferry");
  ASSERT_TRUE(publisher.Publish(MakeDesc("survivor", 3)).ok());
  auto dir = Directory(reader.get());
  ASSERT_TRUE(dir->Open("survivor").ok());

  server_->Kill();
  EXPECT_EQ(reader->Get(SegmentDescKey("ferry", "survivor")).status().code(),
            StatusCode::kUnavailable);
  ASSERT_TRUE(server_->Relaunch().ok());

  // The owner's lease keeper writes its keys again if the server lost them, and keeps them
  // alive past several TTLs: two keys leased after the relaunch by clients that never refresh
  // them expire one after the other, and the owner's is still there.
  for (const char* ref : {"ferry/ref/1", "ferry/ref/2"}) {
    // A relaunched redis refuses connections, then answers LOADING, for a moment: connecting is
    // retried with the Put.
    std::unique_ptr<MetadataStore> reference;
    ASSERT_TRUE(Eventually(kLeaseTtl * 4, [&] {
      if (reference == nullptr) {
        Result<std::unique_ptr<MetadataStore>> store = TryConnect();
        if (!store.ok()) return false;
        reference = std::move(store).value();
      }
      return reference->Put(ref, "r", {.leased = true}).ok();
    }));
    reference->Abandon();
    EXPECT_TRUE(Eventually(kLeaseTtl * 4 + 5s, [&] {
      return reader->Get(ref).status().code() == StatusCode::kNotFound;
    }));
  }
  EXPECT_TRUE(
      Eventually(kLeaseTtl, [&] { return reader->Get(SegmentDescKey("ferry", "survivor")).ok(); }));
  // Both clients work again: a new version is published and seen.
  ASSERT_TRUE(publisher.Publish(MakeDesc("survivor", 3, 2)).ok());
  EXPECT_TRUE(Eventually(2000ms, [&] {
    Status s = dir->Sync("survivor");
    Result<SegmentHandle> h = dir->Open("survivor");
    return s.ok() && h.ok() && h->desc->buffers.size() == 2;
  }));
}

TEST_P(MetadataPlaneTest, MalformedStoredValueIsACleanErrorAndTheCacheStays) {
  auto owner = Connect();
  auto reader = Connect();
  ASSERT_TRUE(owner && reader);
  SegmentPublisher publisher(owner.get(), "ferry");
  ASSERT_TRUE(publisher.Publish(MakeDesc("fragile", 8)).ok());
  auto dir = Directory(reader.get());
  Result<SegmentHandle> before = dir->Open("fragile");
  ASSERT_TRUE(before.ok());
  ASSERT_TRUE(owner->Put(SegmentDescKey("ferry", "fragile"), "{\"buffers\": [1, 2").ok());
  Status sync = dir->Sync("fragile");
  EXPECT_EQ(sync.code(), StatusCode::kInvalidArgument) << sync;
  if (dir->watching()) {
    // A watch event for the bad value is ignored too: wait until a later event (a marker
    // segment's update, delivered in order after it) has reached the cache.
    SegmentPublisher marker_owner(owner.get(), "ferry");
    ASSERT_TRUE(marker_owner.Publish(MakeDesc("marker", 1)).ok());
    ASSERT_TRUE(dir->Open("marker").ok());
    ASSERT_TRUE(marker_owner.Publish(MakeDesc("marker", 1, 2)).ok());
    EXPECT_TRUE(Eventually(5000ms, [&] {
      Result<SegmentHandle> m = dir->Open("marker");
      return m.ok() && m->desc->buffers.size() == 2;
    }));
  }
  Result<SegmentHandle> after = dir->Open("fragile");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(*after->desc, *before->desc);
}

TEST_P(MetadataPlaneTest, SixteenThreadsOpenAHundredSegments) {
  auto owner = Connect();
  auto reader = Connect();
  ASSERT_TRUE(owner && reader);
  for (int i = 0; i < 100; ++i) {
    SegmentDesc desc = MakeDesc("worker-" + std::to_string(i), 1000 + static_cast<uint64_t>(i));
    ASSERT_TRUE(owner->Put(SegmentDescKey("ferry", desc.name), EncodeSegmentDesc(desc)).ok());
  }
  auto dir = Directory(reader.get(), 60s);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      std::vector<int> order(100);
      for (int i = 0; i < 100; ++i) order[static_cast<size_t>(i)] = i;
      std::shuffle(order.begin(), order.end(), std::mt19937(t));
      for (int i : order) {
        Result<SegmentHandle> h = dir->Open("worker-" + std::to_string(i));
        if (!h.ok() || h->desc->incarnation != 1000u + static_cast<uint64_t>(i)) errors++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(dir->fetches(), 100u);
  Result<std::vector<KeyValue>> listed = reader->List("ferry/ram/worker-");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->size(), 100u);
}

// Names are owned: compare-and-set (PutOptions::replaces) and compare-and-delete (DeleteIf) on
// every store, and a leased key another writer took over is neither refreshed back nor deleted
// by its first owner, whose own other keys are still refreshed and deleted.
TEST_P(MetadataPlaneTest, ConditionalWritesLeaveAnotherWritersKeyAlone) {
  auto a = Connect();
  auto b = Connect();
  auto reader = Connect();
  ASSERT_TRUE(a && b && reader);
  const std::string key = "ferry/ram/owned";
  ASSERT_TRUE(a->Put(key, "A1", {.leased = true, .replaces = ""}).ok());
  // "" writes an absent key only; a wrong expected value writes nothing.
  EXPECT_EQ(b->Put(key, "B1", {.leased = true, .replaces = ""}).code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(b->Put(key, "B1", {.replaces = "A0"}).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(b->DeleteIf(key, "A0").code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(b->DeleteIf("ferry/ram/absent", "A1").code(), StatusCode::kNotFound);
  ASSERT_TRUE(a->Put(key, "A2", {.leased = true, .replaces = "A1"}).ok());
  EXPECT_EQ(*reader->Get(key), "A2");

  // b takes the key over; a keeps another leased key, which a third party deletes: it comes
  // back only through a's lease refresh. Two such rounds after the take-over, a's refresh has
  // looked at the taken key and left it.
  ASSERT_TRUE(b->Put(key, "B1", {.leased = true, .replaces = "A2"}).ok());
  const std::string marker = "ferry/ram/owned-marker";
  ASSERT_TRUE(a->Put(marker, "M", {.leased = true}).ok());
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(reader->Delete(marker).ok());
    ASSERT_TRUE(Eventually(kLeaseTtl * 3, [&] { return reader->Get(marker).ok(); }))
        << "round " << round;
  }
  EXPECT_EQ(*reader->Get(key), "B1");
  // a's clean shutdown deletes its marker, not b's key.
  a.reset();
  EXPECT_EQ(reader->Get(marker).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*reader->Get(key), "B1");
  EXPECT_TRUE(b->DeleteIf(key, "B1").ok());
  EXPECT_EQ(reader->Get(key).status().code(), StatusCode::kNotFound);
}

INSTANTIATE_TEST_SUITE_P(Stores, MetadataPlaneTest,
                         ::testing::Values(Kind::kMemory, Kind::kEtcd, Kind::kRedis, Kind::kHttp),
                         [](const auto& info) { return KindName(info.param); });

}  // namespace
}  // namespace ferry
