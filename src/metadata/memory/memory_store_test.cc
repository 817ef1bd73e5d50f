#include "metadata/memory/memory_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/wait_for.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

TEST(MemoryStoreTest, ClientsOfOneNameShareKeysAndNotFoundIsDistinct) {
  auto a = CreateMemoryStore("mem-share", {});
  auto b = CreateMemoryStore("mem-share", {});
  auto other = CreateMemoryStore("mem-other", {});
  ASSERT_TRUE((*a)->Put("ferry/ram/x", "1").ok());
  ASSERT_TRUE((*a)->Put("ferry/ram/y", "2").ok());
  ASSERT_TRUE((*a)->Put("ferry/rpc_meta/x", "3").ok());
  EXPECT_EQ(*(*b)->Get("ferry/ram/x"), "1");
  EXPECT_EQ((*other)->Get("ferry/ram/x").status().code(), StatusCode::kNotFound);
  Result<std::vector<KeyValue>> listed = (*b)->List("ferry/ram/");
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(*listed, (std::vector<KeyValue>{{"ferry/ram/x", "1"}, {"ferry/ram/y", "2"}}));
  EXPECT_TRUE((*b)->Delete("ferry/ram/x").ok());
  EXPECT_TRUE((*b)->Delete("ferry/ram/x").ok());  // absent is fine
  EXPECT_EQ((*a)->Get("ferry/ram/x").status().code(), StatusCode::kNotFound);
}

TEST(MemoryStoreTest, LeasedKeysVanishWhenTheOwnerStopsRefreshingOrCloses) {
  ManualClock clock;
  StoreOptions options{.lease_ttl = 1000ms, .clock = &clock};
  auto reader = CreateMemoryStore("mem-lease", options);
  {
    auto owner = CreateMemoryStore("mem-lease", options);
    ASSERT_TRUE((*owner)->Put("k", "v", {.leased = true}).ok());
    ASSERT_TRUE((*owner)->Put("plain", "v").ok());
    (*owner)->Abandon();
    clock.Advance(999ms);
    EXPECT_TRUE((*reader)->Get("k").ok());
    clock.Advance(1ms);
    EXPECT_EQ((*reader)->Get("k").status().code(), StatusCode::kNotFound);
    EXPECT_TRUE((*reader)->Get("plain").ok());  // not leased: stays
  }
  {
    auto owner = CreateMemoryStore("mem-lease", options);
    ASSERT_TRUE((*owner)->Put("k2", "v", {.leased = true}).ok());
  }  // clean shutdown deletes leased keys
  EXPECT_EQ((*reader)->Get("k2").status().code(), StatusCode::kNotFound);
}

TEST(MemoryStoreTest, WatchDeliversPutsAndDeletesInOrderAndStopsOnDestruction) {
  auto store = CreateMemoryStore("mem-watch", {});
  Mutex mu;
  std::vector<std::string> seen;
  auto watch = (*store)->watcher()->Watch("p/", [&](const WatchEvent& e) {
    MutexLock lock(mu);
    seen.push_back((e.type == WatchEvent::Type::kPut ? "put " : "del ") + e.key + "=" + e.value);
  });
  ASSERT_TRUE(watch.ok());
  ASSERT_TRUE((*store)->Put("p/a", "1").ok());
  ASSERT_TRUE((*store)->Put("q/ignored", "1").ok());
  ASSERT_TRUE((*store)->Delete("p/a").ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        MutexLock lock(mu);
        return seen.size() == 2;
      },
      5s));
  watch->reset();
  // A watch that is still there sees p/b: once it did, the gone one would have too.
  std::atomic<bool> later_saw_b{false};
  auto still_there = (*store)->watcher()->Watch("p/", [&](const WatchEvent& e) {
    if (e.key == "p/b") later_saw_b = true;
  });
  ASSERT_TRUE(still_there.ok());
  ASSERT_TRUE((*store)->Put("p/b", "2").ok());
  ASSERT_TRUE(WaitFor([&] { return later_saw_b.load(); }, 5s));
  MutexLock lock(mu);
  EXPECT_EQ(seen, (std::vector<std::string>{"put p/a=1", "del p/a="}));
}

}  // namespace
}  // namespace ferry
