#include "registry/local_registry.h"
#include "common/wait_for.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <random>
#include <thread>

namespace ferry {
namespace {

using std::chrono::milliseconds;

RegionSpec Spec(uint64_t addr, uint64_t length, std::string transport = "tcp",
                std::function<Status()> on_unregister = nullptr) {
  RegionSpec spec;
  spec.addr = addr;
  spec.length = length;
  spec.location = Location::CpuNuma(0);
  spec.binding.transport = std::move(transport);
  spec.binding.key = "key-" + spec.binding.transport;
  spec.binding.on_unregister = std::move(on_unregister);
  return spec;
}

// A revocable pin (a transport's lease on a region): its holder is told when unregister starts,
// the drain waits for its release (and times out like any pin), and it is never told after.
TEST(LocalRegistryTest, RevocablePinsAreRevokedAtCloseAndDrainedLikePins) {
  LocalRegistry registry(RegistryOptions{.drain_timeout = milliseconds(100)});
  Result<uint64_t> generation = registry.Register(Spec(0x1000, 0x1000));
  ASSERT_TRUE(generation.ok());
  std::atomic<int> revoked{0};
  Result<LocalRegistry::RevocablePin> pin =
      registry.PinRevocable(0x1800, 16, {.generation = *generation}, [&] { revoked.fetch_add(1); });
  ASSERT_TRUE(pin.ok()) << pin.status();
  EXPECT_EQ(pin->region_addr, 0x1000u);
  EXPECT_EQ(pin->region_length, 0x1000u);
  // Refused like Pin: the range leaves the region.
  EXPECT_EQ(registry.PinRevocable(0x1ff0, 32, {}, [] {}).status().code(),
            StatusCode::kInvalidArgument);
  // Held and not released: the unregister revokes it, then times out; it stays closing.
  EXPECT_EQ(registry.Unregister(0x1000).code(), StatusCode::kTimeout);
  EXPECT_EQ(revoked.load(), 1);
  EXPECT_EQ(registry.Pin(0x1000, 1).status().code(), StatusCode::kStale);
  // Released, the unregister called again completes, without telling the holder twice.
  LocalRegistry::ReleaseRevocablePin(&registry, pin->token);
  const Status again = registry.Unregister(0x1000);
  EXPECT_TRUE(again.ok()) << again;
  EXPECT_EQ(revoked.load(), 1);
  EXPECT_EQ(registry.size(), 0u);
  // Released before any unregister: never told.
  ASSERT_TRUE(registry.Register(Spec(0x1000, 0x1000)).ok());
  Result<LocalRegistry::RevocablePin> early =
      registry.PinRevocable(0x1000, 1, {}, [&] { revoked.fetch_add(1); });
  ASSERT_TRUE(early.ok());
  LocalRegistry::ReleaseRevocablePin(&registry, early->token);
  EXPECT_TRUE(registry.Unregister(0x1000).ok());
  EXPECT_EQ(revoked.load(), 1);
}

TEST(LocalRegistryTest, DesignArticleExampleRejectsPartialOverlap) {
  LocalRegistry registry;
  ASSERT_TRUE(registry.Register(Spec(0x1000, 0x2000)).ok());     // A = [0x1000, 0x3000)
  Result<uint64_t> b = registry.Register(Spec(0x2000, 0x2000));  // B = [0x2000, 0x4000)
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kOverlap);
  EXPECT_NE(b.status().message().find("[0x2000, 0x4000)"), std::string::npos) << b.status();
  EXPECT_NE(b.status().message().find("[0x1000, 0x3000)"), std::string::npos) << b.status();
  EXPECT_EQ(registry.size(), 1u);
}

TEST(LocalRegistryTest, EveryKindOfPartialOverlapIsRejected) {
  LocalRegistry registry;
  ASSERT_TRUE(registry.Register(Spec(0x10000, 0x1000)).ok());
  for (auto [addr, len] : std::vector<std::pair<uint64_t, uint64_t>>{
           {0xF000, 0x2000},   // covers the start
           {0x10800, 0x1000},  // covers the end
           {0x10100, 0x100},   // strictly inside
           {0x10000, 0x800},   // same start, shorter
           {0xF000, 0x3000},   // contains it
       }) {
    Result<uint64_t> r = registry.Register(Spec(addr, len));
    EXPECT_EQ(r.status().code(), StatusCode::kOverlap) << std::hex << addr << " " << len;
  }
  // Adjacent on both sides is fine.
  EXPECT_TRUE(registry.Register(Spec(0xF000, 0x1000)).ok());
  EXPECT_TRUE(registry.Register(Spec(0x11000, 0x1000)).ok());
  EXPECT_EQ(registry.size(), 3u);
}

TEST(LocalRegistryTest, SameRangeAnotherTransportJoinsSameTransportIsAlreadyExists) {
  LocalRegistry registry;
  Result<uint64_t> tcp = registry.Register(Spec(0x1000, 0x1000, "tcp"));
  ASSERT_TRUE(tcp.ok());
  Result<uint64_t> rdma = registry.Register(Spec(0x1000, 0x1000, "rdma"));
  ASSERT_TRUE(rdma.ok()) << rdma.status();
  EXPECT_EQ(*tcp, *rdma);  // one region, one generation
  EXPECT_EQ(registry.size(), 1u);

  std::vector<BufferDesc> snapshot = registry.Snapshot();
  ASSERT_EQ(snapshot.size(), 1u);
  EXPECT_EQ(snapshot[0].keys.size(), 2u);
  EXPECT_EQ(snapshot[0].keys.at("rdma"), "key-rdma");

  Result<uint64_t> again = registry.Register(Spec(0x1000, 0x1000, "rdma"));
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
}

TEST(LocalRegistryTest, JoiningMustAgreeOnLocationAndRemoteAccess) {
  LocalRegistry registry;
  ASSERT_TRUE(registry.Register(Spec(0x1000, 0x1000, "tcp")).ok());
  RegionSpec other = Spec(0x1000, 0x1000, "rdma");
  other.location = Location::Cuda(0);
  EXPECT_EQ(registry.Register(other).status().code(), StatusCode::kInvalidArgument);
  other = Spec(0x1000, 0x1000, "rdma");
  other.remote_accessible = false;
  EXPECT_EQ(registry.Register(other).status().code(), StatusCode::kInvalidArgument);
}

TEST(LocalRegistryTest, InvalidSpecsAreRejected) {
  LocalRegistry registry;
  EXPECT_EQ(registry.Register(Spec(0, 0x1000)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Register(Spec(0x1000, 0)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Register(Spec(~uint64_t{0} - 10, 100)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Register(Spec(0x1000, 10, "")).status().code(), StatusCode::kInvalidArgument);
  RegionSpec detect = Spec(0x1000, 10);
  detect.location = Location::Detect();
  EXPECT_EQ(registry.Register(detect).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.size(), 0u);
  // The last byte of the address space is fine.
  EXPECT_TRUE(registry.Register(Spec(~uint64_t{0} - 99, 99)).ok());
}

TEST(LocalRegistryTest, GenerationsAreMonotonicAcrossReRegistration) {
  LocalRegistry registry;
  uint64_t last = 0;
  for (int i = 0; i < 5; ++i) {
    Result<uint64_t> g = registry.Register(Spec(0x1000, 0x1000));
    ASSERT_TRUE(g.ok());
    EXPECT_GT(*g, last);
    last = *g;
    ASSERT_TRUE(registry.Unregister(0x1000).ok());
  }
  Result<uint64_t> other = registry.Register(Spec(0x9000, 0x1000));
  EXPECT_GT(*other, last);
}

TEST(LocalRegistryTest, BatchIsAllOrNothing) {
  LocalRegistry registry;
  ASSERT_TRUE(registry.Register(Spec(0x100000, 0x1000, "tcp")).ok());
  std::vector<RegionSpec> batch = {Spec(0x1000, 0x1000), Spec(0x100000, 0x1000, "rdma"),
                                   Spec(0x3000, 0x1000), Spec(0x100800, 0x1000)};  // last overlaps
  Result<std::vector<uint64_t>> r = registry.RegisterBatch(batch);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOverlap);
  EXPECT_NE(r.status().message().find("batch entry 3"), std::string::npos) << r.status();
  EXPECT_EQ(registry.size(), 1u);
  EXPECT_EQ(registry.Snapshot()[0].keys.size(), 1u);  // the rdma join was rolled back

  batch.pop_back();
  r = registry.RegisterBatch(batch);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size(), 3u);
  EXPECT_EQ(registry.size(), 3u);
}

// RegistryOptions::max_regions bounds the regions registered at once, under the registry's lock:
// of two concurrent batches that would together pass it, exactly one is registered.
TEST(LocalRegistryTest, MaxRegionsRefusesWholeBatchesEvenWhenConcurrent) {
  LocalRegistry registry(RegistryOptions{
      .max_regions = 4, .max_regions_setting = "EngineOptions::max_segment_buffers"});
  ASSERT_TRUE(registry.RegisterBatch({Spec(0x1000, 0x100), Spec(0x2000, 0x100)}).ok());
  Result<std::vector<uint64_t>> r = registry.RegisterBatch(
      {Spec(0x3000, 0x100), Spec(0x1000, 0x100, "rdma"), Spec(0x4000, 0x100), Spec(0x5000, 0x100)});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "3 new regions would bring the registry to 5, over the limit of 4 "
            "(EngineOptions::max_segment_buffers); nothing registered");
  EXPECT_EQ(registry.size(), 2u);
  EXPECT_EQ(registry.Snapshot()[0].keys.size(), 1u);  // the rdma join was not applied either
  // Joining a registered range adds no region, so it passes at the limit.
  ASSERT_TRUE(registry.RegisterBatch({Spec(0x3000, 0x100), Spec(0x4000, 0x100)}).ok());
  EXPECT_TRUE(registry.Register(Spec(0x1000, 0x100, "rdma")).ok());
  EXPECT_EQ(registry.Register(Spec(0x5000, 0x100)).status().code(), StatusCode::kInvalidArgument);

  LocalRegistry shared(RegistryOptions{.max_regions = 1000});
  std::vector<RegionSpec> held;
  for (uint64_t i = 0; i < 600; ++i) held.push_back(Spec(0x100000 + i * 0x1000, 0x100));
  ASSERT_TRUE(shared.RegisterBatch(held).ok());
  std::atomic<int> registered{0};
  auto register_300 = [&](uint64_t base) {
    std::vector<RegionSpec> batch;
    for (uint64_t i = 0; i < 300; ++i) batch.push_back(Spec(base + i * 0x1000, 0x100));
    if (shared.RegisterBatch(batch).ok()) registered.fetch_add(1);
  };
  std::thread a(register_300, 0x10000000);
  std::thread b(register_300, 0x20000000);
  a.join();
  b.join();
  EXPECT_EQ(registered.load(), 1);
  EXPECT_EQ(shared.size(), 900u);
}

TEST(LocalRegistryTest, BatchRejectsOverlapWithinItself) {
  LocalRegistry registry;
  Result<std::vector<uint64_t>> r =
      registry.RegisterBatch({Spec(0x1000, 0x2000), Spec(0x2000, 0x2000)});
  EXPECT_EQ(r.status().code(), StatusCode::kOverlap);
  EXPECT_EQ(registry.size(), 0u);
  r = registry.RegisterBatch({Spec(0x1000, 0x10), Spec(0, 0x10)});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.size(), 0u);
}

TEST(LocalRegistryTest, PinRequiresTheWholeRangeInsideOneRegion) {
  LocalRegistry registry;
  ASSERT_TRUE(registry.Register(Spec(0x1000, 0x1000)).ok());
  ASSERT_TRUE(registry.Register(Spec(0x2000, 0x1000)).ok());  // adjacent

  Result<PinGuard> inside = registry.Pin(0x1800, 0x800);
  ASSERT_TRUE(inside.ok()) << inside.status();
  EXPECT_EQ(inside->region_addr(), 0x1000u);
  EXPECT_EQ(inside->region_length(), 0x1000u);
  EXPECT_TRUE(registry.Pin(0x1fff, 0).ok());
  // Spanning two adjacent regions is not "inside one region".
  EXPECT_EQ(registry.Pin(0x1800, 0x1000).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Pin(0xfff, 2).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(registry.Pin(0x3000, 1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(registry.Pin(0x1000, ~uint64_t{0}).status().code(), StatusCode::kInvalidArgument);
}

TEST(LocalRegistryTest, PinChecksGenerationRemoteAccessAndTransport) {
  LocalRegistry registry;
  RegionSpec local_only = Spec(0x1000, 0x1000, "tcp");
  local_only.remote_accessible = false;
  Result<uint64_t> generation = registry.Register(local_only);
  ASSERT_TRUE(generation.ok());

  EXPECT_TRUE(registry.Pin(0x1000, 8, {.generation = *generation}).ok());
  EXPECT_EQ(registry.Pin(0x1000, 8, {.generation = *generation + 1}).status().code(),
            StatusCode::kStale);
  EXPECT_EQ(registry.Pin(0x1000, 8, {.require_remote_accessible = true}).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(registry.Pin(0x1000, 8, {.transport = "tcp"}).ok());
  EXPECT_EQ(registry.Pin(0x1000, 8, {.transport = "rdma"}).status().code(),
            StatusCode::kPermissionDenied);
}

TEST(LocalRegistryTest, LocalOnlyRegionPublishesNoKeyButKeepsItsBindings) {
  LocalRegistry registry;
  RegionSpec local_only = Spec(0x1000, 0x1000, "rdma");
  local_only.remote_accessible = false;
  ASSERT_TRUE(registry.Register(local_only).ok());
  RegionSpec joined = Spec(0x1000, 0x1000, "tcp");
  joined.remote_accessible = false;
  ASSERT_TRUE(registry.Register(joined).ok());
  ASSERT_TRUE(registry.Register(Spec(0x4000, 0x1000, "rdma")).ok());

  std::vector<BufferDesc> snapshot = registry.Snapshot();
  ASSERT_EQ(snapshot.size(), 2u);
  EXPECT_FALSE(snapshot[0].remote_accessible);
  EXPECT_TRUE(snapshot[0].keys.empty()) << "a local-only region published a key";
  EXPECT_EQ(snapshot[1].keys.at("rdma"), "key-rdma");
  Result<BufferDesc> looked_up = registry.Lookup(0x1800);
  ASSERT_TRUE(looked_up.ok());
  EXPECT_TRUE(looked_up->keys.empty());
  // The bindings are still there for the local side of this process's own transfers.
  Result<PinGuard> pin = registry.Pin(0x1000, 8, {.transport = "rdma"});
  ASSERT_TRUE(pin.ok()) << pin.status();
  std::vector<std::string> bound = {"rdma", "shm", "tcp"};
  pin->RetainBound(&bound);
  EXPECT_EQ(bound, (std::vector<std::string>{"rdma", "tcp"}));
}

TEST(LocalRegistryTest, PinGuardMovesAndReleasesOnce) {
  LocalRegistry registry({.drain_timeout = milliseconds(20)});
  ASSERT_TRUE(registry.Register(Spec(0x1000, 0x1000)).ok());
  Result<PinGuard> pin = registry.Pin(0x1000, 1);
  ASSERT_TRUE(pin.ok());
  PinGuard moved = std::move(*pin);
  EXPECT_FALSE(pin->held());
  EXPECT_TRUE(moved.held());
  PinGuard assigned;
  assigned = std::move(moved);
  EXPECT_EQ(registry.Unregister(0x1000).code(), StatusCode::kTimeout);  // still pinned once
  assigned.Release();
  assigned.Release();  // idempotent
  EXPECT_TRUE(registry.Unregister(0x1000).ok());
}

TEST(LocalRegistryTest, UnregisterTimeoutLeavesRegionClosingAndRegistered) {
  LocalRegistry registry({.drain_timeout = milliseconds(50)});
  int callbacks = 0;
  ASSERT_TRUE(registry
                  .Register(Spec(0x1000, 0x1000, "tcp",
                                 [&] {
                                   ++callbacks;
                                   return Status::Ok();
                                 }))
                  .ok());
  Result<PinGuard> pin = registry.Pin(0x1000, 0x10);
  ASSERT_TRUE(pin.ok());

  Status s = registry.Unregister(0x1000);
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s;
  EXPECT_EQ(callbacks, 0);
  EXPECT_EQ(registry.size(), 1u);                                          // still registered...
  EXPECT_EQ(registry.Pin(0x1000, 1).status().code(), StatusCode::kStale);  // ...but closing
  EXPECT_TRUE(registry.Snapshot().empty());  // and no longer published
  EXPECT_EQ(registry.Register(Spec(0x1000, 0x1000, "rdma")).status().code(), StatusCode::kBusy);

  pin->Release();
  EXPECT_TRUE(registry.Unregister(0x1000).ok());
  EXPECT_EQ(callbacks, 1);
  EXPECT_EQ(registry.size(), 0u);
}

TEST(LocalRegistryTest, UnregisterWaitsForPinsThenRunsCallbacks) {
  LocalRegistry registry({.drain_timeout = milliseconds(10000)});
  std::atomic<bool> released{false};
  std::atomic<bool> callback_saw_release{false};
  ASSERT_TRUE(registry
                  .Register(Spec(0x1000, 0x1000, "tcp",
                                 [&] {
                                   callback_saw_release = released.load();
                                   return Status::Ok();
                                 }))
                  .ok());
  Result<PinGuard> pin = registry.Pin(0x1000, 0x10);
  ASSERT_TRUE(pin.ok());
  std::atomic<bool> unregister_returned{false};
  std::atomic<bool> saw_closing{false};
  std::thread releaser([&, guard = std::move(*pin)]() mutable {
    // Once the region refuses new pins, Unregister is waiting for this one.
    saw_closing = WaitFor([&] { return !registry.Pin(0x1000, 1).ok(); }, milliseconds(5000));
    EXPECT_FALSE(unregister_returned) << "Unregister returned while a pin was held";
    released = true;
    guard.Release();
  });
  Status s = registry.Unregister(0x1000);
  unregister_returned = true;
  releaser.join();
  EXPECT_TRUE(saw_closing);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(callback_saw_release);
  EXPECT_EQ(registry.size(), 0u);
}

TEST(LocalRegistryTest, SecondConcurrentUnregisterIsBusy) {
  LocalRegistry registry({.drain_timeout = milliseconds(2000)});
  ASSERT_TRUE(registry.Register(Spec(0x1000, 0x1000)).ok());
  Result<PinGuard> pin = registry.Pin(0x1000, 1);
  ASSERT_TRUE(pin.ok());
  std::thread first([&] { EXPECT_TRUE(registry.Unregister(0x1000).ok()); });
  // Wait until the first call has marked the region closing.
  EXPECT_TRUE(WaitFor([&] { return !registry.Pin(0x1000, 1).ok(); }, milliseconds(5000)));
  EXPECT_EQ(registry.Unregister(0x1000).code(), StatusCode::kBusy);
  pin->Release();
  first.join();
}

TEST(LocalRegistryTest, UnregisterOneTransportKeepsTheOthers) {
  LocalRegistry registry;
  std::vector<std::string> calls;
  auto record = [&](std::string name) {
    return [&calls, name] {
      calls.push_back(name);
      return Status::Ok();
    };
  };
  ASSERT_TRUE(registry.Register(Spec(0x1000, 0x1000, "tcp", record("tcp"))).ok());
  ASSERT_TRUE(registry.Register(Spec(0x1000, 0x1000, "rdma", record("rdma"))).ok());

  EXPECT_EQ(registry.Unregister(0x1000, "shm").code(), StatusCode::kNotFound);
  ASSERT_TRUE(registry.Unregister(0x1000, "rdma").ok());
  EXPECT_EQ(calls, std::vector<std::string>{"rdma"});
  EXPECT_EQ(registry.size(), 1u);
  EXPECT_TRUE(registry.Pin(0x1000, 1, {.transport = "tcp"}).ok());  // reopened
  EXPECT_EQ(registry.Pin(0x1000, 1, {.transport = "rdma"}).status().code(),
            StatusCode::kPermissionDenied);

  ASSERT_TRUE(registry.Unregister(0x1000).ok());
  EXPECT_EQ(calls, (std::vector<std::string>{"rdma", "tcp"}));
  EXPECT_EQ(registry.size(), 0u);
}

TEST(LocalRegistryTest, UnregisterReportsCallbackErrorButRemovesTheRegion) {
  LocalRegistry registry;
  ASSERT_TRUE(
      registry
          .Register(Spec(0x1000, 0x1000, "rdma", [] { return InternalError("fi_close failed"); }))
          .ok());
  Status s = registry.Unregister(0x1000);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("rdma"), std::string::npos) << s;
  EXPECT_EQ(registry.size(), 0u);
}

TEST(LocalRegistryTest, UnregisterUnknownAddressSaysWhereItIs) {
  LocalRegistry registry;
  ASSERT_TRUE(registry.Register(Spec(0x1000, 0x1000)).ok());
  Status s = registry.Unregister(0x1800);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("inside [0x1000, 0x2000)"), std::string::npos) << s;
  EXPECT_EQ(registry.Unregister(0x5000).code(), StatusCode::kNotFound);
}

TEST(LocalRegistryTest, UnregisterBatchValidatesBeforeChangingAnything) {
  LocalRegistry registry;
  ASSERT_TRUE(registry.RegisterBatch({Spec(0x1000, 0x1000), Spec(0x3000, 0x1000)}).ok());
  EXPECT_EQ(registry.UnregisterBatch({0x1000, 0x9000}).code(), StatusCode::kNotFound);
  EXPECT_EQ(registry.UnregisterBatch({0x1000, 0x1000}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Snapshot().size(), 2u);  // nothing was left closing
  EXPECT_TRUE(registry.Pin(0x1000, 1).ok());
  EXPECT_TRUE(registry.UnregisterBatch({0x3000, 0x1000}).ok());
  EXPECT_EQ(registry.size(), 0u);
}

TEST(LocalRegistryTest, UnregisterBatchRemovesWhatDrainedAndNamesTheRest) {
  LocalRegistry registry({.drain_timeout = milliseconds(30)});
  ASSERT_TRUE(registry.RegisterBatch({Spec(0x1000, 0x1000), Spec(0x3000, 0x1000)}).ok());
  Result<PinGuard> pin = registry.Pin(0x3000, 1);
  ASSERT_TRUE(pin.ok());
  Status s = registry.UnregisterBatch({0x1000, 0x3000});
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s;
  EXPECT_NE(s.message().find("[0x3000, 0x4000)"), std::string::npos) << s;
  EXPECT_EQ(registry.size(), 1u);
  pin->Release();
  EXPECT_TRUE(registry.Unregister(0x3000).ok());
}

TEST(LocalRegistryTest, LookupAndSnapshotDescribeOpenRegions) {
  LocalRegistry registry;
  ASSERT_TRUE(registry.Register(Spec(0x5000, 0x1000, "tcp")).ok());
  ASSERT_TRUE(registry.Register(Spec(0x1000, 0x1000, "tcp")).ok());
  Result<BufferDesc> found = registry.Lookup(0x5fff);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->addr, 0x5000u);
  EXPECT_EQ(found->location, Location::CpuNuma(0));
  EXPECT_EQ(registry.Lookup(0x6000).status().code(), StatusCode::kNotFound);
  std::vector<BufferDesc> all = registry.Snapshot();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_LT(all[0].addr, all[1].addr);
}

TEST(LocalRegistryTest, LargeShuffledBatchesMergeAndCompactCorrectly) {
  LocalRegistry registry;
  constexpr uint64_t kCount = 10000;
  std::vector<RegionSpec> specs;
  for (uint64_t i = 0; i < kCount; ++i) specs.push_back(Spec(0x10000 + i * 0x2000, 0x1000));
  std::shuffle(specs.begin(), specs.end(), std::mt19937_64(7));
  // Interleave with regions registered before the batch.
  ASSERT_TRUE(registry.Register(Spec(0x10000 + 5 * 0x2000 + 0x1000, 0x800)).ok());
  Result<std::vector<uint64_t>> generations = registry.RegisterBatch(specs);
  ASSERT_TRUE(generations.ok()) << generations.status();
  EXPECT_EQ(registry.size(), kCount + 1);
  std::vector<BufferDesc> all = registry.Snapshot();
  ASSERT_EQ(all.size(), kCount + 1);
  for (size_t i = 1; i < all.size(); ++i) ASSERT_LT(all[i - 1].end(), all[i].addr + 1);
  for (size_t i = 0; i < specs.size(); ++i) {
    Result<PinGuard> pin = registry.Pin(specs[i].addr + 10, 100);
    ASSERT_TRUE(pin.ok()) << pin.status();
    EXPECT_EQ(pin->generation(), (*generations)[i]);
  }
  std::vector<uint64_t> half;
  for (size_t i = 0; i < specs.size(); i += 2) half.push_back(specs[i].addr);
  ASSERT_TRUE(registry.UnregisterBatch(half).ok());
  EXPECT_EQ(registry.size(), kCount / 2 + 1);
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(registry.Pin(specs[i].addr, 1).ok(), i % 2 == 1) << i;
  }
}

TEST(LocalRegistryTest, BatchJoinsSameRangeWithinItself) {
  LocalRegistry registry;
  Result<std::vector<uint64_t>> r = registry.RegisterBatch(
      {Spec(0x1000, 0x1000, "tcp"), Spec(0x5000, 0x10), Spec(0x1000, 0x1000, "rdma")});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0], (*r)[2]);
  EXPECT_EQ(registry.size(), 2u);
  EXPECT_EQ(registry.Snapshot()[0].keys.size(), 2u);
  r = registry.RegisterBatch({Spec(0x9000, 0x10, "tcp"), Spec(0x9000, 0x10, "tcp")});
  EXPECT_EQ(r.status().code(), StatusCode::kAlreadyExists);
  r = registry.RegisterBatch({Spec(0x1000, 0x1000, "shm"), Spec(0x1000, 0x1000, "rdma")});
  EXPECT_EQ(r.status().code(), StatusCode::kAlreadyExists);  // rdma already on the region
  EXPECT_EQ(registry.Snapshot()[0].keys.size(), 2u);         // and shm was not added
}

}  // namespace
}  // namespace ferry
