#include "engine/link_cache.h"

#include <gtest/gtest.h>

#include <atomic>

namespace ferry::engine {
namespace {

using namespace std::chrono_literals;

std::atomic<int> live_links{0};

struct CountedLink : PeerLink {
  CountedLink() { live_links.fetch_add(1); }
  ~CountedLink() override { live_links.fetch_sub(1); }
};

// A transport that only makes links (the cache never moves data).
class LinkOnlyTransport final : public Transport {
 public:
  std::string_view name() const override { return "fake"; }
  TransportCapabilities capabilities() const override { return {}; }
  Result<std::string> Start(TransportContext*, const TransportStartInfo&) override { return ""; }
  void Stop() override {}
  Result<std::string> RegisterMemory(uint64_t, uint64_t, const Location&, MemoryAccess) override {
    return "";
  }
  Status UnregisterMemory(uint64_t, uint64_t) override { return Status::Ok(); }
  Result<std::shared_ptr<PeerLink>> Connect(const SegmentDesc& peer) override {
    ++connects;
    if (peer.name == "down") return UnavailableError("down");
    return std::shared_ptr<PeerLink>(std::make_shared<CountedLink>());
  }
  Status Submit(PeerLink&, std::span<Slice* const>) override { return Status::Ok(); }
  Result<std::string> OnExchange(std::string_view) override { return ""; }
  int connects = 0;
};

SegmentDesc Peer(std::string name, uint64_t incarnation) {
  SegmentDesc d;
  d.name = std::move(name);
  d.incarnation = incarnation;
  return d;
}

TEST(LinkCacheTest, ReusesPerIncarnationAndReleasesOnDrop) {
  ManualClock clock;
  LinkOnlyTransport t;
  LinkCache cache(&clock);
  EXPECT_EQ(cache.Find(&t, Peer("b", 1)).status().code(), StatusCode::kNotFound);
  auto a = cache.Get(&t, Peer("b", 1));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*cache.Get(&t, Peer("b", 1)), *a);
  EXPECT_EQ(t.connects, 1);
  auto restarted = cache.Get(&t, Peer("b", 2));  // a new incarnation gets a new link
  ASSERT_TRUE(restarted.ok());
  EXPECT_NE(*restarted, *a);
  EXPECT_EQ(live_links.load(), 2);  // the old one lives while a task holds it
  a = Result<std::shared_ptr<PeerLink>>(UnavailableError("let go"));
  EXPECT_EQ(live_links.load(), 1);
  EXPECT_EQ(cache.Get(&t, Peer("down", 1)).status().code(), StatusCode::kUnavailable);
  restarted = Result<std::shared_ptr<PeerLink>>(UnavailableError("let go"));
  cache.DropPeer("b");
  EXPECT_EQ(live_links.load(), 0);
  EXPECT_EQ(cache.size(), 0u);
}

TEST(LinkCacheTest, IdleLinksGoUnlessATaskHoldsThem) {
  ManualClock clock;
  LinkOnlyTransport t;
  LinkCache cache(&clock);
  auto held = cache.Get(&t, Peer("b", 1));
  ASSERT_TRUE(cache.Get(&t, Peer("c", 1)).ok());
  clock.Advance(10s);
  EXPECT_EQ(cache.DropIdle(5s), 1u);  // c idle and unheld; b is held by `held`
  EXPECT_EQ(cache.size(), 1u);
  held = Result<std::shared_ptr<PeerLink>>(UnavailableError("let go"));
  EXPECT_EQ(cache.DropIdle(5s), 1u);
  EXPECT_EQ(live_links.load(), 0);
}

TEST(LinkCacheTest, DropsOnlyTheIncarnationAsked) {
  ManualClock clock;
  LinkOnlyTransport t;
  LinkCache cache(&clock);
  ASSERT_TRUE(cache.Get(&t, Peer("b", 2)).ok());
  cache.Drop("fake", "b", 1);  // a failure of the old incarnation leaves the new link
  EXPECT_EQ(cache.size(), 1u);
  cache.DropOtherIncarnations("b", 2);
  EXPECT_EQ(cache.size(), 1u);
  cache.DropOtherIncarnations("b", 3);
  EXPECT_EQ(cache.size(), 0u);
}

}  // namespace
}  // namespace ferry::engine
