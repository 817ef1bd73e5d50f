#include "rpc/rpc_client.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "rpc/messages.h"
#include "rpc/rpc_server.h"
#include "rpc/rpc_test_util.h"
#include "common/wait_for.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;
using rpc::testing::kEchoType;
using rpc::testing::Local;
using rpc::testing::RawReadFrame;
using rpc::testing::RawSend;
using rpc::testing::StartEchoServer;
using Clock = std::chrono::steady_clock;

TEST(RpcClientTest, ErrorStatusRoundTripsWithItsCode) {
  auto server = RpcServer::Create({}).value();
  ASSERT_TRUE(server
                  ->RegisterHandler(
                      ToWire(RpcType::kGetSegmentDesc),
                      [](std::string_view payload, const PeerInfo&) -> Result<std::string> {
                        ASSIGN_OR_RETURN(std::string key, UnpackGetSegmentDescRequest(payload));
                        if (key == "stale") return StaleError("generation 3 < 4");
                        return NotFoundError("no key '" + key + "'");
                      })
                  .ok());
  ASSERT_TRUE(server->Start().ok());
  RpcClient client;
  const uint16_t type = ToWire(RpcType::kGetSegmentDesc);
  Result<std::string> missing =
      client.Call(Local(server->port()), type, PackGetSegmentDescRequest("ferry/ram/x"), 5s);
  EXPECT_EQ(missing.status(), NotFoundError("no key 'ferry/ram/x'"));
  Result<std::string> stale = client.Call(Local(server->port()), type, "stale", 5s);
  EXPECT_EQ(stale.status(), StaleError("generation 3 < 4"));
  Result<std::string> bad = client.Call(Local(server->port()), type, "", 5s);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(server->connections_accepted(), 1u);  // error responses keep the connection
}

TEST(RpcClientTest, SequentialCallsReuseOneConnection) {
  auto server = StartEchoServer();
  RpcClient client;
  for (int i = 0; i < 50; ++i) {
    Result<std::string> r = client.Call(Local(server->port()), kEchoType, std::to_string(i), 5s);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(*r, std::to_string(i));
  }
  EXPECT_EQ(server->connections_accepted(), 1u);
  EXPECT_EQ(client.idle_connections(), 1u);
}

TEST(RpcClientTest, ManyConcurrentCallersShareThePool) {
  auto server = StartEchoServer();
  RpcClientOptions options;
  options.max_idle_connections_per_peer = 16;
  RpcClient client(options);
  constexpr int kThreads = 16;
  constexpr int kCalls = 200;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        const std::string payload = std::to_string(t) + "/" + std::to_string(i);
        Result<std::string> r = client.Call(Local(server->port()), kEchoType, payload, 10s);
        if (!r.ok() || *r != payload) failures.fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  // A new connection is opened only while every other one is busy: never more than callers.
  EXPECT_LE(server->connections_accepted(), static_cast<uint64_t>(kThreads));
  EXPECT_EQ(server->bad_frames(), 0u);
}

TEST(RpcClientTest, ClosedPortIsUnavailableFast) {
  uint16_t port = 0;
  {
    auto listener = rpc::ListenTcp("127.0.0.1", 0, 0);
    ASSERT_TRUE(listener.ok());
    port = listener->port;
  }  // closed: nothing listens there now
  RpcClient client;
  const auto start = Clock::now();
  Result<std::string> r = client.Call(Local(port), kEchoType, "x", 5s);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status();
  EXPECT_LT(Clock::now() - start, 1s);
}

TEST(RpcClientTest, SlowHandlerTimesOutAndTheLateAnswerIsNeverReadAsTheNextOne) {
  std::atomic<bool> slow_running{false};
  std::atomic<bool> caller_gave_up{false};
  // One worker: a request that comes after the late answer is served after it went out.
  RpcServerOptions o;
  o.worker_threads = 1;
  auto server = RpcServer::Create(o).value();
  ASSERT_TRUE(server
                  ->RegisterHandler(kEchoType,
                                    [&](std::string_view p, const PeerInfo&) {
                                      if (p == "slow") {  // answers once its caller gave up
                                        slow_running = true;
                                        WaitFor([&] { return caller_gave_up.load(); }, 5s);
                                      }
                                      return Result<std::string>(std::string(p));
                                    })
                  .ok());
  ASSERT_TRUE(server->Start().ok());
  RpcClient client;
  const auto start = Clock::now();
  Result<std::string> slow = client.Call(Local(server->port()), kEchoType, "slow", 100ms);
  EXPECT_EQ(slow.status().code(), StatusCode::kTimeout) << slow.status();
  EXPECT_LT(Clock::now() - start, 350ms);
  EXPECT_EQ(client.idle_connections(), 0u);  // the timed-out connection was dropped
  EXPECT_TRUE(WaitFor([&] { return slow_running.load(); }, 5s));
  caller_gave_up = true;

  // Served after the late "slow" answer went out.
  Result<std::string> next = client.Call(Local(server->port()), kEchoType, "next", 5s);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, "next");
  Result<std::string> later = client.Call(Local(server->port()), kEchoType, "later", 5s);
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_EQ(*later, "later");
  EXPECT_EQ(server->connections_accepted(), 2u);
  EXPECT_EQ(client.bad_frames(), 0u);
}

TEST(RpcClientTest, PeerRestartedOnTheSamePortIsReachedWithoutAnError) {
  auto first = StartEchoServer();
  const uint16_t port = first->port();
  RpcClient client;
  ASSERT_TRUE(client.Call(Local(port), kEchoType, "one", 5s).ok());
  ASSERT_EQ(client.idle_connections(), 1u);
  first->Stop();  // the pooled connection is now dead
  RpcServerOptions o;
  o.port = port;
  auto second = StartEchoServer(o);
  ASSERT_NE(second, nullptr);
  Result<std::string> r = client.Call(Local(port), kEchoType, "two", 5s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "two");
}

TEST(RpcClientTest, ConnectionTheServerClosedWhileIdleIsNotReused) {
  RpcServerOptions o;
  o.idle_timeout = 200ms;
  auto server = StartEchoServer(o);
  RpcClient client;
  ASSERT_TRUE(client.Call(Local(server->port()), kEchoType, "one", 5s).ok());
  ASSERT_TRUE(WaitFor([&] { return server->open_connections() == 0; }, 5s));
  ASSERT_EQ(client.idle_connections(), 1u);  // the client has not noticed yet
  Result<std::string> r = client.Call(Local(server->port()), kEchoType, "two", 5s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "two");
  EXPECT_EQ(server->connections_accepted(), 2u);
}

TEST(RpcClientTest, ResolvesHostNames) {
  auto server = StartEchoServer();
  RpcClient client;
  Result<std::string> r = client.Call(HostPort{"localhost", server->port()}, kEchoType, "n", 5s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "n");
}

TEST(RpcClientTest, RejectsBadArgumentsWithoutSending) {
  auto server = StartEchoServer();
  RpcClientOptions options;
  options.max_frame_bytes = 16;
  RpcClient client(options);
  EXPECT_EQ(client.Call(Local(server->port()), kEchoType, std::string(17, 'x'), 5s).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(client.Call(Local(server->port()), kEchoType, "x", 0ms).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(server->connections_accepted(), 0u);
}

// A hand-written peer: answers each connection's first request with `respond(request header)`
// and closes that connection; counts the connections it accepted.
class FakePeer {
 public:
  using Respond = std::function<std::string(const rpc::FrameHeader&)>;
  explicit FakePeer(Respond respond) {
    auto listener = rpc::ListenTcp("127.0.0.1", 0, 0);
    EXPECT_TRUE(listener.ok());
    port_ = listener->port;
    thread_ = std::thread([this, fd = std::move(listener->fd), respond]() {
      while (!stop_.load()) {
        pollfd p{fd.get(), POLLIN, 0};
        if (poll(&p, 1, 20) != 1) continue;
        rpc::UniqueFd conn(accept(fd.get(), nullptr, nullptr));
        if (!conn.valid()) continue;
        accepted_.fetch_add(1);
        auto request = RawReadFrame(conn.get());
        if (request.ok()) (void)RawSend(conn.get(), respond(request->first));
      }
    });
  }
  ~FakePeer() {
    stop_.store(true);
    thread_.join();
  }
  uint16_t port() const { return port_; }
  int accepted() const { return accepted_.load(); }

 private:
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

TEST(RpcClientTest, ResponseToAnotherRequestIsABadFrame) {
  FakePeer peer([](const rpc::FrameHeader& h) {
    rpc::FrameHeader r = h;
    r.request_id = h.request_id + 1;
    r.flags = rpc::kFlagResponse;
    return rpc::EncodeFrame(r, "not yours").value();
  });
  RpcClient client;
  Result<std::string> r = client.Call(Local(peer.port()), kEchoType, "x", 5s);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status();
  EXPECT_EQ(client.bad_frames(), 1u);
  EXPECT_EQ(client.idle_connections(), 0u);
}

TEST(RpcClientTest, GarbageResponseIsABadFrame) {
  FakePeer peer([](const rpc::FrameHeader&) { return std::string(rpc::kFrameHeaderSize, 'G'); });
  RpcClient client;
  Result<std::string> r = client.Call(Local(peer.port()), kEchoType, "x", 5s);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status();
  EXPECT_EQ(client.bad_frames(), 1u);
}

TEST(RpcClientTest, CorruptedResponseIsABadFrameNamingTheChecksum) {
  for (size_t at : {size_t{12}, rpc::kFrameHeaderSize + 3}) {  // header, then payload
    SCOPED_TRACE(at);
    FakePeer peer([at](const rpc::FrameHeader& h) {
      rpc::FrameHeader r = h;
      r.flags = rpc::kFlagResponse;
      std::string frame = rpc::EncodeFrame(r, "the answer").value();
      frame[at] = static_cast<char>(frame[at] ^ 0x04);
      return frame;
    });
    RpcClient client;
    Result<std::string> r = client.Call(Local(peer.port()), kEchoType, "x", 5s);
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status();
    EXPECT_NE(r.status().message().find("checksum mismatch"), std::string::npos) << r.status();
    EXPECT_EQ(client.bad_frames(), 1u);
    EXPECT_EQ(client.idle_connections(), 0u);  // never pooled
  }
}

TEST(RpcClientTest, ClosingNoticeFailsTheCallWithItsReason) {
  FakePeer peer([](const rpc::FrameHeader&) {
    return rpc::EncodeClosingNotice(
        InvalidArgumentError("rpc frame: payload checksum mismatch (test)"));
  });
  RpcClient client;
  Result<std::string> r = client.Call(Local(peer.port()), kEchoType, "x", 5s);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status();
  EXPECT_NE(r.status().message().find("payload checksum mismatch (test)"), std::string::npos)
      << r.status();
  EXPECT_EQ(client.idle_connections(), 0u);
}

TEST(RpcClientTest, ConnectionLostAfterSendingIsUnavailableAndNotRetried) {
  // Reads the request, answers nothing and closes: the request may have been processed.
  FakePeer peer([](const rpc::FrameHeader&) { return std::string(); });
  RpcClient client;
  Result<std::string> r = client.Call(Local(peer.port()), kEchoType, "x", 5s);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status();
  EXPECT_EQ(peer.accepted(), 1);
}

// A response header for `request` announcing `payload_len` bytes, followed by `sent` of them.
std::string AnnouncedResponse(const rpc::FrameHeader& request, uint32_t payload_len, size_t sent) {
  rpc::FrameHeader r = request;
  r.flags = rpc::kFlagResponse;
  r.payload_len = payload_len;
  std::string bytes(rpc::kFrameHeaderSize, '\0');
  rpc::EncodeFrameHeader(r, bytes.data());
  bytes.append(sent, 'p');
  return bytes;
}

TEST(RpcClientTest, ResponseAnnouncingMoreThanMaxFrameBytesIsABadFrameAndNotRead) {
  // The length is refused from the header alone: nothing of the payload is awaited.
  FakePeer peer([](const rpc::FrameHeader& h) { return AnnouncedResponse(h, 4097, 0); });
  RpcClientOptions options;
  options.max_frame_bytes = 4096;
  RpcClient client(options);
  const auto start = Clock::now();
  Result<std::string> r = client.Call(Local(peer.port()), kEchoType, "x", 5s);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status();
  EXPECT_NE(r.status().message().find("exceeds the limit"), std::string::npos) << r.status();
  EXPECT_EQ(client.bad_frames(), 1u);
  EXPECT_LT(Clock::now() - start, 4s);
}

TEST(RpcClientTest, LargeAnnouncedResponseCutShortIsUnavailable) {
  // 48 MiB announced (within the default limit), 100 KiB sent, then the peer closes: the
  // client reads what came into a buffer that grows with it and reports the loss.
  FakePeer peer(
      [](const rpc::FrameHeader& h) { return AnnouncedResponse(h, 48u << 20, 100 * 1024); });
  RpcClient client;
  Result<std::string> r = client.Call(Local(peer.port()), kEchoType, "x", 5s);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status();
  EXPECT_EQ(client.idle_connections(), 0u);
}

TEST(RpcClientTest, ResponseLargerThanTheFirstChunkArrivesWhole) {
  // A payload several times the first receive chunk (64 KiB) and not a multiple of it.
  const std::string big(300 * 1024 + 7, 'b');
  FakePeer peer([&big](const rpc::FrameHeader& h) {
    rpc::FrameHeader r = h;
    r.flags = rpc::kFlagResponse;
    return rpc::EncodeFrame(r, big).value();
  });
  RpcClient client;
  Result<std::string> r = client.Call(Local(peer.port()), kEchoType, "x", 5s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, big);
}

}  // namespace
}  // namespace ferry
