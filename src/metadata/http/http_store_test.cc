// The http plug-in against the real ferry-metadata-server (and a Mooncake-style server without
// prefix listing): results, error mapping, leases across Abandon, restarts and shutdown.
#include "metadata/http/http_store.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <map>
#include <thread>

#include "common/mutex.h"
#include "common/tsan_suppressions.h"
#include "core/segment_desc_codec.h"
#include "test_servers.h"
#include "common/wait_for.h"

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

// Waits until at least one lease TTL (`ttl`) has passed, as the server sees it: a key leased by
// a client that never refreshes it (abandoned at once) must expire. An event, not a sleep.
bool WaitForOneTtl(uint16_t port, std::chrono::milliseconds ttl, const std::string& key) {
  auto reference = MustCreate(port, Options(ttl));
  auto observer = MustCreate(port);
  if (reference == nullptr || observer == nullptr) return false;
  if (!reference->Put(key, "ref", {.leased = true}).ok()) return false;
  reference->Abandon();
  return WaitFor([&] { return CodeOfGet(*observer, key) == StatusCode::kNotFound; },
                    ttl * 4 + 2000ms);
}

TEST(HttpStoreTest, LeasedKeyLivesWhileRefreshedAndVanishesAfterAbandon) {
  auto server = MustStartServer();
  ASSERT_NE(server, nullptr);
  auto owner = MustCreate(server->port(), Options(1000ms));
  auto observer = MustCreate(server->port());
  ASSERT_NE(owner, nullptr);
  ASSERT_NE(observer, nullptr);
  ASSERT_TRUE(owner->Put("lease/a", "v", {.leased = true}).ok());
  // Two TTLs pass (keys put after ours expire unrefreshed): only the refreshes keep ours.
  ASSERT_TRUE(WaitForOneTtl(server->port(), 1000ms, "lease/ref1"));
  ASSERT_TRUE(WaitForOneTtl(server->port(), 1000ms, "lease/ref2"));
  EXPECT_EQ(CodeOfGet(*observer, "lease/a"), StatusCode::kOk);

  owner->Abandon();
  const auto abandoned = SteadyClock::now();
  owner.reset();  // an abandoned client deletes nothing
  EXPECT_EQ(CodeOfGet(*observer, "lease/a"), StatusCode::kOk);
  EXPECT_TRUE(
      WaitFor([&] { return CodeOfGet(*observer, "lease/a") == StatusCode::kNotFound; }, 3s));
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
  EXPECT_TRUE(WaitFor([&] { return CodeOfGet(*observer, "lease/b") == StatusCode::kOk; }, 3s));
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
  // A TTL passes (a key put after these expires unrefreshed): several refresh rounds ran.
  ASSERT_TRUE(WaitForOneTtl(server->port(), 1000ms, "e/ref"));
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

// A server without conditional requests (it would ignore X-Ferry-If-Value and write anyway):
// the store compares with a GET first, so another writer's key is neither replaced nor deleted,
// and a leased key another writer holds is not deleted at the owner's clean shutdown.
TEST(HttpStoreTest, ConditionalWritesFallBackToGetCompareOnAMooncakeStyleServer) {
  testing::MooncakeStyleServer mooncake;
  ASSERT_GT(mooncake.port(), 0);
  auto a = MustCreate(mooncake.port());
  auto b = MustCreate(mooncake.port());
  ASSERT_TRUE(a && b);
  const std::string key = "mooncake/ram/owned";
  ASSERT_TRUE(a->Put(key, "A1", {.leased = true, .replaces = ""}).ok());
  EXPECT_EQ(b->Put(key, "B1", {.leased = true, .replaces = ""}).code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(b->DeleteIf(key, "A0").code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(b->DeleteIf("mooncake/ram/absent", "A1").code(), StatusCode::kNotFound);
  EXPECT_EQ(*b->Get(key), "A1");
  ASSERT_TRUE(b->Put(key, "B1", {.leased = true, .replaces = "A1"}).ok());  // taken over
  a.reset();  // a's clean shutdown: the key is b's now, so it stays
  EXPECT_EQ(*b->Get(key), "B1");
  EXPECT_TRUE(b->DeleteIf(key, "B1").ok());
  EXPECT_EQ(CodeOfGet(*b, key), StatusCode::kNotFound);
}

TEST(HttpStoreTest, WorksWithAMooncakeStyleServer) {
  testing::MooncakeStyleServer mooncake;
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

// An httplib server whose replies are as large as a hostile metadata server likes: a body with a
// huge Content-Length, a chunked body that never ends, and bodies just under a cap, so the
// client's cap is seen to hold for both framings. Bodies are generated as they are sent.
class HugeBodyServer {
 public:
  static constexpr size_t kChunk = 64 * 1024;

  explicit HugeBodyServer(size_t small_body) : chunk_(kChunk, 'x') {
    server_.Get(
        "/metadata", [this, small_body](const httplib::Request& req, httplib::Response& res) {
          const std::string key = req.get_param_value("key");
          if (key == "huge-length") {
            res.set_content_provider(size_t{1} << 40, "application/json",
                                     [this](size_t, size_t length, httplib::DataSink& sink) {
                                       return !stop_.load() &&
                                              sink.write(chunk_.data(), std::min(length, kChunk));
                                     });
          } else if (key == "huge-chunked") {
            res.set_chunked_content_provider(
                "application/json", [this](size_t, httplib::DataSink& sink) {
                  return !stop_.load() && sink.write(chunk_.data(), chunk_.size());
                });
          } else if (key == "small-chunked") {
            res.set_chunked_content_provider(
                "application/json", [this, small_body](size_t offset, httplib::DataSink& sink) {
                  if (offset >= small_body) {
                    sink.done();
                    return true;
                  }
                  return sink.write(chunk_.data(), std::min(kChunk, small_body - offset));
                });
          } else if (key == "small-length") {
            res.set_content(std::string(small_body, 'y'), "application/json");
          } else {
            res.status = 404;
          }
        });
    server_.Put("/metadata", [this](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("text/plain", [this](size_t, httplib::DataSink& sink) {
        return !stop_.load() && sink.write(chunk_.data(), chunk_.size());
      });
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~HugeBodyServer() {
    stop_.store(true);  // providers end their bodies; the server then stops
    server_.stop();
    thread_.join();
  }
  uint16_t port() const { return static_cast<uint16_t>(port_); }

 private:
  const std::string chunk_;
  std::atomic<bool> stop_{false};
  httplib::Server server_;
  int port_ = -1;
  std::thread thread_;
};

TEST(HttpStoreTest, ReplyBodiesOverTheCapAreRefusedWithoutReadingThem) {
  constexpr size_t kCap = 1 << 20;
  HugeBodyServer server(kCap);  // the small bodies are exactly at the cap
  ASSERT_GT(server.port(), 0);
  HttpStoreOptions http;
  http.max_body_bytes = kCap;
  Result<std::unique_ptr<MetadataStore>> created =
      CreateHttpStore(HostPort{"127.0.0.1", server.port()}, "/metadata", Options(), http);
  ASSERT_TRUE(created.ok()) << created.status();
  MetadataStore& store = **created;

  for (const std::string key : {"huge-length", "huge-chunked"}) {
    const auto start = SteadyClock::now();
    Result<std::string> got = store.Get(key);
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument) << key << ": " << got.status();
    EXPECT_NE(got.status().message().find("'" + key + "'"), std::string::npos) << got.status();
    EXPECT_NE(got.status().message().find(std::to_string(kCap)), std::string::npos) << got.status();
    EXPECT_LT(SteadyClock::now() - start, 4000ms) << key << ": the body was read, not refused";
  }
  // At the cap, both framings are read whole.
  for (const std::string key : {"small-length", "small-chunked"}) {
    Result<std::string> got = store.Get(key);
    ASSERT_TRUE(got.ok()) << key << ": " << got.status();
    EXPECT_EQ(got->size(), kCap) << key;
  }
  // Replies to writes are capped too.
  const Status put = store.Put("k", "v");
  EXPECT_EQ(put.code(), StatusCode::kInvalidArgument) << put;
  EXPECT_NE(put.message().find("PUT 'k'"), std::string::npos) << put;

  HttpStoreOptions zero;
  zero.max_body_bytes = 0;
  EXPECT_EQ(CreateHttpStore(HostPort{"127.0.0.1", server.port()}, "/metadata", Options(), zero)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

TEST(HttpStoreTest, ASegmentDescriptorWithTenThousandBuffersFitsTheDefaultCap) {
  SegmentDesc desc;
  desc.name = "decode-node-7";
  desc.incarnation = 0x123456789abcdefULL;
  desc.rpc = {"10.0.0.7", 12345};
  desc.host = {"node-7", "0f3c5a4e-7d1b-4c9a-9e2f-3b6d8a1c5e7f", 4026531836};
  desc.transports["rdma"] = std::string(600, 'e');  // 8 endpoints' addresses
  for (uint64_t i = 0; i < 10000; ++i) {
    BufferDesc b;
    b.addr = 0x7f0000000000ULL + i * (uint64_t{1} << 30);
    b.length = uint64_t{1} << 30;
    b.location = Location::Cpu();
    b.generation = 1000 + i;
    // Realistic keys: rdma's carries an id, base, length and 8 rkeys; tcp's is short.
    b.keys["rdma"] =
        "ferry-rdma-key/1 1234567890ab 7f0000000000 40000000 "
        "1234567890abcdef,1234567890abcdef,1234567890abcdef,1234567890abcdef,"
        "1234567890abcdef,1234567890abcdef,1234567890abcdef,1234567890abcdef";
    b.keys["tcp"] = std::string(24, 'k');
    desc.buffers.push_back(std::move(b));
  }
  const std::string json = EncodeSegmentDesc(desc);
  const size_t per_buffer = json.size() / desc.buffers.size();
  std::cout << "[ info ] a 10,000-buffer descriptor encodes to " << json.size() << " bytes ("
            << per_buffer << " per buffer)\n";
  EXPECT_LT(json.size() * 4, HttpStoreOptions{}.max_body_bytes)
      << "the default cap leaves less than 4x headroom";

  // And it round-trips through the real metadata server under the default cap.
  auto server = MustStartServer();
  ASSERT_NE(server, nullptr);
  auto store = MustCreate(server->port());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Put("ferry/ram/decode-node-7", json).ok());
  Result<std::string> got = store->Get("ferry/ram/decode-node-7");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, json);
}

}  // namespace
}  // namespace ferry
