// Shared watches (shared_watch.h) against real etcd and redis servers: the clients of one
// connection in a process share one stream, every watcher sees every change made after its
// Watch returned, a destroyed handle gets nothing more, a callback may destroy another handle,
// and the last handle stops the stream.
#include "metadata/shared_watch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/wait_for.h"
#include "metadata/store_factory.h"
#include "test_servers.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

// The keys of the kPut events one watcher saw.
class Seen {
 public:
  WatchCallback Callback() {
    return [this](const WatchEvent& e) {
      if (e.type != WatchEvent::Type::kPut) return;
      MutexLock lock(mu_);
      keys_.push_back(e.key);
    };
  }
  bool Has(const std::string& key) const {
    MutexLock lock(mu_);
    return std::find(keys_.begin(), keys_.end(), key) != keys_.end();
  }

 private:
  mutable Mutex mu_;
  std::vector<std::string> keys_ GUARDED_BY(mu_);
};

void CheckSharing(const std::string& connection) {
  ASSERT_EQ(SharedWatchStreams(), 0u);
  StoreOptions options;
  StoreOptions other = options;
  other.request_timeout = options.request_timeout + 1ms;  // not interchangeable: its own stream
  auto a = CreateMetadataStore(connection, options);
  auto b = CreateMetadataStore(connection, options);
  auto c = CreateMetadataStore(connection, other);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(c.ok()) << c.status();
  Seen seen_a, seen_b, seen_c, seen_d;
  auto ha = (*a)->watcher()->Watch("w/", seen_a.Callback());
  ASSERT_TRUE(ha.ok()) << ha.status();
  auto hb = (*b)->watcher()->Watch("w/", seen_b.Callback());
  ASSERT_TRUE(hb.ok()) << hb.status();
  auto hc = (*c)->watcher()->Watch("w/", seen_c.Callback());
  ASSERT_TRUE(hc.ok()) << hc.status();
  EXPECT_EQ(SharedWatchStreams(), 2u) << "a and b share one stream, c has its own";

  // A change made right after b joined the live stream reaches every watcher.
  ASSERT_TRUE((*c)->Put("w/one", "1").ok());
  ASSERT_TRUE(WaitFor([&] { return seen_a.Has("w/one") && seen_b.Has("w/one"); }, 10s));
  ASSERT_TRUE(WaitFor([&] { return seen_c.Has("w/one"); }, 10s));
  ASSERT_TRUE((*a)->Put("other/x", "1").ok());  // outside the prefix: nobody sees it

  // A destroyed handle gets nothing more; the others keep receiving.
  hb->reset();
  ASSERT_TRUE((*c)->Put("w/two", "2").ok());
  ASSERT_TRUE(WaitFor([&] { return seen_a.Has("w/two") && seen_c.Has("w/two"); }, 10s));
  EXPECT_FALSE(seen_b.Has("w/two"));
  EXPECT_FALSE(seen_a.Has("other/x"));

  // The stream was started by a's store; destroying that store (an engine shutting down while
  // others of the process still watch) leaves the stream running for every watcher.
  a->reset();
  ASSERT_TRUE((*c)->Put("w/after", "x").ok());
  ASSERT_TRUE(WaitFor([&] { return seen_a.Has("w/after") && seen_c.Has("w/after"); }, 10s));

  // A callback may destroy another handle of its own stream (no deadlock), which then gets
  // nothing more.
  auto hd = (*b)->watcher()->Watch("w/", seen_d.Callback());
  ASSERT_TRUE(hd.ok()) << hd.status();
  Seen seen_e;
  std::unique_ptr<WatchHandle>* victim = &*hd;
  Mutex victim_mu;
  auto he = (*b)->watcher()->Watch("w/", [&](const WatchEvent& e) {
    if (e.key == "w/kill") {
      MutexLock lock(victim_mu);
      victim->reset();
    }
    seen_e.Callback()(e);
  });
  ASSERT_TRUE(he.ok()) << he.status();
  EXPECT_EQ(SharedWatchStreams(), 2u);
  ASSERT_TRUE((*c)->Put("w/kill", "k").ok());
  ASSERT_TRUE(WaitFor([&] { return seen_e.Has("w/kill"); }, 10s));
  ASSERT_TRUE((*c)->Put("w/three", "3").ok());
  ASSERT_TRUE(WaitFor([&] { return seen_a.Has("w/three") && seen_e.Has("w/three"); }, 10s));
  EXPECT_FALSE(seen_d.Has("w/three"));

  // The last handle of a stream stops it.
  ha->reset();
  he->reset();
  EXPECT_EQ(SharedWatchStreams(), 1u);
  hc->reset();
  EXPECT_EQ(SharedWatchStreams(), 0u);
}

TEST(SharedWatchTest, EtcdClientsOfOneConnectionShareOneStream) {
  auto etcd = testing::EtcdServer::Start();
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  CheckSharing("etcd://" + (*etcd)->endpoint());
}

// Watches started and destroyed concurrently from several threads, through several clients of
// one connection, while a long-lived watcher holds the stream: never a second stream, and the
// long-lived watcher keeps receiving. (Run under TSan by CI.)
TEST(SharedWatchTest, ConcurrentWatchAndDestroyShareOneStream) {
  auto etcd = testing::EtcdServer::Start();
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  const std::string connection = "etcd://" + (*etcd)->endpoint();
  ASSERT_EQ(SharedWatchStreams(), 0u);
  std::vector<std::unique_ptr<MetadataStore>> stores;
  for (int i = 0; i < 3; ++i) {
    auto store = CreateMetadataStore(connection, StoreOptions{});
    ASSERT_TRUE(store.ok()) << store.status();
    stores.push_back(std::move(store).value());
  }
  Seen kept;
  auto keeper = stores[0]->watcher()->Watch("c/", kept.Callback());
  ASSERT_TRUE(keeper.ok()) << keeper.status();
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      Seen seen;
      for (int i = 0; i < 20; ++i) {
        auto h = stores[(t + i) % stores.size()]->watcher()->Watch("c/", seen.Callback());
        if (!h.ok() || SharedWatchStreams() != 1) ++failures;
      }
    });
  }
  ASSERT_TRUE(stores[2]->Put("c/during", "x").ok());
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0) << "a Watch failed or started a second stream";
  ASSERT_TRUE(stores[1]->Put("c/after", "x").ok());
  ASSERT_TRUE(WaitFor([&] { return kept.Has("c/during") && kept.Has("c/after"); }, 10s));
  keeper->reset();
  EXPECT_EQ(SharedWatchStreams(), 0u);
}

TEST(SharedWatchTest, RedisClientsOfOneConnectionShareOneStream) {
  auto redis = testing::RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status();
  CheckSharing("redis://" + (*redis)->endpoint());
}

}  // namespace
}  // namespace ferry
