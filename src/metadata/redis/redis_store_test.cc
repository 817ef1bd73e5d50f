// The redis plug-in against a real redis-server (tests/support): data operations, auth, db
// selection, NotFound vs Unavailable, leases across restarts and crashes, and watches in both
// notification modes.
#include "metadata/redis/redis_store.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "metadata/redis/redis_client.h"
#include "test_servers.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using testing::RedisServer;
using testing::WaitFor;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kTimeout{1000};
constexpr milliseconds kTtl{1000};

RedisConfig Config(const RedisServer& server, std::string password = "", int db = 0,
                   std::string user = "") {
  return RedisConfig{.server = {"127.0.0.1", server.port()},
                     .user = std::move(user),
                     .password = std::move(password),
                     .db = db};
}

StoreOptions Options(milliseconds timeout = kTimeout, milliseconds ttl = kTtl) {
  return StoreOptions{.request_timeout = timeout, .lease_ttl = ttl};
}

std::unique_ptr<RedisServer> StartRedis(std::string password = "") {
  auto server = RedisServer::Start(std::move(password));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(server).value() : nullptr;
}

std::unique_ptr<MetadataStore> Connect(const RedisConfig& config,
                                       const StoreOptions& options = Options()) {
  auto store = CreateRedisStore(config, options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(store).value() : nullptr;
}

bool IsNotFound(MetadataStore& store, std::string_view key) {
  return store.Get(key).status().code() == StatusCode::kNotFound;
}

// Sets `key` with a TTL of `ttl` that nobody refreshes and waits until redis expired it. By then
// every key given no longer a TTL before it has expired too, unless it was refreshed: the test
// waits for that expiry (redis's own event), not for the time.
void WaitForExpiryOfAFreshKey(const RedisServer& server, std::string_view key, milliseconds ttl) {
  // Just after a restart redis may refuse connections or answer LOADING for a moment: wait for
  // the SET to be taken (the event), bounded.
  Result<std::unique_ptr<redis::RedisConnection>> admin = UnavailableError("not yet connected");
  const std::string px = std::to_string(ttl.count());
  ASSERT_TRUE(WaitFor(
      [&] {
        if (!admin.ok()) {
          admin = redis::RedisConnection::Open(RedisConfig{.server = {"127.0.0.1", server.port()}},
                                               kTimeout);
        }
        if (admin.ok() && (*admin)->Run({"SET", key, "reference", "PX", px}).ok()) return true;
        admin = UnavailableError("reconnect");  // a fresh connection on the next try
        return false;
      },
      10s))
      << "redis did not take the reference key";
  ASSERT_TRUE(WaitFor(
      [&] {
        Result<redis::Reply> exists = (*admin)->Run({"EXISTS", key});
        return exists.ok() && (*exists)->type == REDIS_REPLY_INTEGER && (*exists)->integer == 0;
      },
      ttl + 2s))
      << key << " did not expire";
}

// The key's remaining TTL in ms: -1 for none, -2 for no such key, -3 when redis cannot be asked.
long long PttlOf(const RedisServer& server, std::string_view key) {
  auto admin =
      redis::RedisConnection::Open(RedisConfig{.server = {"127.0.0.1", server.port()}}, kTimeout);
  if (!admin.ok()) return -3;
  Result<redis::Reply> pttl = (*admin)->Run({"PTTL", key});
  if (!pttl.ok() || (*pttl)->type != REDIS_REPLY_INTEGER) return -3;
  return (*pttl)->integer;
}

// Collects watch events; thread-safe.
class Events {
 public:
  WatchCallback Callback() {
    return [this](const WatchEvent& e) {
      MutexLock lock(mu_);
      events_.push_back(e);
      cv_.NotifyAll();
    };
  }
  // True once an event of `type` for `key` (and `value`, for kPut when given) arrived.
  bool WaitFor(WatchEvent::Type type, std::string_view key, std::string_view value = {},
               milliseconds timeout = 1000ms) {
    const auto deadline = Clock::now() + timeout;
    MutexLock lock(mu_);
    for (;;) {
      for (const WatchEvent& e : events_) {
        if (e.type == type && e.key == key && (value.empty() || e.value == value)) return true;
      }
      if (Clock::now() >= deadline) return false;
      cv_.WaitUntil(mu_, deadline);
    }
  }
  bool Saw(std::string_view key) {
    MutexLock lock(mu_);
    for (const WatchEvent& e : events_) {
      if (e.key == key) return true;
    }
    return false;
  }
  size_t size() {
    MutexLock lock(mu_);
    return events_.size();
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::vector<WatchEvent> events_ GUARDED_BY(mu_);
};

TEST(RedisStoreTest, PutGetDeleteList) {
  auto server = StartRedis();
  ASSERT_NE(server, nullptr);
  auto store = Connect(Config(*server));
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->scheme(), "redis");

  const std::string binary("v a\0l\nue", 8);
  ASSERT_TRUE(store->Put("a/1", binary).ok());
  ASSERT_TRUE(store->Put("a/2", "two").ok());
  ASSERT_TRUE(store->Put("b/1", "other").ok());
  auto got = store->Get("a/1");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, binary);

  auto listed = store->List("a/");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(*listed, (std::vector<KeyValue>{{"a/1", binary}, {"a/2", "two"}}));

  ASSERT_TRUE(store->Delete("a/1").ok());
  EXPECT_TRUE(IsNotFound(*store, "a/1"));
  EXPECT_TRUE(store->Delete("a/1").ok()) << "deleting an absent key is OK";
  EXPECT_TRUE(store->Delete("never/was").ok());
  auto empty = store->List("nothing/");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_EQ(store->Put("", "x").code(), StatusCode::kInvalidArgument);
}

TEST(RedisStoreTest, ListEscapesGlobCharactersInPrefix) {
  auto server = StartRedis();
  ASSERT_NE(server, nullptr);
  auto store = Connect(Config(*server));
  ASSERT_NE(store, nullptr);
  // Unescaped, "p*[x]/" would also match "pzx/9" and "p-long-x/8".
  for (const char* key : {"p*[x]/2", "p*[x]/1", "pzx/9", "p-long-x/8", "q?\\/1", "qa\\/1"}) {
    ASSERT_TRUE(store->Put(key, key).ok());
  }
  auto listed = store->List("p*[x]/");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(*listed, (std::vector<KeyValue>{{"p*[x]/1", "p*[x]/1"}, {"p*[x]/2", "p*[x]/2"}}));
  auto backslash = store->List("q?\\");
  ASSERT_TRUE(backslash.ok()) << backslash.status();
  EXPECT_EQ(*backslash, (std::vector<KeyValue>{{"q?\\/1", "q?\\/1"}}));
}

TEST(RedisStoreTest, ListSpansManyScanBatches) {
  auto server = StartRedis();
  ASSERT_NE(server, nullptr);
  auto store = Connect(Config(*server));
  ASSERT_NE(store, nullptr);
  std::vector<KeyValue> expected;
  for (int i = 0; i < 1500; ++i) {
    char key[32];
    std::snprintf(key, sizeof(key), "many/%05d", i);
    expected.push_back({key, std::to_string(i)});
    ASSERT_TRUE(store->Put(key, std::to_string(i)).ok());
  }
  ASSERT_TRUE(store->Put("manyx", "not under many/").ok());
  auto listed = store->List("many/");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(*listed, expected);
}

TEST(RedisStoreTest, PasswordAuth) {
  auto server = StartRedis("secret");
  ASSERT_NE(server, nullptr);
  auto store = Connect(Config(*server, "secret"));
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Put("k", "v").ok());
  auto as_user = Connect(Config(*server, "secret", 0, "default"));
  ASSERT_NE(as_user, nullptr);
  EXPECT_EQ(as_user->Get("k").value_or(""), "v");

  auto wrong = CreateRedisStore(Config(*server, "wrong"), Options());
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kPermissionDenied) << wrong.status();
  EXPECT_NE(wrong.status().message().find("authenticating"), std::string::npos) << wrong.status();
  auto none = CreateRedisStore(Config(*server), Options());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kPermissionDenied) << none.status();
  EXPECT_NE(none.status().message().find("NOAUTH"), std::string::npos) << none.status();
}

TEST(RedisStoreTest, SelectsDatabase) {
  auto server = StartRedis();
  ASSERT_NE(server, nullptr);
  auto db3 = Connect(Config(*server, "", 3));
  auto db0 = Connect(Config(*server, "", 0));
  ASSERT_NE(db3, nullptr);
  ASSERT_NE(db0, nullptr);
  ASSERT_TRUE(db3->Put("only/in/3", "x").ok());
  EXPECT_EQ(db3->Get("only/in/3").value_or(""), "x");
  EXPECT_TRUE(IsNotFound(*db0, "only/in/3"));
  auto listed = db0->List("only/");
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());
}

TEST(RedisStoreTest, NotFoundVersusUnavailable) {
  auto server = StartRedis();
  ASSERT_NE(server, nullptr);
  auto store = Connect(Config(*server), Options(500ms));
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(IsNotFound(*store, "missing"));

  server->Kill();
  const auto start = Clock::now();
  EXPECT_EQ(store->Get("missing").status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(store->Put("k", "v").code(), StatusCode::kUnavailable);
  EXPECT_EQ(store->Delete("k").code(), StatusCode::kUnavailable);
  EXPECT_EQ(store->List("").status().code(), StatusCode::kUnavailable);
  EXPECT_LT(Clock::now() - start, 2s);
  auto unreachable = CreateRedisStore(Config(*server), Options(500ms));
  EXPECT_EQ(unreachable.status().code(), StatusCode::kUnavailable);

  // The next call after the server is back reconnects.
  ASSERT_TRUE(server->Relaunch().ok());
  ASSERT_TRUE(WaitFor([&] { return store->Put("k", "v").ok(); }, 5s)) << store->Put("k", "v");
  EXPECT_EQ(store->Get("k").value_or(""), "v");
}

TEST(RedisStoreTest, WriteToRestartedServerDoesNotRaiseSigpipe) {
  auto server = StartRedis();
  ASSERT_NE(server, nullptr);
  auto store = Connect(Config(*server));
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Put("k", "v").ok());  // leaves a pooled connection behind
  server->Kill();
  ASSERT_TRUE(server->Relaunch().ok());
  // The stale connection's write fails mid-way (EPIPE): the process must survive it, and the
  // store retries on a fresh connection.
  const std::string big(8 << 20, 'x');
  const Status s = store->Put("big", big);
  EXPECT_TRUE(s.ok() || s.code() == StatusCode::kUnavailable) << s;
  EXPECT_TRUE(WaitFor([&] { return store->Put("k", "v2").ok(); }, 5s));
}

TEST(RedisStoreTest, SilentServerIsUnavailableWithinTimeout) {
  // Accepts connections (the kernel's backlog) but never answers.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 8), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const auto start = Clock::now();
  auto store =
      CreateRedisStore(RedisConfig{.server = {"127.0.0.1", ntohs(addr.sin_port)}}, Options(300ms));
  EXPECT_EQ(store.status().code(), StatusCode::kUnavailable) << store.status();
  EXPECT_LT(Clock::now() - start, 1500ms);
  ::close(fd);
}

TEST(RedisStoreTest, LeasedKeyKeptAliveThenVanishesAfterAbandon) {
  auto server = StartRedis();
  ASSERT_NE(server, nullptr);
  auto owner = Connect(Config(*server));
  auto reader = Connect(Config(*server));
  ASSERT_NE(owner, nullptr);
  ASSERT_NE(reader, nullptr);
  ASSERT_TRUE(owner->Put("lease/k", "v", {.leased = true}).ok());
  // Set after lease/k with the same TTL: lease/k outlives it only if the owner refreshes it.
  ASSERT_NO_FATAL_FAILURE(WaitForExpiryOfAFreshKey(*server, "reference", kTtl));
  EXPECT_EQ(reader->Get("lease/k").value_or(""), "v") << "refreshed, not expired";

  owner->Abandon();
  const auto abandoned = Clock::now();
  EXPECT_TRUE(WaitFor([&] { return IsNotFound(*reader, "lease/k"); }, kTtl + 1000ms));
  EXPECT_LT(Clock::now() - abandoned, kTtl + 1000ms);
  owner.reset();  // Abandon()ed: the destructor deletes nothing and does not hang
}

TEST(RedisStoreTest, LeasedKeySurvivesRedisRestart) {
  auto server = StartRedis();
  ASSERT_NE(server, nullptr);
  auto owner = Connect(Config(*server));
  auto reader = Connect(Config(*server));
  ASSERT_NE(owner, nullptr);
  ASSERT_NE(reader, nullptr);
  ASSERT_TRUE(owner->Put("lease/k", "v", {.leased = true}).ok());
  ASSERT_TRUE(server->Restart().ok());
  // Past the TTL the key had before the restart: only the owner can have kept it (or put it back).
  ASSERT_NO_FATAL_FAILURE(WaitForExpiryOfAFreshKey(*server, "reference", kTtl));
  ASSERT_TRUE(WaitFor([&] { return reader->Get("lease/k").ok(); }, 2s));
  EXPECT_EQ(reader->Get("lease/k").value_or(""), "v");
}

TEST(RedisStoreTest, KeeperRewritesKeyDeletedBehindItsBack) {
  // What a restart without persistence looks like to the owner: the key is simply gone.
  auto server = StartRedis();
  ASSERT_NE(server, nullptr);
  auto owner = Connect(Config(*server));
  auto other = Connect(Config(*server));
  ASSERT_NE(owner, nullptr);
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(owner->Put("lease/k", "v", {.leased = true}).ok());
  ASSERT_TRUE(other->Delete("lease/k").ok());
  EXPECT_TRUE(IsNotFound(*other, "lease/k"));
  EXPECT_TRUE(WaitFor([&] { return other->Get("lease/k").ok(); }, kTtl / 3 + 1000ms));
  EXPECT_EQ(other->Get("lease/k").value_or(""), "v");
}

TEST(RedisStoreTest, DestructorDeletesOnlyLeasedKeys) {
  auto server = StartRedis();
  ASSERT_NE(server, nullptr);
  auto owner = Connect(Config(*server));
  auto reader = Connect(Config(*server));
  ASSERT_NE(owner, nullptr);
  ASSERT_NE(reader, nullptr);
  ASSERT_TRUE(owner->Put("lease/1", "a", {.leased = true}).ok());
  ASSERT_TRUE(owner->Put("lease/2", "b", {.leased = true}).ok());
  ASSERT_TRUE(owner->Put("plain", "c").ok());
  // Re-Put without a lease: no longer leased, neither expires nor is deleted.
  ASSERT_TRUE(owner->Put("lease/3", "d", {.leased = true}).ok());
  ASSERT_TRUE(owner->Put("lease/3", "e").ok());
  // Past lease/3's old TTL, and past a refresh round (a third of the TTL) that could set it again.
  ASSERT_NO_FATAL_FAILURE(WaitForExpiryOfAFreshKey(*server, "reference", kTtl));
  EXPECT_EQ(reader->Get("lease/3").value_or(""), "e");
  EXPECT_EQ(PttlOf(*server, "lease/3"), -1) << "no TTL on a key that is no longer leased";

  owner.reset();
  EXPECT_TRUE(IsNotFound(*reader, "lease/1"));
  EXPECT_TRUE(IsNotFound(*reader, "lease/2"));
  EXPECT_EQ(reader->Get("plain").value_or(""), "c");
  EXPECT_EQ(reader->Get("lease/3").value_or(""), "e");
}

TEST(RedisStoreTest, WatchSeesPutDeleteAndExpiry) {
  auto server = StartRedis();
  ASSERT_NE(server, nullptr);
  auto writer = Connect(Config(*server));
  auto watcher = Connect(Config(*server));
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(watcher, nullptr);
  ASSERT_NE(watcher->watcher(), nullptr);
  Events events;
  auto handle = watcher->watcher()->Watch("w[1]/", events.Callback());
  ASSERT_TRUE(handle.ok()) << handle.status();

  ASSERT_TRUE(writer->Put("w[1]/a", "v1").ok());
  EXPECT_TRUE(events.WaitFor(WatchEvent::Type::kPut, "w[1]/a", "v1"));
  ASSERT_TRUE(writer->Delete("w[1]/a").ok());
  EXPECT_TRUE(events.WaitFor(WatchEvent::Type::kDelete, "w[1]/a"));

  ASSERT_TRUE(writer->Put("w[1]/leased", "v2", {.leased = true}).ok());
  EXPECT_TRUE(events.WaitFor(WatchEvent::Type::kPut, "w[1]/leased", "v2"));
  writer->Abandon();
  EXPECT_TRUE(events.WaitFor(WatchEvent::Type::kDelete, "w[1]/leased", {}, kTtl + 1000ms));

  // Outside the (escaped) prefix: not reported.
  ASSERT_TRUE(writer->Put("w1/x", "no").ok());
  ASSERT_TRUE(writer->Put("w[1]/last", "v3").ok());
  EXPECT_TRUE(events.WaitFor(WatchEvent::Type::kPut, "w[1]/last", "v3"));
  EXPECT_FALSE(events.Saw("w1/x"));
}

TEST(RedisStoreTest, WatchResyncsAfterRestart) {
  auto server = StartRedis();
  ASSERT_NE(server, nullptr);
  auto writer = Connect(Config(*server));
  auto watcher = Connect(Config(*server));
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(watcher, nullptr);
  ASSERT_TRUE(writer->Put("r/old", "1").ok());
  Events events;
  auto handle = watcher->watcher()->Watch("r/", events.Callback());
  ASSERT_TRUE(handle.ok()) << handle.status();
  EXPECT_EQ(events.size(), 0u);

  // The restart also resets notify-keyspace-events; the watch must turn it on again.
  ASSERT_TRUE(server->Restart().ok());
  EXPECT_TRUE(events.WaitFor(WatchEvent::Type::kPut, "r/old", "1", 8000ms));
  ASSERT_TRUE(WaitFor([&] { return writer->Put("r/new", "2").ok(); }, 5s));
  EXPECT_TRUE(events.WaitFor(WatchEvent::Type::kPut, "r/new", "2"));
}

TEST(RedisStoreTest, WatchNoticesUnresponsiveServerByPing) {
  auto server = StartRedis();
  ASSERT_NE(server, nullptr);
  auto writer = Connect(Config(*server));
  auto watcher = Connect(Config(*server), Options(300ms));
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(watcher, nullptr);
  ASSERT_TRUE(writer->Put("p/old", "1").ok());
  Events events;
  auto handle = watcher->watcher()->Watch("p/", events.Callback());
  ASSERT_TRUE(handle.ok()) << handle.status();
  // The connection stays up but no command is answered: only the watch's PING can tell.
  auto admin = redis::RedisConnection::Open(Config(*server), kTimeout);
  ASSERT_TRUE(admin.ok()) << admin.status();
  ASSERT_TRUE((*admin)->Run({"CLIENT", "PAUSE", "2000", "ALL"}).ok());
  // Keepalive 1 s + 300 ms without a PONG, then reconnect once the pause ends, then resync.
  EXPECT_TRUE(events.WaitFor(WatchEvent::Type::kPut, "p/old", "1", 6000ms));
}

TEST(RedisStoreTest, WatchFallsBackToFerryChannelWhenConfigRefused) {
  auto server = StartRedis();
  ASSERT_NE(server, nullptr);
  auto admin = redis::RedisConnection::Open(Config(*server), kTimeout);
  ASSERT_TRUE(admin.ok()) << admin.status();
  ASSERT_TRUE((*admin)
                  ->Run({"ACL", "SETUSER", "limited", "on", ">pw", "~*", "&*", "+@all", "-config"})
                  .ok());
  auto writer = Connect(Config(*server));
  auto watcher = Connect(Config(*server, "pw", 0, "limited"));
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(watcher, nullptr);
  Events events;
  auto handle = watcher->watcher()->Watch("f/", events.Callback());
  ASSERT_TRUE(handle.ok()) << handle.status();

  // A non-ferry write is invisible on ferry's channel; it goes first, so had the watch used
  // keyspace notifications it would have arrived before f/1.
  ASSERT_TRUE((*admin)->Run({"SET", "f/raw", "x"}).ok());
  ASSERT_TRUE(writer->Put("f/1", "v").ok());
  EXPECT_TRUE(events.WaitFor(WatchEvent::Type::kPut, "f/1", "v"));
  EXPECT_FALSE(events.Saw("f/raw"));
  ASSERT_TRUE(writer->Delete("f/1").ok());
  EXPECT_TRUE(events.WaitFor(WatchEvent::Type::kDelete, "f/1"));
  // Other databases' events on the shared channel are ignored.
  auto db1 = Connect(Config(*server, "", 1));
  ASSERT_NE(db1, nullptr);
  ASSERT_TRUE(db1->Put("f/db1", "v").ok());
  ASSERT_TRUE(writer->Put("f/2", "v").ok());
  EXPECT_TRUE(events.WaitFor(WatchEvent::Type::kPut, "f/2", "v"));
  EXPECT_FALSE(events.Saw("f/db1"));
}

TEST(RedisStoreTest, DestroyingWatchStopsPromptly) {
  auto server = StartRedis();
  ASSERT_NE(server, nullptr);
  auto writer = Connect(Config(*server));
  auto watcher = Connect(Config(*server));
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(watcher, nullptr);
  Events events;
  auto handle = watcher->watcher()->Watch("s/", events.Callback());
  ASSERT_TRUE(handle.ok()) << handle.status();
  ASSERT_TRUE(writer->Put("s/1", "v").ok());
  ASSERT_TRUE(events.WaitFor(WatchEvent::Type::kPut, "s/1", "v"));

  auto start = Clock::now();
  handle->reset();
  EXPECT_LT(Clock::now() - start, 1s);
  const size_t seen = events.size();
  // A watch that is still there sees s/2: once it did, the gone one would have too.
  Events later;
  auto still_there = watcher->watcher()->Watch("s/", later.Callback());
  ASSERT_TRUE(still_there.ok()) << still_there.status();
  ASSERT_TRUE(writer->Put("s/2", "v").ok());
  ASSERT_TRUE(later.WaitFor(WatchEvent::Type::kPut, "s/2", "v"));
  EXPECT_EQ(events.size(), seen) << "no callback after the handle is gone";
  still_there->reset();

  // While reconnecting to a dead server, and after the store itself is gone.
  auto second = watcher->watcher()->Watch("s/", events.Callback());
  ASSERT_TRUE(second.ok()) << second.status();
  watcher.reset();
  const uint16_t port = server->port();
  server->Kill();
  {
    // What listens on the dead server's port now closes every connection at once, as a dead
    // server would refuse it: an attempt arriving there shows the watch is reconnecting.
    auto dead = testing::SilentListener::Start(port);
    ASSERT_TRUE(dead.ok()) << dead.status();
    ASSERT_TRUE((*dead)->CloseConnections(1, 5s)) << "the watch never tried to reconnect";
    start = Clock::now();
    second->reset();
    EXPECT_LT(Clock::now() - start, 1s);
  }
  EXPECT_EQ(watcher, nullptr);
  auto refused = CreateRedisStore(Config(*server), Options());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
}

// ---- a hostile server ----------------------------------------------------------------------

// A server on 127.0.0.1 that answers the first command of each connection with `reply`, a
// function that writes to the socket until it returns (a send failing because the client
// closed ends it too). One connection at a time, on its own thread.
class HostileRedis {
 public:
  using ReplyFn = std::function<void(const std::function<bool(std::string_view)>& send)>;

  explicit HostileRedis(ReplyFn reply) : reply_(std::move(reply)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(fd_, 8) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot listen: " << std::strerror(errno);
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~HostileRedis() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);  // wakes accept()
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }
  RedisConfig config() const { return RedisConfig{.server = {"127.0.0.1", port_}}; }

 private:
  void Serve() {
    while (!stop_) {
      const int conn = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) return;
      timeval tv{.tv_sec = 5, .tv_usec = 0};  // a client that stops reading ends the reply
      ::setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
      ::setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      char command[4096];
      if (::recv(conn, command, sizeof(command), 0) > 0) {
        reply_([conn](std::string_view bytes) {
          return ::send(conn, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
                 static_cast<ssize_t>(bytes.size());
        });
      }
      ::close(conn);
    }
  }

  ReplyFn reply_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Sends `header`, then `unit` repeatedly until `total` bytes went or a send failed.
HostileRedis::ReplyFn Stream(std::string header, std::string unit, size_t total) {
  return [header = std::move(header), unit = std::move(unit), total](const auto& send) {
    if (!send(header) || unit.empty()) return;
    std::string block;
    while (block.size() < (64 << 10)) block += unit;
    for (size_t sent = 0; sent < total; sent += block.size()) {
      if (!send(block)) return;
    }
  };
}

// Whatever the server sends, one reply never makes the client hold more than the reply limits:
// it breaks the connection with an error naming them instead (kInternal, not retried).
TEST(RedisHostileServerTest, RepliesOverTheLimitsAreRefusedNotBuffered) {
  struct Case {
    const char* what;
    HostileRedis::ReplyFn reply;
  };
  const size_t beyond = redis::kMaxRedisReplyBytes + (size_t{16} << 20);
  std::vector<Case> cases;
  cases.push_back({"a bulk string announced at 1 GB, streamed without end",
                   Stream("$1000000000\r\n", "x", beyond)});
  cases.push_back({"a status line that never ends", Stream("+", "a", beyond)});
  cases.push_back({"a length line that never ends", Stream("$1", "0", beyond)});
  cases.push_back({"an array announced with 2^31-1 elements", Stream("*2147483647\r\n", "", 0)});
  cases.push_back(
      {"an array of a million small elements", Stream("*1000000\r\n", ":1\r\n", 4000000)});
  cases.push_back({"an array of strings that together pass the byte limit", [](const auto& send) {
                     const std::string one = "$1048576\r\n" + std::string(1 << 20, 'v') + "\r\n";
                     if (!send("*100\r\n")) return;
                     for (int i = 0; i < 100 && send(one); ++i) {
                     }
                   }});
  for (Case& c : cases) {
    SCOPED_TRACE(c.what);
    HostileRedis server(std::move(c.reply));
    // The message says the limit cut it off; the timeout, far longer than streaming the limit
    // takes even under a sanitizer on a loaded machine, says the client did not wait it out.
    redis::RedisClient client(server.config(), 30000ms);
    const auto start = Clock::now();
    Result<std::string> got = client.Get("k");
    EXPECT_EQ(got.status().code(), StatusCode::kInternal) << got.status();
    EXPECT_NE(got.status().message().find("exceeds"), std::string::npos) << got.status();
    EXPECT_LT(Clock::now() - start, 25000ms) << "cut off by the limit, not by the timeout";
  }

  // A subscriber reads on its own schedule (ReadAvailable / TakeBuffered): the same limits.
  HostileRedis server(Stream("*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1000000000\r\n", "m", beyond));
  Result<std::unique_ptr<redis::RedisConnection>> subscriber =
      redis::RedisConnection::Open(server.config(), 5000ms);
  ASSERT_TRUE(subscriber.ok()) << subscriber.status();
  ASSERT_TRUE((*subscriber)->Send({"SUBSCRIBE", "c"}).ok());
  Status ended = Status::Ok();
  ASSERT_TRUE(WaitFor(
      [&] {
        Result<redis::Reply> message = (*subscriber)->TakeBuffered();
        ended =
            message.ok() && *message == nullptr ? (*subscriber)->ReadAvailable() : message.status();
        return !ended.ok();
      },
      10s, 0ms));
  EXPECT_EQ(ended.code(), StatusCode::kInternal) << ended;
  EXPECT_TRUE((*subscriber)->broken());
}

TEST(RedisHostileServerTest, RepliesWithinTheLimitsAreRead) {
  const std::string big(1 << 20, 'b');
  HostileRedis server(
      [&big](const auto& send) { send("$" + std::to_string(big.size()) + "\r\n" + big + "\r\n"); });
  redis::RedisClient client(server.config(), 5000ms);
  Result<std::string> got = client.Get("k");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, big);
}

}  // namespace
}  // namespace ferry
