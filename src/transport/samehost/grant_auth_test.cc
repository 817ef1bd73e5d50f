// The grant channel with a cluster secret (GrantAuth, common/peer_auth.h), over real Unix
// sockets: the same secret is granted; another secret, a missing one, or one the server does
// not use is PermissionDenied on both ends, pins nothing, and is logged once per peer process.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/peer_auth.h"
#include "common/unique_fd.h"
#include "common/wait_for.h"
#include "transport/conformance/test_context.h"
#include "transport/samehost/grant_channel.h"
#include "transport/samehost/grant_test_fixture.h"

namespace ferry::samehost {
namespace {

using std::chrono::milliseconds;

constexpr char kSecret[] = "the cluster secret, 32 bytes ...";
constexpr char kOther[] = "some other secret of 32 bytes ..";

class GrantAuthTest : public GrantServerFixture {
 protected:
  void StartServer(const std::string& secret, milliseconds reply_timeout = kGrantTestTimeout) {
    GrantServer::Options options;
    options.auth_secret = secret;
    options.reply_timeout = reply_timeout;
    GrantServerFixture::StartServer(std::move(options));
  }

  Result<std::unique_ptr<GrantConnection>> Connect(const std::string& secret) {
    return GrantConnection::Connect(server_->path(), kGrantTestTimeout, GrantAuth{secret, "shm"});
  }

  // One Acquire of a range of the region; its overall status, or the range's answer.
  Status AcquireOne(GrantConnection& conn) {
    const RangeRequest range{reinterpret_cast<uint64_t>(region_.data()), 64, kGrantTestIncarnation,
                             3};
    std::vector<Status> results;
    Status s = conn.Acquire(std::span<const RangeRequest>(&range, 1), &results, kGrantTestTimeout);
    if (!s.ok()) return s;
    return results.at(0);
  }

  void ExpectRefusedByServer() {
    EXPECT_TRUE(WaitFor([&] { return server_->auth_refusals() == 1; }, kGrantTestTimeout));
    EXPECT_EQ(ctx_.active_pins(), 0);
    EXPECT_EQ(server_->held_pins(), 0);
  }
};

TEST_F(GrantAuthTest, TheSameSecretIsGranted) {
  StartServer(kSecret);
  Result<std::unique_ptr<GrantConnection>> conn = Connect(kSecret);
  ASSERT_TRUE(conn.ok()) << conn.status();
  EXPECT_TRUE(AcquireOne(**conn).ok());
  EXPECT_EQ(server_->held_pins(), 1);
  EXPECT_TRUE((*conn)->Release().ok());
  EXPECT_TRUE(WaitFor([&] { return server_->held_pins() == 0; }, kGrantTestTimeout));
  EXPECT_EQ(server_->auth_refusals(), 0u);
}

TEST_F(GrantAuthTest, AnotherSecretIsRefusedOnBothEnds) {
  StartServer(kSecret);
  Result<std::unique_ptr<GrantConnection>> conn = Connect(kOther);
  ASSERT_EQ(conn.status().code(), StatusCode::kPermissionDenied) << conn.status();
  EXPECT_NE(conn.status().message().find("failed authentication"), std::string::npos)
      << conn.status();
  ExpectRefusedByServer();
}

TEST_F(GrantAuthTest, AClientWithoutTheSecretIsRefusedAtItsFirstRequest) {
  StartServer(kSecret);
  Result<std::unique_ptr<GrantConnection>> conn = Connect("");
  ASSERT_TRUE(conn.ok()) << conn.status();  // no handshake: nothing to refuse yet
  const Status s = AcquireOne(**conn);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("requires authentication"), std::string::npos) << s;
  EXPECT_TRUE((*conn)->broken());
  ExpectRefusedByServer();
}

TEST_F(GrantAuthTest, AServerWithoutASecretRefusesAClientThatRequiresOne) {
  StartServer("");
  Result<std::unique_ptr<GrantConnection>> conn = Connect(kSecret);
  ASSERT_EQ(conn.status().code(), StatusCode::kPermissionDenied) << conn.status();
  EXPECT_NE(conn.status().message().find("it has no auth secret"), std::string::npos)
      << conn.status();
  ExpectRefusedByServer();
  // Without secrets on either side the channel works as before.
  Result<std::unique_ptr<GrantConnection>> plain = Connect("");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_TRUE(AcquireOne(**plain).ok());
}

TEST_F(GrantAuthTest, RefusalsAreLoggedOncePerPeerProcess) {
  StartServer(kSecret);
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(Connect(kOther).status().code(), StatusCode::kPermissionDenied);
  }
  const bool counted = WaitFor([&] { return server_->auth_refusals() == 5; }, kGrantTestTimeout);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(counted);
  size_t lines = 0;
  for (size_t at = log.find("refused pid"); at != std::string::npos;
       at = log.find("refused pid", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 1u) << log;
}

TEST_F(GrantAuthTest, AStalledHandshakeIsClosedWithinTheReplyTimeout) {
  StartServer(kSecret, milliseconds(300));
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, server_->path().c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  timeval tv{5, 0};
  ASSERT_EQ(::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
  ASSERT_EQ(::send(fd.get(), "FAUT\x01\x01", 6, MSG_NOSIGNAL), 6);  // then nothing
  char byte = 0;
  EXPECT_EQ(::recv(fd.get(), &byte, 1, 0), 0);  // closed by the server, not by our timeout
  EXPECT_TRUE(WaitFor([&] { return server_->auth_refusals() == 1; }, kGrantTestTimeout));
}

}  // namespace
}  // namespace ferry::samehost
