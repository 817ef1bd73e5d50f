// The RPC service with a cluster secret (common/peer_auth.h), over real sockets on 127.0.0.1:
// the same secret is served; another secret, a missing one, or a secret a server does not use is
// refused with PermissionDenied on both ends, the handler never runs, and the server logs the
// refusal once per peer address.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>

#include "common/peer_auth.h"
#include "common/wait_for.h"
#include "rpc/rpc_client.h"
#include "rpc/rpc_server.h"
#include "rpc/rpc_test_util.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;
using rpc::UniqueFd;
using rpc::testing::ClosedWithin;
using rpc::testing::RawConnect;
using rpc::testing::RawSend;

constexpr uint16_t kCountType = 101;
constexpr char kSecret[] = "the cluster secret, 32 bytes ...";
constexpr char kOther[] = "some other secret of 32 bytes ..";

// A server whose handler counts its calls (a side effect a refused peer must not cause).
struct CountingServer {
  std::unique_ptr<RpcServer> server;
  std::atomic<int> calls{0};

  explicit CountingServer(const std::string& secret, std::chrono::milliseconds io_timeout = 5s) {
    RpcServerOptions options;
    options.auth_secret = secret;
    options.io_timeout = io_timeout;
    Result<std::unique_ptr<RpcServer>> made = RpcServer::Create(options);
    EXPECT_TRUE(made.ok()) << made.status();
    if (!made.ok()) return;
    server = std::move(made).value();
    EXPECT_TRUE(server
                    ->RegisterHandler(kCountType,
                                      [this](std::string_view payload, const PeerInfo&) {
                                        calls.fetch_add(1);
                                        return Result<std::string>(std::string(payload));
                                      })
                    .ok());
    EXPECT_TRUE(server->Start().ok());
  }
  HostPort address() const { return HostPort{"127.0.0.1", server->port()}; }
};

RpcClient ClientWith(const std::string& secret) {
  RpcClientOptions options;
  options.auth_secret = secret;
  return RpcClient(options);
}

TEST(RpcAuthTest, TheSameSecretIsServedAndConnectionsAreReused) {
  CountingServer s(kSecret);
  ASSERT_NE(s.server, nullptr);
  RpcClient client = ClientWith(kSecret);
  for (int i = 0; i < 3; ++i) {
    Result<std::string> r = client.Call(s.address(), kCountType, "hi", 5s);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(*r, "hi");
  }
  EXPECT_EQ(s.calls.load(), 3);
  EXPECT_EQ(s.server->connections_accepted(), 1u);  // one handshake, then pooled
  EXPECT_EQ(s.server->auth_refusals(), 0u);
}

TEST(RpcAuthTest, AnotherSecretIsRefusedOnBothEndsAndRunsNothing) {
  CountingServer s(kSecret);
  ASSERT_NE(s.server, nullptr);
  RpcClient client = ClientWith(kOther);
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 5; ++i) {
    Result<std::string> r = client.Call(s.address(), kCountType, "hi", 5s);
    ASSERT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status();
    EXPECT_NE(r.status().message().find("failed authentication"), std::string::npos)
        << r.status();
  }
  ASSERT_TRUE(WaitFor([&] { return s.server->auth_refusals() == 5; }, 5s));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(s.calls.load(), 0);
  EXPECT_EQ(client.idle_connections(), 0u);
  // Five refusals of one address: one line.
  size_t lines = 0;
  for (size_t at = log.find("refused 127.0.0.1"); at != std::string::npos;
       at = log.find("refused 127.0.0.1", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 1u) << log;
}

TEST(RpcAuthTest, AClientWithoutTheSecretIsRefused) {
  CountingServer s(kSecret);
  ASSERT_NE(s.server, nullptr);
  RpcClient client;  // no secret: today's protocol
  Result<std::string> r = client.Call(s.address(), kCountType, "hi", 5s);
  ASSERT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status();
  EXPECT_NE(r.status().message().find("requires authentication"), std::string::npos)
      << r.status();
  ASSERT_TRUE(WaitFor([&] { return s.server->auth_refusals() == 1; }, 5s));
  EXPECT_EQ(s.calls.load(), 0);
}

TEST(RpcAuthTest, AServerWithoutASecretRefusesAClientThatRequiresOne) {
  CountingServer s("");
  ASSERT_NE(s.server, nullptr);
  RpcClient client = ClientWith(kSecret);
  Result<std::string> r = client.Call(s.address(), kCountType, "hi", 5s);
  ASSERT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status();
  EXPECT_NE(r.status().message().find("it has no auth secret"), std::string::npos)
      << r.status();
  ASSERT_TRUE(WaitFor([&] { return s.server->auth_refusals() == 1; }, 5s));
  EXPECT_EQ(s.calls.load(), 0);
  // Without secrets on either side nothing changed.
  RpcClient plain;
  Result<std::string> ok = plain.Call(s.address(), kCountType, "hi", 5s);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(s.calls.load(), 1);
}

TEST(RpcAuthTest, AStalledHandshakeIsClosedWithinTheIoTimeout) {
  CountingServer s(kSecret, 300ms);
  ASSERT_NE(s.server, nullptr);
  UniqueFd fd = RawConnect(s.server->port());
  ASSERT_TRUE(RawSend(fd.get(), "FAUT\x01\x01"));  // the start of a hello, then nothing
  EXPECT_TRUE(ClosedWithin(fd.get(), 5s));
  EXPECT_EQ(s.calls.load(), 0);
}

TEST(RpcAuthTest, GarbageInPlaceOfAHelloIsRefused) {
  CountingServer s(kSecret);
  ASSERT_NE(s.server, nullptr);
  UniqueFd fd = RawConnect(s.server->port());
  ASSERT_TRUE(RawSend(fd.get(), std::string(auth::kMessageSize, 'G')));
  EXPECT_TRUE(ClosedWithin(fd.get(), 5s));
  ASSERT_TRUE(WaitFor([&] { return s.server->auth_refusals() == 1; }, 5s));
  EXPECT_EQ(s.calls.load(), 0);
}

TEST(RpcAuthTest, AShortSecretIsABadOption) {
  RpcServerOptions options;
  options.auth_secret = "short";
  EXPECT_EQ(RpcServer::Create(options).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ferry
