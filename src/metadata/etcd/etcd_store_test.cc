// The etcd plug-in against a real etcd (tests/support): data operations, NotFound vs
// Unavailable, failover, leases across crashes, restarts and lost leases, watches across
// restarts and compaction, and (from a small local HTTP server, since etcd never sends them)
// malformed and oversized replies.
#include "metadata/etcd/etcd_store.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "core/base64.h"
#include "metadata/etcd/etcd_client.h"
#include "metadata/etcd/etcd_watch.h"
#include "test_servers.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;
using testing::EtcdServer;
using testing::WaitFor;

constexpr milliseconds kTimeout{1000};
constexpr milliseconds kTtl{2000};  // etcd's smallest lease TTL (it raises 1 s to 2 s)

StoreOptions Options(milliseconds timeout = kTimeout, milliseconds ttl = kTtl) {
  return StoreOptions{.request_timeout = timeout, .lease_ttl = ttl};
}

std::unique_ptr<MetadataStore> MakeStore(const std::vector<HostPort>& endpoints,
                                         StoreOptions options = Options()) {
  Result<std::unique_ptr<MetadataStore>> store = CreateEtcdStore(endpoints, options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

milliseconds Since(SteadyClock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(SteadyClock::now() - start);
}

// A port nothing listens on.
uint16_t DeadPort() {
  Result<uint16_t> port = testing::PickFreePort();
  EXPECT_TRUE(port.ok()) << port.status();
  return port.value_or(1);
}

// An endpoint that accepts connections (the backlog) but never answers them.
class HungListener {
 public:
  HungListener() {
    Result<std::unique_ptr<testing::SilentListener>> listener = testing::SilentListener::Start();
    EXPECT_TRUE(listener.ok()) << listener.status();
    if (listener.ok()) listener_ = std::move(*listener);
  }
  HostPort endpoint() const { return {"127.0.0.1", listener_ ? listener_->port() : uint16_t{1}}; }
  // True once a client has sent its request here (and now waits for the answer).
  bool WaitForRequest(milliseconds limit) {
    return listener_ != nullptr && listener_->WaitForRequest(limit);
  }

 private:
  std::unique_ptr<testing::SilentListener> listener_;
};

// Records watch events; thread-safe.
class EventLog {
 public:
  WatchCallback Callback() {
    return [this](const WatchEvent& e) {
      MutexLock lock(mu_);
      events_.push_back(e);
    };
  }
  std::vector<WatchEvent> Events() const {
    MutexLock lock(mu_);
    return events_;
  }
  size_t size() const {
    MutexLock lock(mu_);
    return events_.size();
  }
  bool WaitForCount(size_t n, milliseconds limit) const {
    return WaitFor([&] { return size() >= n; }, limit);
  }
  // True once an event for `key` arrived.
  bool WaitForKey(std::string_view key, milliseconds limit) const {
    return WaitFor(
        [&] {
          MutexLock lock(mu_);
          for (const WatchEvent& e : events_) {
            if (e.key == key) return true;
          }
          return false;
        },
        limit);
  }

 private:
  mutable Mutex mu_;
  std::vector<WatchEvent> events_ GUARDED_BY(mu_);
};

std::string Describe(const std::vector<WatchEvent>& events) {
  std::string out;
  for (const WatchEvent& e : events) {
    out += (e.type == WatchEvent::Type::kPut ? "put " : "delete ") + e.key;
    if (e.type == WatchEvent::Type::kPut) out += "=" + e.value;
    out += "; ";
  }
  return out;
}

class EtcdStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<EtcdServer>> etcd = EtcdServer::Start();
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = std::move(*etcd);
    ASSERT_TRUE(WaitUntilServing());
    store_ = MakeStore({endpoint()});
    ASSERT_NE(store_, nullptr);
  }

  // etcd accepts connections a moment before it answers them (after a start or restart).
  bool WaitUntilServing() {
    auto probe = MakeStore({endpoint()});
    return WaitFor(
        [&] {
          StatusCode code = probe->Get("probe").status().code();
          return code == StatusCode::kOk || code == StatusCode::kNotFound;
        },
        10s);
  }

  HostPort endpoint() const { return {"127.0.0.1", etcd_->port()}; }

  // A second client, as another process would see the store.
  std::unique_ptr<MetadataStore> Observer() { return MakeStore({endpoint()}); }

  bool Exists(MetadataStore& store, std::string_view key) { return store.Get(key).ok(); }

  // Attaches `key` to a new lease of `ttl_seconds` that nobody keeps alive. Once the key is gone,
  // every lease granted before it with no longer a TTL has expired too, unless it was kept
  // alive: a test waits for that expiry (etcd's own event), not for the time.
  void PutUnrefreshed(std::string_view key, int64_t ttl_seconds) {
    EtcdClient client({endpoint()}, kTimeout);
    Result<EtcdClient::Lease> lease = client.LeaseGrant(ttl_seconds);
    ASSERT_TRUE(lease.ok()) << lease.status();
    ASSERT_TRUE(client.Put(key, "reference", lease->id).ok());
  }

  std::unique_ptr<EtcdServer> etcd_;
  std::unique_ptr<MetadataStore> store_;
};

TEST_F(EtcdStoreTest, PutGetListDelete) {
  EXPECT_EQ(store_->scheme(), "etcd");
  const std::string binary("\0\xff\x01 value", 9);
  ASSERT_TRUE(store_->Put("a/2", binary).ok());
  ASSERT_TRUE(store_->Put("a/1", "one").ok());
  ASSERT_TRUE(store_->Put("a/", "").ok());
  ASSERT_TRUE(store_->Put("b/1", "other").ok());

  Result<std::string> got = store_->Get("a/2");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, binary);
  got = store_->Get("a/");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "");

  Result<std::vector<KeyValue>> list = store_->List("a/");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(*list, (std::vector<KeyValue>{{"a/", ""}, {"a/1", "one"}, {"a/2", binary}}));
  list = store_->List("");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->size(), 4u);
  list = store_->List("zz");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_TRUE(list->empty());

  ASSERT_TRUE(store_->Put("a/1", "uno").ok());
  EXPECT_EQ(store_->Get("a/1").value_or(""), "uno");
  ASSERT_TRUE(store_->Delete("a/1").ok());
  EXPECT_EQ(store_->Get("a/1").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store_->Delete("a/1").ok()) << "deleting an absent key is OK";
  EXPECT_EQ(store_->Get("never").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->Get("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Put("", "x").code(), StatusCode::kInvalidArgument);
}

TEST_F(EtcdStoreTest, ListPrefixEndingIn0xff) {
  ASSERT_TRUE(store_->Put("p\xff", "1").ok());
  ASSERT_TRUE(store_->Put("p\xff\x01", "2").ok());
  ASSERT_TRUE(store_->Put("q", "3").ok());
  Result<std::vector<KeyValue>> list = store_->List("p\xff");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(*list, (std::vector<KeyValue>{{"p\xff", "1"}, {"p\xff\x01", "2"}}));
  EXPECT_EQ(EtcdPrefixEnd("p\xff"), "q");
  EXPECT_EQ(EtcdPrefixEnd("\xff\xff"), std::string(1, '\0'));
}

TEST_F(EtcdStoreTest, OversizedValueIsAnErrorNotACrash) {
  const std::string big(2 << 20, 'v');  // over etcd's 1.5 MiB request limit
  Status s = store_->Put("big", big);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  // It says which key, how large, and which limit (a 10,000-buffer descriptor with two keys per
  // buffer is past it: bench/scale.sh).
  EXPECT_NE(s.message().find("'big' (2097152 bytes)"), std::string::npos) << s;
  EXPECT_NE(s.message().find("--max-request-bytes"), std::string::npos) << s;
  EXPECT_TRUE(store_->Put("small", "ok").ok());
  // A conditional, leased write carries the value it replaces too: both sizes are named.
  const std::string half(1 << 20, 'h');
  ASSERT_TRUE(store_->Put("half", half, {.leased = true}).ok());
  s = store_->Put("half", half + "x", {.leased = true, .replaces = half});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("plus the 1048576 bytes it replaces"), std::string::npos) << s;
  EXPECT_NE(s.message().find("--max-request-bytes"), std::string::npos) << s;
}

TEST_F(EtcdStoreTest, StoppedServerIsUnavailableWithinTimeout) {
  ASSERT_TRUE(store_->Put("k", "v").ok());
  etcd_->Kill();
  const auto start = SteadyClock::now();
  Result<std::string> got = store_->Get("k");
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable) << got.status();
  EXPECT_NE(got.status().message().find(endpoint().ToString()), std::string::npos) << got.status();
  EXPECT_EQ(store_->Put("k", "v").code(), StatusCode::kUnavailable);
  EXPECT_EQ(store_->Put("l", "v", {.leased = true}).code(), StatusCode::kUnavailable);
  EXPECT_EQ(store_->Delete("k").code(), StatusCode::kUnavailable);
  EXPECT_EQ(store_->List("").status().code(), StatusCode::kUnavailable);
  EXPECT_LT(Since(start), 5 * kTimeout);

  ASSERT_TRUE(etcd_->Relaunch().ok());
  ASSERT_TRUE(WaitUntilServing());
  Result<std::string> again = store_->Get("k");
  EXPECT_EQ(again.value_or(""), "v") << "etcd is back: " << again.status();
}

TEST_F(EtcdStoreTest, SilentServerTimesOutAsUnavailable) {
  HungListener hung;
  auto store = MakeStore({hung.endpoint()}, Options(500ms));
  const auto start = SteadyClock::now();
  Result<std::string> got = store->Get("k");
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable) << got.status();
  EXPECT_GE(Since(start), 400ms);
  EXPECT_LT(Since(start), 2000ms);
}

TEST_F(EtcdStoreTest, FailsOverToTheNextEndpointAndRemembersIt) {
  auto store = MakeStore({{"127.0.0.1", DeadPort()}, endpoint()});
  ASSERT_TRUE(store->Put("f", "1").ok());
  EXPECT_EQ(store->Get("f").value_or(""), "1");

  HungListener hung;
  store = MakeStore({hung.endpoint(), endpoint()}, Options(1000ms));
  auto start = SteadyClock::now();
  EXPECT_EQ(store->Get("f").value_or(""), "1");
  EXPECT_GE(Since(start), 900ms) << "the silent endpoint was tried first";
  start = SteadyClock::now();
  EXPECT_EQ(store->Get("f").value_or(""), "1");
  EXPECT_LT(Since(start), 800ms) << "the endpoint that answered is tried first next time";
}

TEST_F(EtcdStoreTest, AllEndpointsDownNamesEach) {
  const HostPort a{"127.0.0.1", DeadPort()};
  const HostPort b{"127.0.0.1", DeadPort()};
  auto store = MakeStore({a, b});
  Status s = store->Put("k", "v");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find(a.ToString()), std::string::npos) << s;
  EXPECT_NE(s.message().find(b.ToString()), std::string::npos) << s;
}

TEST_F(EtcdStoreTest, LeasedKeyIsKeptAliveAndVanishesAfterAbandon) {
  ASSERT_TRUE(store_->Put("lease/a", "alive", {.leased = true}).ok());
  auto observer = Observer();
  // Granted after the store's lease, with the same TTL: the store's lease outlives it only if
  // the store keeps it alive.
  ASSERT_NO_FATAL_FAILURE(PutUnrefreshed("lease/reference", kTtl.count() / 1000));
  ASSERT_TRUE(WaitFor([&] { return !Exists(*observer, "lease/reference"); }, kTtl + 3s));
  EXPECT_TRUE(Exists(*observer, "lease/a")) << "the keeper refreshes the lease";

  store_->Abandon();
  store_.reset();  // Abandon()ed: the destructor leaves the lease alone
  EXPECT_TRUE(Exists(*observer, "lease/a")) << "an abandoned key lives until its TTL runs out";
  const auto start = SteadyClock::now();
  EXPECT_TRUE(WaitFor([&] { return !Exists(*observer, "lease/a"); }, kTtl + 3s));
  EXPECT_LT(Since(start), kTtl + 3s);
}

TEST_F(EtcdStoreTest, LeasedKeySurvivesEtcdRestart) {
  ASSERT_TRUE(store_->Put("lease/r", "v", {.leased = true}).ok());
  ASSERT_TRUE(etcd_->Restart().ok());
  ASSERT_TRUE(WaitUntilServing());
  auto observer = Observer();
  EXPECT_TRUE(WaitFor([&] { return Exists(*observer, "lease/r"); }, 5s));
  // A restarted etcd extends every lease by its election timeout (1 s) before expiring any: the
  // reference lease, granted after the restart, lasts that much longer than the TTL.
  ASSERT_NO_FATAL_FAILURE(PutUnrefreshed("lease/reference", kTtl.count() / 1000 + 1));
  ASSERT_TRUE(WaitFor([&] { return !Exists(*observer, "lease/reference"); }, kTtl + 4s));
  EXPECT_EQ(observer->Get("lease/r").value_or(""), "v") << "still kept alive after the restart";
}

// The lease of a key, read straight from etcd.
int64_t LeaseOf(EtcdClient& client, std::string_view key) {
  Result<nlohmann::json> reply =
      client.Call("/v3/kv/range", nlohmann::json{{"key", Base64Encode(key)}});
  if (!reply.ok() || !reply->contains("kvs")) return 0;
  return EtcdInt64Field((*reply)["kvs"][0], "lease").value_or(0);
}

TEST_F(EtcdStoreTest, LostLeaseIsRegrantedAndKeysRewritten) {
  ASSERT_TRUE(store_->Put("lease/x", "1", {.leased = true}).ok());
  ASSERT_TRUE(store_->Put("lease/y", "2", {.leased = true}).ok());
  EtcdClient client({endpoint()}, kTimeout);
  const int64_t lease = LeaseOf(client, "lease/x");
  ASSERT_NE(lease, 0);
  EXPECT_EQ(LeaseOf(client, "lease/y"), lease) << "one lease per client";

  // What an expiry during an outage looks like: etcd drops the lease and its keys.
  ASSERT_TRUE(client.LeaseRevoke(lease).ok());
  auto observer = Observer();
  EXPECT_FALSE(Exists(*observer, "lease/x"));
  EXPECT_TRUE(
      WaitFor([&] { return Exists(*observer, "lease/x") && Exists(*observer, "lease/y"); }, 3s));
  const int64_t regranted = LeaseOf(client, "lease/x");
  EXPECT_NE(regranted, 0);
  EXPECT_NE(regranted, lease);
  EXPECT_EQ(observer->Get("lease/y").value_or(""), "2");

  // A leased Put right after another loss grants again instead of failing.
  ASSERT_TRUE(client.LeaseRevoke(regranted).ok());
  EXPECT_TRUE(store_->Put("lease/z", "3", {.leased = true}).ok());
  EXPECT_TRUE(WaitFor([&] { return Exists(*observer, "lease/x"); }, 3s));
}

TEST_F(EtcdStoreTest, DestructorRevokesLeasedKeysOnly) {
  auto observer = Observer();
  ASSERT_TRUE(store_->Put("d/leased", "1", {.leased = true}).ok());
  ASSERT_TRUE(store_->Put("d/plain", "2").ok());
  ASSERT_TRUE(store_->Put("d/demoted", "3", {.leased = true}).ok());
  ASSERT_TRUE(store_->Put("d/demoted", "3").ok());  // re-put without a lease: no longer owned
  ASSERT_TRUE(store_->Put("d/deleted", "4", {.leased = true}).ok());
  ASSERT_TRUE(store_->Delete("d/deleted").ok());
  ASSERT_TRUE(observer->Put("d/deleted", "5").ok());

  const auto start = SteadyClock::now();
  store_.reset();
  EXPECT_LT(Since(start), kTimeout + 500ms);
  EXPECT_EQ(observer->Get("d/leased").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(observer->Get("d/plain").value_or(""), "2");
  EXPECT_EQ(observer->Get("d/demoted").value_or(""), "3");
  EXPECT_EQ(observer->Get("d/deleted").value_or(""), "5");
}

// The stores of one process share one lease, kept alive by one thread. One store's Abandon (a
// crash) leaves its keys to expire without taking the others' with it, nor keeping its own alive
// on the others' lease; one store's clean close deletes its own keys only.
TEST_F(EtcdStoreTest, StoresOfOneProcessShareOneLease) {
  auto crashing = MakeStore({endpoint()});
  auto closing = MakeStore({endpoint()});
  ASSERT_TRUE(store_->Put("share/a", "1", {.leased = true}).ok());
  ASSERT_TRUE(crashing->Put("share/b", "2", {.leased = true}).ok());
  ASSERT_TRUE(closing->Put("share/c", "3", {.leased = true}).ok());
  EtcdClient client({endpoint()}, kTimeout);
  const int64_t lease = LeaseOf(client, "share/a");
  ASSERT_NE(lease, 0);
  EXPECT_EQ(LeaseOf(client, "share/b"), lease);
  EXPECT_EQ(LeaseOf(client, "share/c"), lease);

  crashing->Abandon();
  crashing.reset();
  EXPECT_EQ(crashing, nullptr);
  auto observer = Observer();
  // The survivors' keys move to a new lease at once; the abandoned key stays on the dropped one.
  ASSERT_TRUE(WaitFor(
      [&] {
        const int64_t a = LeaseOf(client, "share/a");
        return a != 0 && a != lease && LeaseOf(client, "share/c") == a;
      },
      kTtl));
  EXPECT_EQ(LeaseOf(client, "share/b"), lease);
  EXPECT_TRUE(WaitFor([&] { return !Exists(*observer, "share/b"); }, kTtl + 3s))
      << "an abandoned store's key expires although the process keeps a lease alive";
  EXPECT_EQ(observer->Get("share/a").value_or(""), "1");
  EXPECT_EQ(observer->Get("share/c").value_or(""), "3");
  EXPECT_TRUE(crashing == nullptr && store_->Put("share/a", "1b", {.leased = true}).ok());

  closing.reset();
  EXPECT_EQ(observer->Get("share/c").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(observer->Get("share/a").value_or(""), "1b") << "another store's close leaves it";
}

TEST_F(EtcdStoreTest, DestructorIsBoundedWhenEtcdIsDown) {
  ASSERT_TRUE(store_->Put("d/k", "1", {.leased = true}).ok());
  etcd_->Kill();
  const auto start = SteadyClock::now();
  store_.reset();
  EXPECT_LT(Since(start), kTimeout + 1s);
}

TEST_F(EtcdStoreTest, WatchSeesPutAndDeleteInOrder) {
  ASSERT_TRUE(store_->Put("w/before", "old").ok());
  ASSERT_NE(store_->watcher(), nullptr);
  EventLog log;
  auto handle = store_->watcher()->Watch("w/", log.Callback());
  ASSERT_TRUE(handle.ok()) << handle.status();

  ASSERT_TRUE(store_->Put("w/a", "1").ok());
  EXPECT_TRUE(log.WaitForCount(1, 1s)) << "a put shows within 1 s";
  ASSERT_TRUE(store_->Put("x/outside", "no").ok());
  ASSERT_TRUE(store_->Put("w/b", "2").ok());
  ASSERT_TRUE(store_->Delete("w/a").ok());
  EXPECT_TRUE(log.WaitForCount(3, 1s)) << "a delete shows within 1 s";
  EXPECT_EQ(Describe(log.Events()), "put w/a=1; put w/b=2; delete w/a; ");
}

TEST_F(EtcdStoreTest, WatchResumesAfterEtcdRestart) {
  EventLog log;
  auto handle = store_->watcher()->Watch("w/", log.Callback());
  ASSERT_TRUE(handle.ok()) << handle.status();
  ASSERT_TRUE(store_->Put("w/1", "a").ok());
  ASSERT_TRUE(log.WaitForCount(1, 1s));

  ASSERT_TRUE(etcd_->Restart().ok());
  ASSERT_TRUE(WaitUntilServing());
  ASSERT_TRUE(store_->Put("w/2", "b").ok());
  ASSERT_TRUE(store_->Delete("w/1").ok());
  EXPECT_TRUE(log.WaitForCount(3, 5s));
  // Events come in revision order: a repeat of an earlier change would come before this one.
  ASSERT_TRUE(store_->Put("w/marker", "m").ok());
  EXPECT_TRUE(log.WaitForKey("w/marker", 5s));
  EXPECT_EQ(Describe(log.Events()), "put w/1=a; put w/2=b; delete w/1; put w/marker=m; ")
      << "resumed from the next revision: nothing lost, nothing repeated";
}

TEST_F(EtcdStoreTest, WatchResyncsWhenItsRevisionWasCompacted) {
  EtcdClient client({endpoint()}, kTimeout);
  ASSERT_TRUE(store_->Put("c/a", "1").ok());
  ASSERT_TRUE(store_->Put("c/b", "2").ok());
  ASSERT_TRUE(store_->Delete("c/a").ok());
  ASSERT_TRUE(store_->Put("c/c", "3").ok());
  Result<int64_t> revision = client.CurrentRevision("c/");
  ASSERT_TRUE(revision.ok()) << revision.status();
  ASSERT_TRUE(
      client.Call("/v3/kv/compaction", nlohmann::json{{"revision", std::to_string(*revision)}})
          .ok());

  EventLog log;
  auto handle =
      StartEtcdWatchAt(std::make_shared<EtcdClient>(std::vector<HostPort>{endpoint()}, kTimeout),
                       "c/", log.Callback(), /*start_revision=*/1);
  ASSERT_TRUE(handle.ok()) << handle.status();
  EXPECT_TRUE(log.WaitForCount(2, 2s));
  ASSERT_TRUE(store_->Put("c/d", "4").ok());
  EXPECT_TRUE(log.WaitForCount(3, 2s));
  EXPECT_EQ(Describe(log.Events()), "put c/b=2; put c/c=3; put c/d=4; ")
      << "every key as a put, then changes after the listing";
}

TEST_F(EtcdStoreTest, DestroyingWatchStopsDeliveryPromptly) {
  EventLog log;
  auto handle = store_->watcher()->Watch("s/", log.Callback());
  ASSERT_TRUE(handle.ok()) << handle.status();
  ASSERT_TRUE(store_->Put("s/1", "x").ok());
  ASSERT_TRUE(log.WaitForCount(1, 1s));

  auto start = SteadyClock::now();
  handle->reset();
  EXPECT_LT(Since(start), 500ms);
  // A watch that is still there sees s/2: once it did, the gone one would have too.
  EventLog later;
  auto still_there = store_->watcher()->Watch("s/", later.Callback());
  ASSERT_TRUE(still_there.ok()) << still_there.status();
  ASSERT_TRUE(store_->Put("s/2", "x").ok());
  ASSERT_TRUE(later.WaitForKey("s/2", 1s));
  EXPECT_EQ(log.size(), 1u) << "no callback after the handle is gone";
  still_there->reset();

  // Also while reconnecting to a dead etcd, and while stuck on a silent endpoint.
  handle = store_->watcher()->Watch("s/", log.Callback());
  ASSERT_TRUE(handle.ok());
  const uint16_t etcd_port = etcd_->port();
  etcd_->Kill();
  // What listens on the dead etcd's port now closes every connection at once, as a dead etcd
  // would refuse it: an attempt arriving there shows the watch is reconnecting.
  Result<std::unique_ptr<testing::SilentListener>> dead = testing::SilentListener::Start(etcd_port);
  ASSERT_TRUE(dead.ok()) << dead.status();
  ASSERT_TRUE((*dead)->CloseConnections(1, 5s)) << "the watch never tried to reconnect";
  start = SteadyClock::now();
  handle->reset();
  EXPECT_LT(Since(start), 500ms);

  HungListener hung;
  auto stuck = StartEtcdWatchAt(
      std::make_shared<EtcdClient>(std::vector<HostPort>{hung.endpoint()}, kTimeout), "s/",
      log.Callback(), 1);
  ASSERT_TRUE(stuck.ok());
  ASSERT_TRUE(hung.WaitForRequest(5s)) << "the watch never sent its request";
  start = SteadyClock::now();
  stuck->reset();
  EXPECT_LT(Since(start), 500ms);
}

TEST_F(EtcdStoreTest, WatchFailsOverFromASilentEndpoint) {
  HungListener hung;
  EtcdClient probe({endpoint()}, kTimeout);
  Result<int64_t> revision = probe.CurrentRevision("v/");
  ASSERT_TRUE(revision.ok()) << revision.status();
  EventLog log;
  // The silent endpoint comes first; the stream gives up on it after its silence timeout (10 s).
  auto handle = StartEtcdWatchAt(
      std::make_shared<EtcdClient>(std::vector<HostPort>{hung.endpoint(), endpoint()}, 500ms), "v/",
      log.Callback(), *revision + 1);
  ASSERT_TRUE(handle.ok());
  ASSERT_TRUE(store_->Put("v/1", "x").ok());
  EXPECT_TRUE(log.WaitForCount(1, 13s));
  EXPECT_EQ(Describe(log.Events()), "put v/1=x; ");
}

TEST_F(EtcdStoreTest, WatchOutlivesItsStore) {
  EventLog log;
  auto handle = store_->watcher()->Watch("o/", log.Callback());
  ASSERT_TRUE(handle.ok());
  store_.reset();
  auto writer = Observer();
  ASSERT_TRUE(writer->Put("o/1", "x").ok());
  EXPECT_TRUE(log.WaitForCount(1, 1s));
}

// ---- malformed replies --------------------------------------------------------------------

// A local HTTP server answering every POST with a configurable reply.
class FakeEtcd {
 public:
  FakeEtcd() {
    server_.Post(".*", [this](const httplib::Request&, httplib::Response& res) {
      MutexLock lock(mu_);
      ++requests_;
      res.status = status_;
      if (huge_bytes_ > 0) {
        const size_t total = huge_bytes_;
        res.set_chunked_content_provider(
            "application/json", [total, sent = size_t{0}](size_t, httplib::DataSink& sink) mutable {
              static const std::string chunk = "{\"a\":\"" + std::string(1 << 20, 'x');
              if (sent >= total) {
                sink.done();
                return true;
              }
              sent += chunk.size();
              return sink.write(chunk.data(), chunk.size());
            });
      } else {
        res.set_content(body_, "application/json");
      }
    });
    port_ = static_cast<uint16_t>(server_.bind_to_any_port("127.0.0.1"));
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~FakeEtcd() {
    // stop() only works once the accept loop runs.
    WaitFor([this] { return server_.is_running(); }, 5s);
    server_.stop();
    thread_.join();
  }
  void Reply(int status, std::string body, size_t huge_bytes = 0) {
    MutexLock lock(mu_);
    status_ = status;
    body_ = std::move(body);
    huge_bytes_ = huge_bytes;
  }
  HostPort endpoint() const { return {"127.0.0.1", port_}; }
  // Requests answered so far.
  size_t requests() {
    MutexLock lock(mu_);
    return requests_;
  }

 private:
  httplib::Server server_;
  uint16_t port_ = 0;
  std::thread thread_;
  Mutex mu_;
  int status_ GUARDED_BY(mu_) = 200;
  std::string body_ GUARDED_BY(mu_);
  size_t huge_bytes_ GUARDED_BY(mu_) = 0;
  size_t requests_ GUARDED_BY(mu_) = 0;
};

TEST(EtcdStoreMalformedTest, GarbageRepliesAreErrorsNotCrashes) {
  FakeEtcd fake;
  auto store = MakeStore({fake.endpoint()}, Options(2000ms));
  struct Case {
    int status;
    std::string body;
    StatusCode want;
  };
  const std::vector<Case> cases = {
      {200, "not json", StatusCode::kInternal},
      {200, "[1,2]", StatusCode::kInternal},
      {200, "{\"kvs\":\"nope\"}", StatusCode::kInternal},
      {200, "{\"kvs\":[{\"key\":\"!!\"}]}", StatusCode::kInternal},
      {200, "{\"kvs\":[{\"key\":\"YQ==\",\"value\":5}]}", StatusCode::kInternal},
      {200, "{\"kvs\":[7]}", StatusCode::kInternal},
      {200, "{\"header\":{\"revision\":\"x\"},\"kvs\":[]}", StatusCode::kInternal},
      {200, "{\"header\":[]}", StatusCode::kInternal},
      {404, "<html>no</html>", StatusCode::kInternal},
      {503, "busy", StatusCode::kUnavailable},
      {400, "{\"error\":\"bad\",\"code\":3}", StatusCode::kInvalidArgument},
      {200, "{\"error\":{\"grpc_code\":14,\"message\":\"down\"}}", StatusCode::kUnavailable},
  };
  for (const Case& c : cases) {
    fake.Reply(c.status, c.body);
    Result<std::vector<KeyValue>> list = store->List("a");
    EXPECT_EQ(list.status().code(), c.want) << c.body << " -> " << list.status();
    EXPECT_FALSE(store->Get("a").ok()) << c.body;
  }
  fake.Reply(200, "{}");
  EXPECT_EQ(store->Get("a").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->Put("a", "v", {.leased = true}).code(), StatusCode::kInternal)
      << "a lease grant without an ID";
  fake.Reply(200, "{\"ID\":\"-\",\"TTL\":\"2\"}");
  EXPECT_EQ(store->Put("a", "v", {.leased = true}).code(), StatusCode::kInternal);

  fake.Reply(200, "", /*huge_bytes=*/kMaxEtcdReplyBytes + (4 << 20));
  Result<std::vector<KeyValue>> list = store->List("a");
  EXPECT_EQ(list.status().code(), StatusCode::kInternal) << list.status();
  EXPECT_NE(list.status().message().find("exceeds"), std::string::npos) << list.status();
}

TEST(EtcdStoreMalformedTest, GarbageWatchStreamsAreSurvived) {
  FakeEtcd fake;
  auto client = std::make_shared<EtcdClient>(std::vector<HostPort>{fake.endpoint()}, 1000ms);
  EventLog log;
  for (const std::string& body :
       {std::string("{\"result\":{\"events\":[{\"kv\":{\"key\":\"!!\"}}]}}"),
        std::string("{\"result\":{\"events\":[{\"type\":\"BOGUS\",\"kv\":{}}]}}"),
        std::string("{\"result\":{\"events\":\"x\"}}"), std::string("{\"result\":7}"),
        std::string("{\"error\":{\"grpc_code\":14,\"message\":\"x\"}}"),
        std::string("{\"result\":{\"created\":true}}garbage{{{"), std::string("[]"),
        std::string("}{")}) {
    fake.Reply(200, body);
    const size_t asked = fake.requests();
    auto handle = StartEtcdWatchAt(client, "g/", log.Callback(), 5);
    ASSERT_TRUE(handle.ok());
    // Survived: it read the reply, dropped it and asked again.
    EXPECT_TRUE(WaitFor([&] { return fake.requests() >= asked + 2; }, 5s)) << body;
    const auto start = SteadyClock::now();
    handle->reset();
    EXPECT_LT(Since(start), 500ms) << body;
  }
  // An endless object: cut off at the size limit, then reconnected.
  fake.Reply(200, "", /*huge_bytes=*/kMaxEtcdReplyBytes + (4 << 20));
  const size_t asked = fake.requests();
  auto handle = StartEtcdWatchAt(client, "g/", log.Callback(), 5);
  ASSERT_TRUE(handle.ok());
  EXPECT_TRUE(WaitFor([&] { return fake.requests() >= asked + 2; }, 5s));
  handle->reset();
  EXPECT_EQ(log.size(), 0u) << Describe(log.Events());
}

}  // namespace
}  // namespace ferry
