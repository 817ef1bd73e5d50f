#include "rpc/rpc_server.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "rpc/rpc_client.h"
#include "rpc/rpc_test_util.h"
#include "common/wait_for.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;
using rpc::FrameHeader;
using rpc::UniqueFd;
using rpc::testing::ClosedWithin;
using rpc::testing::kEchoType;
using rpc::testing::Local;
using rpc::testing::RawConnect;
using rpc::testing::RawReadFrame;
using rpc::testing::RawSend;
using rpc::testing::RequestFrame;
using rpc::testing::StartEchoServer;
using Clock = std::chrono::steady_clock;

// Echo on one persistent client; fails the test when the call fails.
void ExpectEcho(RpcClient& client, uint16_t port, const std::string& payload) {
  Result<std::string> r = client.Call(Local(port), kEchoType, payload, 5s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, payload);
}

TEST(RpcServerTest, EchoOverARawConnection) {
  auto server = StartEchoServer();
  ASSERT_NE(server, nullptr);
  UniqueFd fd = RawConnect(server->port());
  ASSERT_TRUE(RawSend(fd.get(), RequestFrame(kEchoType, 42, "ping")));
  auto frame = RawReadFrame(fd.get());
  ASSERT_TRUE(frame.ok()) << frame.status();
  EXPECT_EQ(frame->first.type, kEchoType);
  EXPECT_EQ(frame->first.request_id, 42u);
  EXPECT_EQ(frame->first.flags, rpc::kFlagResponse);
  EXPECT_EQ(frame->second, "ping");
  EXPECT_EQ(server->connections_accepted(), 1u);
}

TEST(RpcServerTest, PipelinedRequestsOnOneConnectionAreAnsweredInOrder) {
  std::atomic<bool> other_served{false};
  auto server = RpcServer::Create({}).value();
  // The first request is the slowest: it is answered only after a request on another
  // connection, sent after the whole burst, was served. A server that ran the burst's requests
  // side by side would answer the others first.
  ASSERT_TRUE(server
                  ->RegisterHandler(kEchoType,
                                    [&](std::string_view payload, const PeerInfo&) {
                                      if (payload == "0") {
                                        WaitFor([&] { return other_served.load(); }, 5s);
                                      }
                                      if (payload == "other") other_served = true;
                                      return Result<std::string>(std::string(payload));
                                    })
                  .ok());
  ASSERT_TRUE(server->Start().ok());
  UniqueFd fd = RawConnect(server->port());
  std::string burst;
  for (int i = 0; i < 8; ++i) burst += RequestFrame(kEchoType, 100 + i, std::to_string(i));
  ASSERT_TRUE(RawSend(fd.get(), burst));
  RpcClient other;
  ExpectEcho(other, server->port(), "other");
  for (int i = 0; i < 8; ++i) {
    auto frame = RawReadFrame(fd.get());
    ASSERT_TRUE(frame.ok()) << frame.status();
    EXPECT_EQ(frame->first.request_id, 100u + i);
    EXPECT_EQ(frame->second, std::to_string(i));
  }
}

TEST(RpcServerTest, UnknownTypeIsInvalidArgumentAndTheConnectionStaysOpen) {
  auto server = StartEchoServer();
  UniqueFd fd = RawConnect(server->port());
  ASSERT_TRUE(RawSend(fd.get(), RequestFrame(999, 1, "?")));
  auto error = RawReadFrame(fd.get());
  ASSERT_TRUE(error.ok()) << error.status();
  EXPECT_EQ(error->first.flags, rpc::kFlagResponse | rpc::kFlagError);
  EXPECT_EQ(rpc::DecodeErrorPayload(error->second).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(RawSend(fd.get(), RequestFrame(kEchoType, 2, "still here")));
  auto echo = RawReadFrame(fd.get());
  ASSERT_TRUE(echo.ok()) << echo.status();
  EXPECT_EQ(echo->second, "still here");
  EXPECT_EQ(server->bad_frames(), 0u);
}

TEST(RpcServerTest, HandlerSeesThePeerAndAThrowingHandlerIsInternal) {
  auto server = RpcServer::Create({}).value();
  ASSERT_TRUE(server
                  ->RegisterHandler(1,
                                    [](std::string_view, const PeerInfo& peer) {
                                      return Result<std::string>(
                                          peer.address.host + "#" +
                                          std::to_string(peer.connection_id));
                                    })
                  .ok());
  ASSERT_TRUE(server
                  ->RegisterHandler(2,
                                    [](std::string_view, const PeerInfo&) -> Result<std::string> {
                                      throw std::runtime_error("boom");
                                    })
                  .ok());
  ASSERT_TRUE(server->Start().ok());
  RpcClient a;
  RpcClient b;
  Result<std::string> from_a = a.Call(Local(server->port()), 1, "", 5s);
  Result<std::string> from_b = b.Call(Local(server->port()), 1, "", 5s);
  ASSERT_TRUE(from_a.ok() && from_b.ok());
  EXPECT_EQ(from_a->rfind("127.0.0.1#", 0), 0u);
  EXPECT_NE(*from_a, *from_b);  // distinct connection ids
  Result<std::string> thrown = a.Call(Local(server->port()), 2, "", 5s);
  EXPECT_EQ(thrown.status().code(), StatusCode::kInternal);
}

TEST(RpcServerTest, LifecycleRules) {
  auto server = RpcServer::Create({}).value();
  auto echo = [](std::string_view p, const PeerInfo&) {
    return Result<std::string>(std::string(p));
  };
  EXPECT_TRUE(server->RegisterHandler(5, echo).ok());
  EXPECT_EQ(server->RegisterHandler(5, echo).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(server->RegisterHandler(6, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(server->Start().ok());
  EXPECT_TRUE(server->Start().ok());
  EXPECT_EQ(server->RegisterHandler(7, echo).code(), StatusCode::kBusy);
  server->Stop();
  server->Stop();
  EXPECT_EQ(server->Start().code(), StatusCode::kBusy);
}

TEST(RpcServerTest, RejectsBadOptions) {
  RpcServerOptions o;
  o.port = 5000;
  o.port_range_end = 4999;
  EXPECT_EQ(RpcServer::Create(o).status().code(), StatusCode::kInvalidArgument);
  o = {};
  o.port_range_end = 5000;  // a range needs a start
  EXPECT_EQ(RpcServer::Create(o).status().code(), StatusCode::kInvalidArgument);
  o = {};
  o.max_frame_bytes = 0;
  EXPECT_EQ(RpcServer::Create(o).status().code(), StatusCode::kInvalidArgument);
  o = {};
  o.worker_threads = 0;
  EXPECT_EQ(RpcServer::Create(o).status().code(), StatusCode::kInvalidArgument);
  o = {};
  o.bind_host = "not a host";
  EXPECT_EQ(RpcServer::Create(o).status().code(), StatusCode::kInvalidArgument);
}

TEST(RpcServerTest, PortZeroPicksAFreePort) {
  auto a = RpcServer::Create({}).value();
  auto b = RpcServer::Create({}).value();
  EXPECT_NE(a->port(), 0);
  EXPECT_NE(b->port(), 0);
  EXPECT_NE(a->port(), b->port());
}

TEST(RpcServerTest, PortRangeMovesPastAnOccupiedPort) {
  // Occupy a port the kernel picked, and start the range there.
  auto occupied = rpc::ListenTcp("127.0.0.1", 0, 0);
  ASSERT_TRUE(occupied.ok()) << occupied.status();
  const uint16_t first = occupied->port;
  if (first > 65535 - 20) GTEST_SKIP() << "kernel picked a port at the top of the range";
  RpcServerOptions o;
  o.port = first;
  o.port_range_end = static_cast<uint16_t>(first + 20);
  auto server = RpcServer::Create(o);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_GT((*server)->port(), first);
  EXPECT_LE((*server)->port(), first + 20);

  o.port_range_end = first;  // a range of one, taken
  EXPECT_EQ(RpcServer::Create(o).status().code(), StatusCode::kUnavailable);

  // port 0 takes the fallback range (the engine's port_range); an explicit port wins over it.
  RpcServerOptions ranged;
  ranged.fallback_ports = {first, static_cast<uint16_t>(first + 20)};
  auto in_range = RpcServer::Create(ranged);
  ASSERT_TRUE(in_range.ok()) << in_range.status();
  EXPECT_GT((*in_range)->port(), first);
  EXPECT_LE((*in_range)->port(), first + 20);
  ranged.fallback_ports = {first, first};
  Result<std::unique_ptr<RpcServer>> exhausted = RpcServer::Create(ranged);
  EXPECT_EQ(exhausted.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(exhausted.status().message().find("no free port for rpc in port range"),
            std::string::npos)
      << exhausted.status();
  ranged.port = (*in_range)->port() + 1;
  auto explicit_port = RpcServer::Create(ranged);
  if (explicit_port.ok()) EXPECT_EQ((*explicit_port)->port(), ranged.port);
}

TEST(RpcServerTest, StalledClientBlocksNobodyAndIsClosedAfterIoTimeout) {
  RpcServerOptions o;
  o.io_timeout = 1500ms;
  o.worker_threads = 1;
  auto server = StartEchoServer(o);
  UniqueFd stalled = RawConnect(server->port());
  const std::string frame = RequestFrame(kEchoType, 1, "never finished");
  ASSERT_TRUE(RawSend(stalled.get(), frame.substr(0, 10)));  // half a header, then nothing
  const auto stalled_at = Clock::now();

  RpcClient client;
  for (int i = 0; i < 20; ++i) {
    const auto start = Clock::now();
    ExpectEcho(client, server->port(), "other " + std::to_string(i));
    EXPECT_LT(Clock::now() - start, 1s) << "a stalled client delayed another";
  }
  ASSERT_TRUE(ClosedWithin(stalled.get(), 5s));
  EXPECT_GE(Clock::now() - stalled_at, 1200ms);
  ExpectEcho(client, server->port(), "after");
  EXPECT_EQ(server->bad_frames(), 0u);
}

TEST(RpcServerTest, ClientThatNeverReadsItsResponseBlocksNobody) {
  RpcServerOptions o;
  o.io_timeout = 300ms;
  auto server = StartEchoServer(o);
  UniqueFd lazy = RawConnect(server->port());
  const int small = 4096;
  (void)setsockopt(lazy.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  // A 16 MiB response cannot fit in the socket buffers while nobody reads.
  ASSERT_TRUE(RawSend(lazy.get(), RequestFrame(kEchoType, 1, std::string(16 << 20, 'x'))));
  RpcClient client;
  for (int i = 0; i < 10; ++i) ExpectEcho(client, server->port(), "meanwhile");
  client.CloseIdleConnections();
  // The lazy connection goes once its response made no progress for io_timeout.
  EXPECT_TRUE(WaitFor([&] { return server->open_connections() == 0; }, 5s));
}

TEST(RpcServerTest, IdleConnectionIsClosedAfterIdleTimeout) {
  RpcServerOptions o;
  o.idle_timeout = 300ms;
  auto server = StartEchoServer(o);
  UniqueFd fd = RawConnect(server->port());
  ASSERT_TRUE(RawSend(fd.get(), RequestFrame(kEchoType, 1, "x")));
  ASSERT_TRUE(RawReadFrame(fd.get()).ok());
  const auto start = Clock::now();
  EXPECT_TRUE(ClosedWithin(fd.get(), 3s));
  EXPECT_GE(Clock::now() - start, 250ms);
}

TEST(RpcServerTest, GarbageClosesOnlyItsConnectionAndIsCounted) {
  auto server = StartEchoServer();
  RpcClient client;
  ExpectEcho(client, server->port(), "before");
  UniqueFd bad = RawConnect(server->port());
  ASSERT_TRUE(RawSend(bad.get(), std::string(rpc::kFrameHeaderSize, 'G')));
  EXPECT_TRUE(ClosedWithin(bad.get(), 3s));
  EXPECT_EQ(server->bad_frames(), 1u);
  ExpectEcho(client, server->port(), "after");  // the pooled connection was not touched
  EXPECT_EQ(server->connections_accepted(), 2u);
}

// Bytes corrupted in transit: the server never runs the request; it answers with a closing
// notice naming the checksum mismatch and closes, and other connections go on.
TEST(RpcServerTest, CorruptedRequestGetsAClosingNoticeAndIsNeverRun) {
  std::atomic<int> runs{0};
  Result<std::unique_ptr<RpcServer>> created = RpcServer::Create({});
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<RpcServer> server = std::move(created).value();
  ASSERT_TRUE(server
                  ->RegisterHandler(kEchoType + 1,
                                    [&runs](std::string_view payload, const PeerInfo&) {
                                      runs.fetch_add(1);
                                      return Result<std::string>(std::string(payload));
                                    })
                  .ok());
  ASSERT_TRUE(server->Start().ok());
  const std::string good = RequestFrame(kEchoType + 1, 1, "some request payload");
  struct Case {
    size_t at;
    const char* expect;
  };
  for (const Case& c : {Case{rpc::kFrameHeaderSize + 5, "payload checksum mismatch"},
                        Case{9, "header checksum mismatch"}}) {
    SCOPED_TRACE(c.expect);
    std::string bad = good;
    bad[c.at] = static_cast<char>(bad[c.at] ^ 0x20);
    UniqueFd fd = RawConnect(server->port());
    ASSERT_TRUE(RawSend(fd.get(), bad));
    auto notice = RawReadFrame(fd.get());
    ASSERT_TRUE(notice.ok()) << notice.status();
    EXPECT_TRUE(notice->first.is_notice());
    const Status why = rpc::DecodeErrorPayload(notice->second);
    EXPECT_NE(why.message().find(c.expect), std::string::npos) << why;
    EXPECT_TRUE(ClosedWithin(fd.get(), 3s));
  }
  EXPECT_EQ(server->bad_frames(), 2u);
  EXPECT_EQ(runs.load(), 0);
  RpcClient client;
  Result<std::string> r = client.Call(Local(server->port()), kEchoType + 1, "intact", 5s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "intact");
  EXPECT_EQ(runs.load(), 1);
}

TEST(RpcServerTest, PeerOfAnotherVersionIsRefusedOnItsFirstBytes) {
  // A version-1 header is shorter (24 bytes); the server must not wait for 32.
  RpcServerOptions o;
  o.io_timeout = 10s;
  auto server = StartEchoServer(o);
  std::string v1 = RequestFrame(kEchoType, 1, "").substr(0, 24);
  v1[4] = 1;
  UniqueFd fd = RawConnect(server->port());
  ASSERT_TRUE(RawSend(fd.get(), v1));
  auto notice = RawReadFrame(fd.get(), 3s);
  ASSERT_TRUE(notice.ok()) << notice.status();
  const Status why = rpc::DecodeErrorPayload(notice->second);
  EXPECT_NE(why.message().find("version 1"), std::string::npos) << why;
  EXPECT_TRUE(ClosedWithin(fd.get(), 3s));
}

TEST(RpcServerTest, ResponseFrameFromAClientIsABadFrame) {
  auto server = StartEchoServer();
  UniqueFd fd = RawConnect(server->port());
  FrameHeader h;
  h.type = kEchoType;
  h.flags = rpc::kFlagResponse;
  ASSERT_TRUE(RawSend(fd.get(), rpc::EncodeFrame(h, "").value()));
  EXPECT_TRUE(ClosedWithin(fd.get(), 3s));
  EXPECT_EQ(server->bad_frames(), 1u);
}

TEST(RpcServerTest, OversizedPayloadLenIsRejectedBeforeItsBytesArrive) {
  RpcServerOptions o;
  o.max_frame_bytes = 1024;
  o.io_timeout = 10s;  // a server waiting for the body would hold the connection this long
  auto server = StartEchoServer(o);

  FrameHeader h;
  h.type = kEchoType;
  h.payload_len = 0xffffffffu;  // 4 GiB that never come
  std::string header(rpc::kFrameHeaderSize, '\0');
  rpc::EncodeFrameHeader(h, header.data());
  UniqueFd huge = RawConnect(server->port());
  ASSERT_TRUE(RawSend(huge.get(), header));
  EXPECT_TRUE(ClosedWithin(huge.get(), 2s));
  EXPECT_EQ(server->bad_frames(), 1u);

  UniqueFd just_over = RawConnect(server->port());
  ASSERT_TRUE(RawSend(just_over.get(), RequestFrame(kEchoType, 1, std::string(1025, 'x'))));
  EXPECT_TRUE(ClosedWithin(just_over.get(), 2s));
  EXPECT_EQ(server->bad_frames(), 2u);

  UniqueFd at_limit = RawConnect(server->port());
  ASSERT_TRUE(RawSend(at_limit.get(), RequestFrame(kEchoType, 1, std::string(1024, 'x'))));
  auto echo = RawReadFrame(at_limit.get());
  ASSERT_TRUE(echo.ok()) << echo.status();
  EXPECT_EQ(echo->second.size(), 1024u);
}

TEST(RpcServerTest, ConnectionsBeyondTheCapAreClosed) {
  RpcServerOptions o;
  o.max_connections = 2;
  auto server = StartEchoServer(o);
  UniqueFd a = RawConnect(server->port());
  UniqueFd b = RawConnect(server->port());
  for (int fd : {a.get(), b.get()}) {
    ASSERT_TRUE(RawSend(fd, RequestFrame(kEchoType, 1, "in")));
    ASSERT_TRUE(RawReadFrame(fd).ok());
  }
  UniqueFd c = RawConnect(server->port());
  EXPECT_TRUE(ClosedWithin(c.get(), 3s));
  EXPECT_EQ(server->connections_rejected(), 1u);
  a.Reset();  // frees a slot once the server sees the close
  ASSERT_TRUE(WaitFor([&] { return server->open_connections() < 2; }, 5s));
  UniqueFd d = RawConnect(server->port());
  ASSERT_TRUE(RawSend(d.get(), RequestFrame(kEchoType, 1, "d")));
  EXPECT_TRUE(RawReadFrame(d.get()).ok());
  EXPECT_EQ(server->connections_rejected(), 1u);
}

TEST(RpcServerTest, StopWithCallsInFlightReturnsPromptly) {
  RpcServerOptions o;
  o.worker_threads = 2;
  auto server = RpcServer::Create(o).value();
  std::atomic<int> entered{0};
  std::atomic<int> returned{0};
  ASSERT_TRUE(server
                  ->RegisterHandler(kEchoType,
                                    [&](std::string_view p, const PeerInfo&) {
                                      entered.fetch_add(1);
                                      // Still running when Stop() closes the connections: it
                                      // returns once every caller has seen its connection close.
                                      WaitFor([&] { return returned.load() == 8; }, 10s);
                                      return Result<std::string>(std::string(p));
                                    })
                  .ok());
  ASSERT_TRUE(server->Start().ok());
  UniqueFd stalled = RawConnect(server->port());
  ASSERT_TRUE(RawSend(stalled.get(), "FRY1"));

  RpcClient client;
  std::vector<std::thread> callers;
  for (int i = 0; i < 8; ++i) {
    callers.emplace_back([&] {
      (void)client.Call(Local(server->port()), kEchoType, "x", 20s);
      returned.fetch_add(1);
    });
  }
  EXPECT_TRUE(WaitFor([&] { return entered.load() >= 2; }, 5s));

  const auto start = Clock::now();
  server->Stop();
  EXPECT_LT(Clock::now() - start, 1s);
  for (std::thread& t : callers) t.join();  // each sees its connection close, not its timeout
  EXPECT_LT(Clock::now() - start, 2s);
  EXPECT_EQ(returned.load(), 8);
  EXPECT_TRUE(ClosedWithin(stalled.get(), 1s));
}

}  // namespace
}  // namespace ferry
