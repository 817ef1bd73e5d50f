// The http plug-in against the real ferry-metadata-server (and a Mooncake-style server without
// prefix listing): results, error mapping, leases across Abandon, restarts and shutdown.
#include "metadata/http/http_store.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <map>
#include <thread>

#include "common/mutex.h"
#include "common/tsan_suppressions.h"
#include "test_servers.h"

FERRY_TSAN_IGNORE_HTTPLIB()

namespace ferry {
namespace {

using namespace std::chrono_literals;
using testing::MetadataServer;
using SteadyClock = std::chrono::steady_clock;

std::unique_ptr<MetadataServer> MustStartServer(std::vector<std::string> extra_args = {}) {
  Result<std::unique_ptr<MetadataServer>> server = MetadataServer::Start(std::move(extra_args));
  if (!server.ok()) {
    ADD_FAILURE() << server.status();
    return nullptr;
  }
  return std::move(*server);
}

StoreOptions Options(std::chrono::milliseconds lease_ttl = 1000ms) {
  StoreOptions options;
  options.request_timeout = 1000ms;
  options.lease_ttl = lease_ttl;
  return options;
}

std::unique_ptr<MetadataStore> MustCreate(uint16_t port, const StoreOptions& options = Options(),
                                          const std::string& path = "/metadata") {
  Result<std::unique_ptr<MetadataStore>> store =
      CreateHttpStore(HostPort{"127.0.0.1", port}, path, options);
  if (!store.ok()) {
    ADD_FAILURE() << store.status();
    return nullptr;
  }
  return std::move(*store);
}

template <typename Pred>
bool Eventually(Pred pred, std::chrono::milliseconds timeout) {
  const auto deadline = SteadyClock::now() + timeout;
  while (SteadyClock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(50ms);
  }
  return pred();
}

StatusCode CodeOfGet(MetadataStore& store, std::string_view key) {
  return store.Get(key).status().code();
}

TEST(HttpStoreTest, GetPutDeleteList) {
  auto server = MustStartServer();
  ASSERT_NE(server, nullptr);
  auto store = MustCreate(server->port());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->scheme(), "http");
  EXPECT_EQ(store->watcher(), nullptr);

  const std::string binary("\x00\xff{\"", 4);
  const std::string odd_key = "odd/k y&z=1?#%+\xc3\xa9";  // every character must survive the query
  ASSERT_TRUE(store->Put("a/2", binary).ok());
  ASSERT_TRUE(store->Put("a/1", "one").ok());
  ASSERT_TRUE(store->Put("b/1", "other").ok());
  ASSERT_TRUE(store->Put(odd_key, "odd").ok());

  Result<std::string> got = store->Get("a/2");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, binary);
  got = store->Get(odd_key);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "odd");
  EXPECT_EQ(CodeOfGet(*store, "a/3"), StatusCode::kNotFound);

  Result<std::vector<KeyValue>> listed = store->List("a/");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(*listed, (std::vector<KeyValue>{{"a/1", "one"}, {"a/2", binary}}));
  listed = store->List("odd/");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(*listed, (std::vector<KeyValue>{{odd_key, "odd"}}));
  listed = store->List("");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->size(), 4u);
  listed = store->List("none/");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_TRUE(listed->empty());

  EXPECT_TRUE(store->Delete("a/1").ok());
  EXPECT_TRUE(store->Delete("a/1").ok());  // absent is OK
  EXPECT_EQ(CodeOfGet(*store, "a/1"), StatusCode::kNotFound);
}

TEST(HttpStoreTest, NotFoundIsNotUnavailable) {
  auto server = MustStartServer();
  ASSERT_NE(server, nullptr);
  auto store = MustCreate(server->port());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(CodeOfGet(*store, "missing"), StatusCode::kNotFound);

  server->Kill();
  const auto start = SteadyClock::now();
  EXPECT_EQ(CodeOfGet(*store, "missing"), StatusCode::kUnavailable);
  EXPECT_EQ(store->Put("k", "v").code(), StatusCode::kUnavailable);
  EXPECT_EQ(store->Delete("k").code(), StatusCode::kUnavailable);
  EXPECT_EQ(store->List("").status().code(), StatusCode::kUnavailable);
  EXPECT_LT(SteadyClock::now() - start, 8s);  // bounded by request_timeout per call

  Result<std::unique_ptr<MetadataStore>> late =
      CreateHttpStore(HostPort{"127.0.0.1", server->port()}, "/metadata", Options());
  EXPECT_EQ(late.status().code(), StatusCode::kUnavailable);

  ASSERT_TRUE(server->Relaunch().ok());
  EXPECT_EQ(CodeOfGet(*store, "missing"), StatusCode::kNotFound);  // the same client recovers
}

TEST(HttpStoreTest, ServerRefusalsMapToErrorCodes) {
  auto server = MustStartServer({"--max-body", "64", "--max-keys", "1"});
  ASSERT_NE(server, nullptr);
  auto store = MustCreate(server->port());
  ASSERT_NE(store, nullptr);
  Status s = store->Put("big", std::string(65, 'x'));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;  // 413
  EXPECT_NE(s.message().find("413"), std::string::npos) << s;
  ASSERT_TRUE(store->Put("one", "1").ok());
  s = store->Put("two", "2");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;  // 507: a server-side condition

  // A client pointed at the wrong path: PUT answers 404, which is a configuration error.
  auto wrong = MustCreate(server->port(), Options(), "/not-metadata");
  ASSERT_NE(wrong, nullptr);
  EXPECT_EQ(wrong->Put("k", "v").code(), StatusCode::kInvalidArgument);

  EXPECT_EQ(
      CreateHttpStore(HostPort{"127.0.0.1", server->port()}, "metadata", Options()).status().code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateHttpStore(HostPort{"127.0.0.1", server->port()}, "/metadata", Options(0ms))
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

TEST(HttpStoreTest, CustomServerPath) {
  auto server = MustStartServer({"--path", "/ferry/kv"});
  ASSERT_NE(server, nullptr);
  auto store = MustCreate(server->port(), Options(), "/ferry/kv");
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Put("k", "v").ok());
  Result<std::string> got = store->Get("k");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "v");
}

TEST(HttpStoreTest, LeasedKeyLivesWhileRefreshedAndVanishesAfterAbandon) {
  auto server = MustStartServer();
  ASSERT_NE(server, nullptr);
  auto owner = MustCreate(server->port(), Options(1000ms));
  auto observer = MustCreate(server->port());
  ASSERT_NE(owner, nullptr);
  ASSERT_NE(observer, nullptr);
  ASSERT_TRUE(owner->Put("lease/a", "v", {.leased = true}).ok());
  std::this_thread::sleep_for(2500ms);  // 2.5 TTLs: only the refreshes keep it
  EXPECT_EQ(CodeOfGet(*observer, "lease/a"), StatusCode::kOk);

  owner->Abandon();
  const auto abandoned = SteadyClock::now();
  owner.reset();  // an abandoned client deletes nothing
  EXPECT_EQ(CodeOfGet(*observer, "lease/a"), StatusCode::kOk);
  EXPECT_TRUE(
      Eventually([&] { return CodeOfGet(*observer, "lease/a") == StatusCode::kNotFound; }, 3s));
  EXPECT_LT(SteadyClock::now() - abandoned, 2500ms);  // TTL (1 s) plus slack
}

TEST(HttpStoreTest, LeasedKeyIsRewrittenAfterTheServerLostIt) {
  // Without --data the restarted server starts empty; the lease keeper puts the key back.
  auto server = MustStartServer({"--data", ""});
  ASSERT_NE(server, nullptr);
  auto owner = MustCreate(server->port(), Options(1000ms));
  auto observer = MustCreate(server->port());
  ASSERT_NE(owner, nullptr);
  ASSERT_NE(observer, nullptr);
  ASSERT_TRUE(owner->Put("lease/b", "v", {.leased = true}).ok());
  ASSERT_TRUE(owner->Put("plain/b", "v").ok());

  ASSERT_TRUE(server->Restart().ok());
  EXPECT_EQ(CodeOfGet(*observer, "plain/b"), StatusCode::kNotFound);  // the server did forget
  EXPECT_TRUE(Eventually([&] { return CodeOfGet(*observer, "lease/b") == StatusCode::kOk; }, 3s));
  Result<std::string> got = observer->Get("lease/b");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "v");
}

TEST(HttpStoreTest, DestructorDeletesLeasedKeysOnly) {
  auto server = MustStartServer();
  ASSERT_NE(server, nullptr);
  auto owner = MustCreate(server->port(), Options(5000ms));
  auto observer = MustCreate(server->port());
  ASSERT_NE(owner, nullptr);
  ASSERT_NE(observer, nullptr);
  ASSERT_TRUE(owner->Put("d/leased", "v", {.leased = true}).ok());
  ASSERT_TRUE(owner->Put("d/plain", "v").ok());
  owner.reset();
  EXPECT_EQ(CodeOfGet(*observer, "d/leased"), StatusCode::kNotFound);
  EXPECT_EQ(CodeOfGet(*observer, "d/plain"), StatusCode::kOk);
}

TEST(HttpStoreTest, DeleteAndPlainPutEndTheLease) {
  auto server = MustStartServer();
  ASSERT_NE(server, nullptr);
  auto owner = MustCreate(server->port(), Options(1000ms));
  auto observer = MustCreate(server->port());
  ASSERT_NE(owner, nullptr);
  ASSERT_NE(observer, nullptr);
  ASSERT_TRUE(owner->Put("e/deleted", "v", {.leased = true}).ok());
  ASSERT_TRUE(owner->Put("e/made-plain", "v1", {.leased = true}).ok());
  ASSERT_TRUE(owner->Put("e/rewritten", "old", {.leased = true}).ok());
  ASSERT_TRUE(owner->Delete("e/deleted").ok());
  ASSERT_TRUE(owner->Put("e/made-plain", "v2").ok());
  ASSERT_TRUE(owner->Put("e/rewritten", "new", {.leased = true}).ok());
  std::this_thread::sleep_for(1500ms);                                  // several refresh rounds
  EXPECT_EQ(CodeOfGet(*observer, "e/deleted"), StatusCode::kNotFound);  // not revived
  Result<std::string> got = observer->Get("e/rewritten");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "new");  // refreshes write the latest value
  owner.reset();
  got = observer->Get("e/made-plain");  // neither deleted with the owner nor expired
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "v2");
  EXPECT_EQ(CodeOfGet(*observer, "e/rewritten"), StatusCode::kNotFound);
}

// A server with Mooncake's behaviour: GET/PUT/DELETE ?key= only (404 for absent keys, also on
// DELETE), no prefix listing, no TTL.
class MooncakeStyleServer {
 public:
  MooncakeStyleServer() {
    server_.Get("/metadata", [this](const httplib::Request& req, httplib::Response& res) {
      MutexLock lock(mu_);
      auto it = values_.find(req.get_param_value("key"));
      if (it == values_.end()) {
        res.status = 404;
        res.set_content(R"({"error":"metadata not found"})", "application/json");
        return;
      }
      res.set_content(it->second, "application/json");
    });
    server_.Put("/metadata", [this](const httplib::Request& req, httplib::Response& res) {
      MutexLock lock(mu_);
      values_[req.get_param_value("key")] = req.body;
      res.set_content("metadata updated", "text/plain");
    });
    server_.Delete("/metadata", [this](const httplib::Request& req, httplib::Response& res) {
      MutexLock lock(mu_);
      if (values_.erase(req.get_param_value("key")) == 0) {
        res.status = 404;
        return;
      }
      res.set_content("metadata deleted", "text/plain");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~MooncakeStyleServer() {
    while (!server_.is_running() && port_ > 0) std::this_thread::sleep_for(5ms);
    server_.stop();
    thread_.join();
  }
  uint16_t port() const { return static_cast<uint16_t>(port_); }

 private:
  httplib::Server server_;
  int port_ = -1;
  std::thread thread_;
  Mutex mu_;
  std::map<std::string, std::string> values_ GUARDED_BY(mu_);
};

TEST(HttpStoreTest, WorksWithAMooncakeStyleServer) {
  MooncakeStyleServer mooncake;
  ASSERT_GT(mooncake.port(), 0);
  auto store = MustCreate(mooncake.port());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Put("mooncake/ram/x", R"({"v":1})").ok());
  Result<std::string> got = store->Get("mooncake/ram/x");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, R"({"v":1})");
  EXPECT_EQ(CodeOfGet(*store, "absent"), StatusCode::kNotFound);
  EXPECT_TRUE(store->Delete("mooncake/ram/x").ok());
  EXPECT_TRUE(store->Delete("mooncake/ram/x").ok());  // its 404 for an absent key is OK
  Result<std::vector<KeyValue>> listed = store->List("mooncake/");
  EXPECT_EQ(listed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(listed.status().message().find("does not support prefix listing"), std::string::npos)
      << listed.status();
}

}  // namespace
}  // namespace ferry
